package floodgate

import (
	"fmt"
	"time"
)

// Rate is an exact rate: N units per period Per. "100 per minute" is
// Rate{N: 100, Per: time.Minute}. Keeping the two integers (instead of a float
// per second) lets the keyed algorithms compute with integers and lets a
// policy be printed the way it was written.
type Rate struct {
	// N is the number of units (requests, or cost units) per period. N > 0.
	N int64
	// Per is the period. Per > 0.
	Per time.Duration
}

// PerSecond returns the rate of n units per second.
func PerSecond(n int64) Rate { return Rate{N: n, Per: time.Second} }

// PerMinute returns the rate of n units per minute.
func PerMinute(n int64) Rate { return Rate{N: n, Per: time.Minute} }

// PerHour returns the rate of n units per hour.
func PerHour(n int64) Rate { return Rate{N: n, Per: time.Hour} }

// Validate reports an error wrapping [ErrInvalidConfig] unless N > 0 and
// Per > 0.
func (r Rate) Validate() error {
	if r.N <= 0 {
		return fmt.Errorf("%w: rate needs N > 0, got %d", ErrInvalidConfig, r.N)
	}
	if r.Per <= 0 {
		return fmt.Errorf("%w: rate needs Per > 0, got %v", ErrInvalidConfig, r.Per)
	}
	return nil
}

// String formats the rate as "100/1m0s".
func (r Rate) String() string { return fmt.Sprintf("%d/%v", r.N, r.Per) }
