package redisstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/internal/livetest"
	fgpolicy "github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// Keys carry over live changes in the scripts as storetest's model says
// (the convert at a key's first request after a change, Apply and ApplyAll),
// on a single node and on the cluster, for every algorithm family.
func TestConversion(t *testing.T) {
	for name, c := range targets(t) {
		for family, versions := range livetest.Versions(t) {
			t.Run(name+"/"+family, func(t *testing.T) {
				clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
				storetest.RunConversion(t, func(t *testing.T) store.Store {
					return testStore(t, c, withClock(clk))
				}, versions, storetest.WithClock(clk))
			})
		}
	}
}

// The live-change scenarios on Redis (single node and cluster),
// through the API, a file reload and a watched file, and random changes
// bounded by the versions that ran.
func TestLiveChanges(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			env := func(t *testing.T) (livetest.Env, *storetest.Clock) {
				clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
				return livetest.Env{Store: testStore(t, c, withClock(clk)), Advance: clk.Advance}, clk
			}
			for _, ap := range livetest.Appliers() {
				t.Run(ap.Name+"/RaiseThenLower", func(t *testing.T) {
					e, _ := env(t)
					livetest.RaiseThenLower(t, e, ap)
				})
				t.Run(ap.Name+"/KeepsTokens", func(t *testing.T) {
					e, _ := env(t)
					livetest.KeepsTokens(t, e, ap)
				})
			}
			t.Run("Plans", func(t *testing.T) {
				e, _ := env(t)
				livetest.Plans(t, e)
			})
			for _, f := range livetest.Families() {
				t.Run("Bounded/"+f.Name, func(t *testing.T) {
					e, clk := env(t)
					livetest.Bounded(t, e, func() int64 { return clk.Now().UnixMicro() }, f, 1)
				})
			}
		})
	}
}

// Two processes on one Redis (two clients, two stores, two Lives), one
// reloaded from pro 100/s to 200/s 500 ms before the other, both taking
// from one key drained at the start: together they never admit more than
// the larger config allows (200/s from the start, and its burst of 200
// over any interval), and the key is not starved while they disagree (at
// least the smaller config's rate, less 10%). On the server's time, as in
// production.
func TestTwoProcessesReloadedApart(t *testing.T) {
	for name, addrs := range map[string][]string{"single": {singleAddr}, "cluster": clusterAddrs} {
		t.Run(name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			var stores []*Store
			var lives []*fgpolicy.Live
			for range 2 {
				s, err := New(newClient(t, addrs...), WithPrefix(prefix), WithTimeout(5*time.Second))
				require.NoError(t, err)
				cfg, err := fgpolicy.Parse("limits.yaml", []byte(livetest.Pro(100)))
				require.NoError(t, err)
				live, err := fgpolicy.NewLive(cfg, s)
				require.NoError(t, err)
				stores, lives = append(stores, s), append(lives, live)
			}
			ctx := context.Background()
			for {
				d, err := lives[0].Take(ctx, "k", 1)
				require.NoError(t, err)
				if !d.Allowed {
					break
				}
			}
			type admission struct{ sent, got time.Time }
			var mu sync.Mutex
			var admitted []admission
			start := time.Now()
			end := start.Add(2 * time.Second)
			var wg sync.WaitGroup
			for g := range 8 {
				live := lives[g%2]
				wg.Go(func() {
					for time.Now().Before(end) {
						sent := time.Now()
						d, err := live.Take(ctx, "k", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							got := time.Now()
							mu.Lock()
							admitted = append(admitted, admission{sent, got})
							mu.Unlock()
						}
					}
				})
			}
			for i, at := range []time.Duration{500 * time.Millisecond, time.Second} {
				time.Sleep(time.Until(start.Add(at)))
				cfg, err := fgpolicy.Parse("limits.yaml", []byte(livetest.Pro(200)))
				require.NoError(t, err)
				_, err = lives[i].Update(cfg, "reload")
				require.NoError(t, err)
			}
			wg.Wait()
			slices.SortFunc(admitted, func(a, b admission) int { return a.sent.Compare(b.sent) })
			const interval = 5 * time.Millisecond // 200/s
			total := len(admitted)
			if limit := int(time.Since(start)/interval) + 1; total > limit {
				t.Fatalf("%d admitted in %v from a drained key, above the larger config's %d", total, time.Since(start), limit)
			}
			if floor := int(2*time.Second/(10*time.Millisecond)) * 9 / 10; total < floor {
				t.Fatalf("%d admitted in 2 s, below the smaller config's rate less 10%% (%d): starved while the processes disagree", total, floor)
			}
			// Over any interval: the decisions of admissions i..j were made
			// between i's send and the latest answer among them.
			last := time.Time{}
			for i := range admitted {
				last = time.Time{}
				for j := i; j < len(admitted); j++ {
					if admitted[j].got.After(last) {
						last = admitted[j].got
					}
					if bound := 200 + int(last.Sub(admitted[i].sent)/interval); j-i+1 > bound {
						t.Fatalf("%d admitted within %v, above the larger config's %d", j-i+1, last.Sub(admitted[i].sent), bound)
					}
				}
			}
			var batches int64
			for _, s := range stores {
				for _, ps := range *s.policies.Load() {
					for _, p := range ps {
						if p.co != nil {
							batches += p.co.batches.Load()
						}
					}
				}
			}
			t.Logf("%d admitted over 2 s (%d batch scripts)", total, batches)
		})
	}
}

// A key's value holds the parameters its state was written with, after
// "|"; a value without them (written by an earlier floodgate) is taken as
// written with the caller's parameters, and rewritten with them.
func TestValueKeepsItsParameters(t *testing.T) {
	c := newClient(t, singleAddr)
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := testStore(t, c, withClock(clk))
	versions := livetest.Versions(t)
	ctx := context.Background()
	for _, family := range []string{"token-bucket", "leaky-bucket", "sliding-log"} {
		alg := versions[family][0]
		_, err := s.Apply(ctx, family, alg, 1)
		require.NoError(t, err)
		v, err := c.Do(ctx, c.B().Get().Key(s.Key(family, alg)).Build()).ToString()
		require.NoError(t, err)
		state, params, ok := strings.Cut(v, "|")
		require.True(t, ok, "value %q", v)
		require.Equal(t, stateParams(alg.Spec()), params)

		// The same state without its parameters decides the same.
		want, err := s.Apply(ctx, family, alg, 0)
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, c.B().Set().Key(s.Key(family, alg)).Value(state).Px(time.Minute).Build()).Error())
		got, err := s.Apply(ctx, family, alg, 0)
		require.NoError(t, err)
		require.Equal(t, want, got, "%s: a value without parameters", family)
		v, err = c.Do(ctx, c.B().Get().Key(s.Key(family, alg)).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, state+"|"+params, v, "%s: rewritten with its parameters", family)
	}
}
