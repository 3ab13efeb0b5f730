// Package micros converts between time values and the integer microseconds
// of every algorithm step.
package micros

import "time"

// Of converts a time to Unix microseconds.
func Of(t time.Time) int64 { return t.UnixMicro() }

// Dur converts microseconds to a Duration, saturating instead of overflowing.
func Dur(us int64) time.Duration {
	const maxUs = int64(1<<63-1) / 1000
	switch {
	case us <= 0:
		return 0
	case us >= maxUs:
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(us) * time.Microsecond
}
