package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// ApplyAll on Redis decides exactly as ApplyAll on memory (the reference
// of the contract), on a single node and on the cluster (where groups over
// keys in several slots take the two-phase path): random groups of 1 to 5
// ops over three keys and every twin (several policies on one key, one
// policy twice on one key, costs above the capacity), committed or only
// evaluated, at random times (backwards too); then every state is the same.
func TestApplyAllSameAsMemory(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(time.UnixMicro(1_700_000_000_000_000))
			rs := testStore(t, c, withClock(clk))
			ms, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
			require.NoError(t, err)
			t.Cleanup(func() { ms.Close() })
			algs := scriptAlgorithms(t)
			keys := []string{"a", "b", "{c}"}
			r := rand.New(rand.NewPCG(3, 4))
			ctx := context.Background()
			failures := 0
			for trial := range 3000 {
				now := nextTime(r, clk.Now().UnixMicro())
				clk.Set(time.UnixMicro(now))
				// Three algorithms per trial, so that groups often repeat one.
				pick := []algo.Algorithm{algs[r.IntN(len(algs))], algs[r.IntN(len(algs))], algs[r.IntN(len(algs))]}
				ops := make([]store.Op, 1+r.IntN(5))
				for i := range ops {
					a := pick[r.IntN(len(pick))]
					n := 1 + r.Int64N(min(a.Spec().Capacity, 4))
					if r.IntN(20) == 0 {
						n = a.Spec().Capacity + 1
					}
					ops[i] = store.Op{Key: keys[r.IntN(len(keys))], Alg: a, N: n}
				}
				commit := r.IntN(5) > 0
				want := make([]floodgate.Decision, len(ops))
				got := make([]floodgate.Decision, len(ops))
				wantAll, err := ms.ApplyAll(ctx, ops, want, commit)
				require.NoError(t, err)
				gotAll, err := rs.ApplyAll(ctx, ops, got, commit)
				require.NoError(t, err)
				if gotAll != wantAll || !slices.Equal(got, want) {
					if failures++; failures <= 5 {
						t.Errorf("trial %d (now %d, commit %v, %d ops):\n memory %v %+v\n redis  %v %+v", trial, now, commit, len(ops), wantAll, want, gotAll, got)
					}
				}
			}
			for _, k := range keys {
				for _, a := range algs {
					want, err := ms.Apply(ctx, k, a, 0)
					require.NoError(t, err)
					got, err := rs.Apply(ctx, k, a, 0)
					require.NoError(t, err)
					assert.Equal(t, want, got, "final state of %s on %q", a.Spec().Name, k)
				}
			}
		})
	}
}

// rawState is the value of every Redis key of keys x algs, and the number
// of writes (SET, DEL) the servers have run so far.
func rawState(t *testing.T, s *Store, keys []string, algs []algo.Algorithm) (map[string]string, int64) {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	for _, k := range keys {
		for _, a := range algs {
			rk := s.keyOf(k, a)
			v, err := s.client.Do(ctx, s.client.B().Get().Key(rk).Build()).ToString()
			if err != nil {
				v = "<" + err.Error() + ">"
			}
			out[rk] = v
		}
	}
	return out, commandCalls(t, s.client, "set") + commandCalls(t, s.client, "del")
}

// A refused group, and any evaluation, write no key at all (no SET, no
// DEL: values and TTLs untouched), in one slot and across slots; a
// committed group gives every key the TTL of its own state's time to full.
func TestApplyAllDenialChangesNothing(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			fast := tokenBucket(t, floodgate.PerSecond(10), 10) // 100ms per unit
			slow := tokenBucket(t, floodgate.PerMinute(6), 3)   // 10s per unit
			keys := []string{"x", "y", "z"}
			algs := []algo.Algorithm{fast, slow}
			ctx := context.Background()
			out := make([]floodgate.Decision, 4)
			all, err := s.ApplyAll(ctx, []store.Op{{Key: "x", Alg: fast, N: 5}, {Key: "x", Alg: slow, N: 2}, {Key: "y", Alg: slow, N: 1}}, out, true)
			require.NoError(t, err)
			require.True(t, all)
			ttl := func(k string, a algo.Algorithm) int64 {
				v, err := c.Do(ctx, c.B().Pttl().Key(s.keyOf(k, a)).Build()).AsInt64()
				require.NoError(t, err)
				return v
			}
			assert.InDelta(t, 500, ttl("x", fast), 60, "5 units at 100ms")
			assert.InDelta(t, 20_000, ttl("x", slow), 100, "2 units at 10s")
			assert.InDelta(t, 10_000, ttl("y", slow), 100, "1 unit at 10s")

			before, writes := rawState(t, s, keys, algs)
			check := func(what string) {
				t.Helper()
				after, w := rawState(t, s, keys, algs)
				assert.Equal(t, before, after, what)
				assert.Equal(t, writes, w, what+": keys written")
			}
			for _, ops := range [][]store.Op{
				{{Key: "x", Alg: fast, N: 1}, {Key: "x", Alg: slow, N: 2}},                              // the slow one refuses
				{{Key: "z", Alg: fast, N: 3}, {Key: "y", Alg: slow, N: 1}, {Key: "y", Alg: slow, N: 2}}, // the last one refuses
				{{Key: "z", Alg: slow, N: 1}, {Key: "x", Alg: fast, N: 6}},                              // over the remaining 5
			} {
				all, err := s.ApplyAll(ctx, ops, out, true)
				require.NoError(t, err)
				require.False(t, all, "%v", ops)
				check("a refused group")
			}
			all, err = s.ApplyAll(ctx, []store.Op{{Key: "z", Alg: slow, N: 1}, {Key: "y", Alg: fast, N: 1}}, out, false)
			require.NoError(t, err)
			assert.True(t, all, "evaluation: would admit")
			check("an evaluation")
		})
	}
}

