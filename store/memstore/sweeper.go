package memstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// sweeper is the background sweeper of a Store and what it needs: a sweep
// of the shards (which holds them and the clock, never the *Store itself),
// so that a Store dropped without Close becomes unreachable and the cleanup
// New registers on it can stop the goroutine.
//
// The goroutine starts with the first insert (a store that never keeps a
// key never has one) and stops at halt, from Close or from the cleanup.
type sweeper struct {
	sweepShards func() // see sweepFunc
	every       time.Duration
	sweeps      atomic.Uint64

	// armed is set once arm has nothing left to do (the goroutine runs,
	// has run, or never will): the insert path reads only this.
	armed   atomic.Bool
	mu      sync.Mutex
	started bool
	halted  bool
	stop    chan struct{} // closed by halt
	done    chan struct{} // closed when the goroutine returns
}

// newSweeper returns the sweeper of shards on clock, every interval (0: no
// background goroutine, sweeps only on demand).
func newSweeper(shards []paddedShard, clock timeSource, every time.Duration) *sweeper {
	w := &sweeper{sweepShards: sweepFunc(shards, clock), every: every}
	if every > 0 {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
	} else {
		w.armed.Store(true)
	}
	return w
}

// arm starts the goroutine unless it was started or halted before. It is
// called on every insert, under a shard's lock (which the goroutine takes
// only once it runs, never while arm holds mu).
func (w *sweeper) arm() {
	if w.armed.Load() {
		return
	}
	w.mu.Lock()
	if !w.started && !w.halted {
		w.started = true
		go w.loop()
	}
	w.armed.Store(true)
	w.mu.Unlock()
}

// halt stops the goroutine, or keeps it from ever starting, and returns the
// channel closed when it has returned (nil when it never started). It does
// not wait: the cleanup calls it too.
func (w *sweeper) halt() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed.Store(true)
	if w.halted || w.stop == nil {
		return nil
	}
	w.halted = true
	close(w.stop)
	if !w.started {
		return nil
	}
	return w.done
}

func (w *sweeper) loop() {
	defer close(w.done)
	tk := time.NewTicker(w.every)
	defer tk.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tk.C:
			w.sweep()
		}
	}
}

// sweep drops every key whose state is back to full now and counts the
// sweep.
func (w *sweeper) sweep() {
	w.sweepShards()
	w.sweeps.Add(1)
}

// sweepFunc returns the sweep of shards: every key whose state is back to
// full at clock's time is dropped, one shard at a time. (A function value,
// not a field of type []paddedShard: a shard points to its sweeper, and the
// padding of paddedShard needs the size of shard.)
func sweepFunc(shards []paddedShard, clock timeSource) func() {
	return func() {
		for i := range shards {
			sh := &shards[i].shard
			sh.mu.Lock()
			now := clock.micros()
			for k := range sh.tables {
				if t := &sh.tables[k]; t.n > 0 {
					r := t.sweep(now)
					sh.keys -= r
					sh.expired += uint64(r)
				}
			}
			sh.mu.Unlock()
		}
	}
}
