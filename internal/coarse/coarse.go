// Package coarse is a cached reading of [monotime.Nanotime], refreshed by
// one goroutine at a fixed resolution, for the hot paths that opt in to a
// clock that costs one atomic load instead of a clock read (memstore's
// WithCoarseClock).
//
// A Clock is shared by every user of one resolution in the process and runs
// its goroutine only while at least one user holds it ([Acquire] /
// [Clock.Release]). Its readings never go backwards and are never ahead of
// monotime.Nanotime; they lag it by up to the resolution, plus the time the
// refreshing goroutine waits for a processor when every processor is busy.
package coarse

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/monotime"
)

// Clock is a shared coarse clock. Its methods are safe for concurrent use.
type Clock struct {
	micros atomic.Int64 // monotime.Nanotime / 1000 at the last refresh
	res    time.Duration

	// Guarded by clocks.mu.
	users int
	stop  chan struct{}
	done  chan struct{}
}

var clocks struct {
	mu sync.Mutex
	by map[time.Duration]*Clock
}

// Acquire returns the clock of resolution res (res > 0), starting its
// goroutine if no one holds it. Every Acquire must be paired with one
// Release.
func Acquire(res time.Duration) *Clock {
	clocks.mu.Lock()
	defer clocks.mu.Unlock()
	if clocks.by == nil {
		clocks.by = map[time.Duration]*Clock{}
	}
	c := clocks.by[res]
	if c == nil {
		c = &Clock{res: res}
		clocks.by[res] = c
	}
	c.users++
	if c.users == 1 {
		c.refresh()
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.loop(c.stop, c.done)
	}
	return c
}

// Release gives back a clock obtained from Acquire; the last release stops
// its goroutine and waits for it to return.
func (c *Clock) Release() {
	clocks.mu.Lock()
	c.users--
	if c.users > 0 {
		clocks.mu.Unlock()
		return
	}
	stop, done := c.stop, c.done
	c.stop, c.done = nil, nil
	clocks.mu.Unlock()
	close(stop)
	<-done
}

// Micros returns the cached reading in Unix microseconds.
func (c *Clock) Micros() int64 { return c.micros.Load() }

// Resolution returns the refresh interval.
func (c *Clock) Resolution() time.Duration { return c.res }

// refresh stores the time now; it never moves the reading backwards (two
// goroutines of one clock may overlap for an instant after a Release and
// an Acquire).
func (c *Clock) refresh() {
	now := monotime.Nanotime() / 1000
	for {
		old := c.micros.Load()
		if now <= old || c.micros.CompareAndSwap(old, now) {
			return
		}
	}
}

func (c *Clock) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tk := time.NewTicker(c.res)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			c.refresh()
		}
	}
}

// Running reports whether c's goroutine runs (for tests).
func (c *Clock) Running() bool {
	clocks.mu.Lock()
	defer clocks.mu.Unlock()
	return c.stop != nil
}
