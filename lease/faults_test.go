package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// TestRedisKilled kills its own redis-server (SIGKILL) under a steady load
// of 2,000 requests per second on one key, and restarts it 600ms later on
// the same port. While Redis is away: no decision takes longer than the
// store's timeout (plus scheduling slack), none returns an error, the
// lease is spent first (admitted, not Fallback), then every decision is
// the configured failure outcome (the store failing closed, or the divided
// fallback over a store that reports its failures). After the restart: leased decisions
// again within a second.
func TestRedisKilled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		divided bool
	}{{"store policy fail-closed", false}, {"divided fallback", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rp := startRedis(t)
			client := dial(t, rp.addr())
			const timeout = 50 * time.Millisecond
			// The divided fallback with a store that reports its failures
			// (FailError, as documented): a store that fails closed itself
			// decides the direct calls it cannot make, as its own policy.
			fp := redisstore.FailError()
			if !tc.divided {
				fp = redisstore.FailClosed(time.Second)
			}
			st := newStore(t, client, redisstore.WithTimeout(timeout), redisstore.WithFailurePolicy(fp))
			var observed, observedUnavailable, allFallback atomic.Int64
			l := newLease(t, st, lease.Config{
				Bucket:             bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(100_000), Burst: 100_000},
				StoreFailurePolicy: !tc.divided,
				Observer: floodgate.ObserverFunc(func(e floodgate.Event) {
					if e.Source == floodgate.SourceStore && e.Outcome == floodgate.OutcomeFallback && e.Decision.Fallback {
						observed.Add(1)
						if errors.Is(e.Err, floodgate.ErrStoreUnavailable) {
							observedUnavailable.Add(1)
						}
					}
				}),
			})
			var (
				mu                    sync.Mutex
				phase                 atomic.Int32 // 0 up, 1 down, 2 restarted
				maxLatency            time.Duration
				errs, downAllowedHeld int64
				downFallback          int64
				downDeniedNoFallback  int64
				recoveredAt           time.Time
				restartAt             time.Time
			)
			ctx := context.Background()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next := time.Now().Add(time.Duration(g) * 500 * time.Microsecond)
					for {
						select {
						case <-stop:
							return
						default:
						}
						time.Sleep(time.Until(next))
						next = next.Add(4 * time.Millisecond) // 250/s per goroutine
						p := phase.Load()
						t0 := time.Now()
						d, err := l.Take(ctx, "k", 1)
						lat := time.Since(t0)
						if d.Fallback {
							allFallback.Add(1)
						}
						mu.Lock()
						maxLatency = max(maxLatency, lat)
						switch {
						case err != nil:
							errs++
						case p == 1 && d.Fallback:
							downFallback++
							if !tc.divided && d.Allowed {
								downDeniedNoFallback++ // fail-closed admitted: wrong
							}
						case p == 1 && d.Allowed:
							downAllowedHeld++
						case p == 1:
							downDeniedNoFallback++
						case p == 2 && d.Allowed && !d.Fallback && recoveredAt.IsZero():
							recoveredAt = time.Now()
						}
						mu.Unlock()
					}
				}()
			}
			time.Sleep(400 * time.Millisecond)
			// Kill while the lease holds a few tokens (a renewal may be
			// in flight at any one moment, with the lease nearly spent).
			for range 100 {
				if l.Stats().Held >= 50 {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			if s := l.Stats(); s.Leased != 1 || s.Held < 50 {
				t.Fatalf("not leasing before the kill: %+v", s)
			}
			phase.Store(1)
			rp.kill()
			time.Sleep(600 * time.Millisecond)
			rp.start()
			mu.Lock()
			restartAt = time.Now()
			mu.Unlock()
			phase.Store(2)
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				mu.Lock()
				done := !recoveredAt.IsZero()
				mu.Unlock()
				if done {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			// A few more leased decisions, then stop.
			time.Sleep(100 * time.Millisecond)
			close(stop)
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			s := l.Stats()
			t.Logf("max decision latency %v; while down: %d admitted from the lease, %d failure outcomes, %d other; recovered %v after the restart; stats %+v",
				maxLatency, downAllowedHeld, downFallback, downDeniedNoFallback, recoveredAt.Sub(restartAt), s)
			if errs != 0 {
				t.Errorf("%d errors: the store policy (fail-closed) or the divided fallback decides", errs)
			}
			if maxLatency > timeout+250*time.Millisecond {
				t.Errorf("a decision took %v, the store's timeout is %v", maxLatency, timeout)
			}
			if downFallback == 0 {
				t.Error("no failure outcome while Redis was down")
			}
			if downDeniedNoFallback != 0 {
				t.Errorf("%d decisions while down were neither from the lease nor the failure outcome", downDeniedNoFallback)
			}
			if recoveredAt.IsZero() || recoveredAt.Sub(restartAt) > time.Second {
				t.Errorf("leasing again %v after the restart, want within 1s", recoveredAt.Sub(restartAt))
			}
			if tc.divided && (observed.Load() != allFallback.Load() || observedUnavailable.Load() != observed.Load()) {
				t.Errorf("observer saw %d fallback events (%d with ErrStoreUnavailable), %d fallback decisions", observed.Load(), observedUnavailable.Load(), allFallback.Load())
			}
			if !tc.divided && observed.Load() != 0 {
				t.Errorf("observer saw %d lease fallback events without the divided fallback", observed.Load())
			}
			if downAllowedHeld == 0 {
				t.Error("nothing admitted from the lease after the kill: the held tokens should be spent first")
			}
		})
	}
}
