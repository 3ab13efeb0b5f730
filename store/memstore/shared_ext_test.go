package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// TestSharedPathAdmitsExactlyBurst races takes and peeks on a few hot keys
// (decided without the shard's lock when they deny or peek, written under
// it only if nothing changed meanwhile) with goroutines that insert and
// remove other keys of the same shard (displacing the hot keys' slots,
// growing and shrinking the table) and sweeps, on a clock that does not
// move: each hot key must admit exactly its burst, every decision must
// keep the invariants, and the Remaining one goroutine sees on a key must
// never grow.
func TestSharedPathAdmitsExactlyBurst(t *testing.T) {
	const (
		burst   = 20_000
		hot     = 2
		takers  = 4
		perTake = 20_000
	)
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithSweepInterval(0))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: burst})
	ctx := context.Background()
	var admitted [hot]atomic.Int64
	var wg, churn sync.WaitGroup
	var stop atomic.Bool
	start := make(chan struct{})
	for g := range takers {
		wg.Go(func() {
			<-start
			seen := [hot]int64{burst, burst}
			for i := range perTake {
				k := (g + i) % hot
				key := fmt.Sprint("hot", k)
				n := 1
				if i%5 == 0 {
					n = 0
				}
				var d floodgate.Decision
				var err error
				if n == 0 {
					d, err = l.Peek(ctx, key)
				} else {
					d, err = l.Take(ctx, key, n)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed != (d.RetryAfter == 0) || d.Remaining < 0 || d.Remaining > d.Limit || d.Limit != burst {
					t.Errorf("%s: decision %+v breaks an invariant", key, d)
					return
				}
				if d.Remaining > seen[k] {
					t.Errorf("%s: Remaining went from %d up to %d on a stopped clock", key, seen[k], d.Remaining)
					return
				}
				seen[k] = d.Remaining
				if n == 1 && d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	for g := range 2 {
		churn.Go(func() {
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprint("churn", g, "/", i%50)
				if _, err := l.Take(ctx, key, 1); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					// Back to full: the key is removed (a backward shift).
					if err := l.Refund(ctx, key, 1); err != nil {
						t.Error(err)
						return
					}
				}
				if i%97 == 0 {
					s.Sweep()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	stop.Store(true)
	churn.Wait()
	for k := range hot {
		if got := admitted[k].Load(); got != burst {
			t.Errorf("hot%d admitted %d, want exactly the burst %d", k, got, burst)
		}
	}
}
