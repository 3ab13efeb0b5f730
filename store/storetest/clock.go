package storetest

import (
	"sync/atomic"
	"time"
)

// Clock is a manual clock for the stores under test: it stands still until
// [Clock.Advance] moves it. It implements [floodgate.Clock] and is safe for
// concurrent use.
type Clock struct {
	ns atomic.Int64 // Unix nanoseconds
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(start.UnixNano())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock by d (which may be negative: a clock jump).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }
