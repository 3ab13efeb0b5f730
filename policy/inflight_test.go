package policy_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
)

// hourly is the config of one token bucket, pro, of rate per hour (burst
// rate): slow enough that a real clock (Redis's) refills nothing while a
// test runs.
func hourly(rate int) string {
	return fmt.Sprintf("default_plan: pro\npolicies:\n  - {name: pro, rate: %d/h}\n", rate)
}

// changeStores returns the stores the live-change tests run on: memstore
// on a frozen clock, and a Redis store (whose clock is the server's).
func changeStores() []struct {
	name string
	make func(t *testing.T) store.Store
} {
	return []struct {
		name string
		make func(t *testing.T) store.Store
	}{
		{"memstore", func(t *testing.T) store.Store { s, _ := clocked(t); return s }},
		{"redis", func(t *testing.T) store.Store { return redistest.Stores(t)(t) }},
	}
}

// takeAcross takes one unit of key on live while a change lands in flight:
// during runs after Take loaded the running Set, before its store call.
func takeAcross(t *testing.T, live *policy.Live, key string, during func()) bool {
	t.Helper()
	ran := false // the hook runs in this goroutine: during's own Take passes
	restore := policy.SetTakeHook(func() {
		if !ran {
			ran = true
			during()
		}
	})
	defer restore()
	d, err := live.Take(context.Background(), key, 1)
	require.NoError(t, err)
	return d.Allowed
}

// A request in flight across a live change is decided on the old
// parameters or the new with the key's state, never on a fresh bucket,
// whatever lands between its load of the Set and its store call: a drained
// key stays drained through changes back and forth (issue 22, item 1).
func TestTakeInFlightAcrossChange(t *testing.T) {
	for _, sc := range changeStores() {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			live, err := policy.NewLive(parse(t, hourly(100)), sc.make(t))
			require.NoError(t, err)
			for i := range 100 {
				d, err := live.Take(ctx, "k", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed, "take %d of the burst", i)
			}
			rates := []int{200, 100, 200, 100, 200}
			for i, rate := range rates {
				other := false
				inFlight := takeAcross(t, live, "k", func() {
					_, err := live.Update(parse(t, hourly(rate)), "api")
					require.NoError(t, err)
					if i%2 == 0 {
						// A request on the new Set gets there first.
						d, err := live.Take(ctx, "k", 1)
						require.NoError(t, err)
						other = d.Allowed
					}
				})
				assert.False(t, inFlight, "change %d (to %d/h): the request in flight was admitted", i, rate)
				assert.False(t, other, "change %d (to %d/h): the request on the new Set was admitted", i, rate)
				d, err := live.Take(ctx, "k", 1)
				require.NoError(t, err)
				assert.False(t, d.Allowed, "change %d (to %d/h): the next request was admitted", i, rate)
			}
		})
	}
}

// badConfig is a config that fails to compile after its pro (changed to
// 300/h) compiled: it names two policies pro.
func badConfig(t *testing.T) policy.Config {
	cfg := parse(t, hourly(300))
	cfg.Policies = append(cfg.Policies, cfg.Policies[0])
	return cfg
}

// A storm of live changes (two valid configs and a bad one) while
// goroutines take one key: the key never gets more than the larger
// config's bound (its burst, and its rate over the time it ran).
func TestLiveChangeStorm(t *testing.T) {
	for _, sc := range changeStores() {
		t.Run(sc.name, func(t *testing.T) {
			cfgs := []policy.Config{parse(t, hourly(100)), parse(t, hourly(200)), badConfig(t)}
			live, err := policy.NewLive(cfgs[0], sc.make(t))
			require.NoError(t, err)
			// A request may lose its processor between its load of the
			// Set and its store call: have each one yield there.
			defer policy.SetTakeHook(runtime.Gosched)()
			var decided, admitted atomic.Int64
			done := make(chan struct{})
			var wg sync.WaitGroup
			start := time.Now()
			for range 8 {
				wg.Go(func() {
					ctx := context.Background()
					for {
						select {
						case <-done:
							return
						default:
						}
						d, err := live.Take(ctx, "k", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
						decided.Add(1)
						runtime.Gosched() // two cores: let the changes in
					}
				})
			}
			for i := range 200 {
				// Every change lands among a few decisions.
				for target := decided.Load() + 4; decided.Load() < target; {
					runtime.Gosched()
				}
				_, err := live.Update(cfgs[(i+1)%3], "api")
				if (i+1)%3 == 2 {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
				}
			}
			close(done)
			wg.Wait()
			// 200/h refills one unit in 18 s: what a real clock adds.
			bound := 200 + int64(time.Since(start)/(18*time.Second))
			assert.LessOrEqual(t, admitted.Load(), bound, "admitted of %d decisions", decided.Load())
		})
	}
}
