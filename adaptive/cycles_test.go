package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
)

var errBadRequest = errors.New("bad request")

// seesaw is an algorithm whose limit goes 1, 2, 3, 2, 1, 2, ... window after
// window, so that limit changes race with everything else.
type seesaw struct{ n int }

func (s *seesaw) InitialLimit() int { return 2 }
func (s *seesaw) Update(adaptive.Sample) int {
	s.n++
	return []int{1, 2, 3, 2}[s.n%4]
}

// TestMillionCycles runs 1,000,000 acquire/release cycles from 4 goroutines
// on a limit that moves between 1 and 3 every millisecond window, with a
// queue of 1, mixing every way a request can end:
// success, drop, ignore (a failed call), a panic in the handler, a context
// cancelled while the handler runs, and a context that expires while the
// request waits in the queue. Every admitted token must be released exactly
// once and the gate must end with nothing in flight or queued.
func TestMillionCycles(t *testing.T) {
	const (
		goroutines = 4
		cycles     = 1_000_000
	)
	l := must(adaptive.NewGate(&seesaw{}, adaptive.WithQueue(1, adaptive.LIFO), adaptive.WithWindow(1, time.Millisecond), adaptive.WithMinRTT(0)))
	var attempts, panics, cancelled, expired atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			bg := context.Background()
			var n int64
			defer func() { attempts.Add(n) }()
			for i := g; i < cycles; i += goroutines {
				n++
				// Every goroutine takes every kind of ending in turn (with
				// i % 16, one goroutine alone would make the handler panic,
				// and a goroutine starved of slots for the whole run would
				// leave that ending untried: 1 run in 200).
				kind := (i / goroutines) % 16
				switch kind {
				case 12: // panic in the handler
					func() {
						defer func() {
							if recover() != nil {
								panics.Add(1)
							}
						}()
						_ = l.Do(bg, func(context.Context) error { panic("handler bug") })
					}()
				case 13: // the context expires in the queue (or is not needed)
					ctx, cancel := context.WithTimeout(bg, 20*time.Microsecond)
					switch err := l.Do(ctx, func(context.Context) error { return nil }); {
					case errors.Is(err, adaptive.ErrLimitExceeded) && errors.Is(err, context.DeadlineExceeded):
						cancelled.Add(1)
					case errors.Is(err, context.DeadlineExceeded):
						expired.Add(1) // expired before Acquire: neither admitted nor rejected
					}
					cancel()
				case 14: // the client cancels while the handler runs
					ctx, cancel := context.WithCancel(bg)
					_ = l.Do(ctx, func(ctx context.Context) error { cancel(); return ctx.Err() })
				default:
					_ = l.Do(bg, func(context.Context) error {
						switch kind {
						case 8, 9:
							return adaptive.ErrDropped
						case 10, 11:
							return errBadRequest
						}
						return nil
					})
				}
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("%d cycles in %v: %+v; %d handler panics, %d queue timeouts", attempts.Load(), time.Since(start).Round(time.Millisecond), st, panics.Load(), cancelled.Load())
	if st.InFlight != 0 || st.Queued != 0 {
		t.Fatalf("in flight %d, queued %d after all cycles", st.InFlight, st.Queued)
	}
	if ended := st.Succeeded + st.Dropped + st.Ignored; ended != st.Admitted {
		t.Fatalf("admitted %d but ended %d", st.Admitted, ended)
	}
	if got := int64(st.Admitted+st.Rejected) + expired.Load(); got != attempts.Load() {
		t.Fatalf("admitted+rejected+expired = %d, attempts %d", got, attempts.Load())
	}
	if panics.Load() == 0 || st.Dropped == 0 || st.Ignored == 0 || st.Succeeded == 0 || st.Windows < 10 {
		t.Fatalf("a kind of ending never happened: %+v, %d panics", st, panics.Load())
	}
}