// Each out[i] is what op i alone gets: ops on one key and namespace see
// each other in order; a denied op's RetryAfter is its own.
func TestApplyAllDecisionsPerOp(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			a := tokenBucket(t, floodgate.PerSecond(1), 3)
			b := tokenBucket(t, floodgate.PerMinute(1), 1)
			out := make([]floodgate.Decision, 4)
			ops := []store.Op{{Key: "k", Alg: a, N: 2}, {Key: "k", Alg: a, N: 1}, {Key: "k", Alg: b, N: 1}, {Key: "other", Alg: a, N: 3}}
			all, err := s.ApplyAll(context.Background(), ops, out, true)
			require.NoError(t, err)
			require.True(t, all)
			assert.Equal(t, []int64{1, 0, 0, 0}, []int64{out[0].Remaining, out[1].Remaining, out[2].Remaining, out[3].Remaining})
			all, err = s.ApplyAll(context.Background(), ops[2:], out, true)
			require.NoError(t, err)
			require.False(t, all)
			assert.False(t, out[0].Allowed)
			assert.InDelta(t, time.Minute, out[0].RetryAfter, float64(50*time.Millisecond), "b's own RetryAfter")
			assert.False(t, out[1].Allowed)
			assert.InDelta(t, 3*time.Second, out[1].RetryAfter, float64(50*time.Millisecond), "a's own RetryAfter on other: 3 units at 1/s")
		})
	}
}

// twoSlots returns two user keys whose Redis keys fall into different
// Cluster slots.
func twoSlots(t *testing.T) (string, string) {
	for i := range 100 {
		k := "other" + strconv.Itoa(i)
		if slotOf(k) != slotOf("first") {
			return "first", k
		}
	}
	t.Fatal("no key in another slot")
	return "", ""
}

// slotOf agrees with the cluster's CLUSTER KEYSLOT.
func TestSlotOf(t *testing.T) {
	c := newClient(t, clusterAddrs...)
	s := testStore(t, c)
	alg := tokenBucket(t, floodgate.PerSecond(1), 1)
	for _, k := range append(hostileKeys(t), "a", "b", "user-42") {
		want, err := c.Do(context.Background(), c.B().ClusterKeyslot().Key(s.keyOf(k, alg)).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, want, int64(slotOf(k)), "key %q", short(k))
	}
}

func short(k string) string {
	if len(k) > 20 {
		return k[:20] + "..."
	}
	return k
}

// On the cluster, a group over two slots whose second slot refuses at
// commit (a concurrent call took its units between the phases) refunds the
// first slot: the group is refused and the first slot is as before.
func TestApplyAllCommitRaceRefunds(t *testing.T) {
	c := newClient(t, clusterAddrs...)
	s := testStore(t, c)
	k1, k2 := twoSlots(t)
	a := tokenBucket(t, floodgate.PerHour(1), 5)
	b := tokenBucket(t, floodgate.PerHour(1), 5)
	ctx := context.Background()
	s.between = func() {
		s.between = nil
		_, err := s.Apply(ctx, k2, b, 4) // 1 left: the group's 2 no longer fit
		require.NoError(t, err)
	}
	out := make([]floodgate.Decision, 2)
	all, err := s.ApplyAll(ctx, []store.Op{{Key: k1, Alg: a, N: 3}, {Key: k2, Alg: b, N: 2}}, out, true)
	require.NoError(t, err)
	assert.False(t, all)
	assert.True(t, out[0].Allowed, "the first slot committed")
	assert.False(t, out[1].Allowed, "the second slot refused at commit")
	assert.Equal(t, int64(1), out[1].Remaining)
	d, err := s.Apply(ctx, k1, a, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), d.Remaining, "the first slot was refunded")
	d, err = s.Apply(ctx, k2, b, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Remaining)
}

// Concurrent groups over two limits never admit past either limit, and a
// refused group consumes nothing: on one key (one script, atomic) exactly
// the tighter limit is admitted; over two slots of the cluster (two phases,
// refunds on races) at most that, and what each limit has left is exactly
// what the admitted groups took.
func TestApplyAllConcurrent(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			k1, k2 := twoSlots(t)
			for _, kk := range [][2]string{{k1, k1}, {k1, k2}} {
				wide := tokenBucket(t, floodgate.PerHour(1), 100)
				tight := tokenBucket(t, floodgate.PerHour(1), 30)
				var admitted atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range 200 {
					wg.Go(func() {
						<-start
						out := make([]floodgate.Decision, 2)
						all, err := s.ApplyAll(context.Background(), []store.Op{{Key: kk[0], Alg: wide, N: 1}, {Key: kk[1], Alg: tight, N: 1}}, out, true)
						if !assert.NoError(t, err) {
							return
						}
						if all {
							admitted.Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
				got := admitted.Load()
				dw, err := s.Apply(context.Background(), kk[0], wide, 0)
				require.NoError(t, err)
				dt, err := s.Apply(context.Background(), kk[1], tight, 0)
				require.NoError(t, err)
				if kk[0] == kk[1] || !s.cluster {
					assert.Equal(t, int64(30), got, "%v: one script per group", kk)
				} else {
					assert.LessOrEqual(t, got, int64(30), "%v", kk)
					assert.Positive(t, got, "%v", kk)
				}
				assert.Equal(t, 100-got, dw.Remaining, "%v: the wide limit lost units to refused groups", kk)
				assert.Equal(t, 30-got, dt.Remaining, "%v", kk)
			}
		})
	}
}
