// Package monotime is floodgate's clock reading: Go's monotonic clock offset
// to wall time once, at program start, so that its readings never go
// backwards even when the wall clock is stepped, and cost about half of a
// plain [time.Now]. Every store and limiter that is given no clock reads it.
//
// It agrees with [floodgate.SystemClock] to within the instant between the
// two packages' initialisations (both offset the same monotonic clock).
package monotime

import "time"

var (
	bootWall = time.Now()
	bootNano = bootWall.UnixNano()
)

// Nanotime returns the time as Unix nanoseconds: monotonic, never
// backwards, no allocation.
func Nanotime() int64 { return bootNano + int64(time.Since(bootWall)) }
