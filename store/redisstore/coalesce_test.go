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

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/livetest"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
)

// Many goroutines on one key of a bucket that does not refill during the
// test: exactly the burst is admitted, and the calls beyond the in-flight
// limit were coalesced.
func TestCoalescedCallsAdmitExactly(t *testing.T) {
	c := newClient(t, singleAddr)
	s := testStore(t, c, WithCoalescing(2))
	const burst, goroutines, each = 1500, 64, 40
	alg := tokenBucket(t, floodgate.PerHour(1), burst)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				d, err := s.Apply(context.Background(), "hot", alg, 1)
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(burst), admitted.Load())
	p, err := s.prepare(alg)
	require.NoError(t, err)
	t.Logf("%d calls, %d batch scripts carried %d of them", goroutines*each, p.co.batches.Load(), p.co.batched.Load())
	assert.Positive(t, p.co.batches.Load(), "nothing was coalesced")
	d, err := s.Apply(context.Background(), "hot", alg, 0)
	require.NoError(t, err)
	assert.Zero(t, d.Remaining)
}

// scriptAlgorithms are the algorithms whose scripts the store's own tests
// run: one of each twin of the module, with a few parameters each.
func scriptAlgorithms(t *testing.T) []algo.Algorithm {
	t.Helper()
	var algs []algo.Algorithm
	for _, c := range []bucket.Config{
		{Rate: floodgate.PerSecond(7), Burst: 5},
		{Rate: floodgate.Rate{N: 3, Per: 1500 * time.Millisecond}, Burst: 40},
	} {
		a, err := c.Algorithm()
		require.NoError(t, err)
		algs = append(algs, a)
	}
	for _, c := range []leaky.Config{
		{Rate: floodgate.PerSecond(20), Burst: 6, NoDelay: true},
		{Rate: floodgate.PerSecond(3), Burst: 8, Delay: 3},
		{Rate: floodgate.PerMinute(90), Burst: 4},
	} {
		a, err := c.Algorithm()
		require.NoError(t, err)
		algs = append(algs, a)
	}
	for _, c := range []window.Config{
		{Limit: 6, Window: time.Second},
		{Limit: 25, Window: 90 * time.Second},
	} {
		for _, mk := range []func() (algo.Algorithm, error){c.FixedAlgorithm, c.SlidingLogAlgorithm, c.SlidingCounterAlgorithm} {
			a, err := mk()
			require.NoError(t, err)
			algs = append(algs, a)
		}
	}
	return algs
}

// nextTime moves a test clock: mostly forward at several scales, sometimes
// not at all, sometimes back by a second.
func nextTime(r *rand.Rand, now int64) int64 {
	scales := []int64{0, 0, 1, 300, 40_000, 700_000, 5_000_000, 200_000_000, -1_000_000}
	sc := scales[r.IntN(len(scales))]
	if sc <= 0 {
		return now + sc
	}
	return now + r.Int64N(sc)
}

// The batch script makes the same decisions as the Go steps (batches of
// distinct keys and batches where keys appear twice), and shares the state encoding with
// the single-call scripts: steps alternate between the two, with injected
// times (one time per batch).
func TestBatchScriptEquivalence(t *testing.T) {
	const perBatch, steps = 250, 8
	c := newClient(t, singleAddr)
	clk := storetest.NewClock(time.Unix(0, 0))
	s := testStore(t, c, withClock(clk), WithCoalescing(1))
	for ai, alg := range scriptAlgorithms(t) {
		t.Run(alg.Spec().Name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ai), 7))
			p, err := s.prepare(alg)
			require.NoError(t, err)
			capacity := alg.Spec().Capacity
			cost := func() int64 { return r.Int64N(2*capacity+3) - capacity - 1 } // -capacity-1 .. capacity+1
			failures := 0
			now := int64(1_700_000_000_000_000)
			goStates := make([]algo.State, perBatch)
			for step := range steps {
				now = nextTime(r, now)
				clk.Set(time.UnixMicro(now))
				// The calls of this step: one per key; a batch step adds a
				// second call on every other key, at the end of the batch,
				// so that the batch script sees keys twice.
				type op struct {
					i    int
					cost int64
				}
				var ops []op
				for i := range perBatch {
					ops = append(ops, op{i, cost()})
				}
				// Steps 0, 4: a batch with keys twice; 2, 6: a batch of
				// distinct keys (the script's other path); odd: single calls.
				batched := step%2 == 0
				if step%4 == 0 {
					for i := 0; i < perBatch; i += 2 {
						ops = append(ops, op{i, cost()})
					}
				}
				key := func(i int) string { return "a" + strconv.Itoa(ai) + ":" + strconv.Itoa(i) }
				got := make([]floodgate.Decision, len(ops))
				if batched {
					batch := make([]*call, len(ops))
					for j, o := range ops {
						batch[j] = &call{key: key(o.i), n: o.cost, done: make(chan struct{}, 1)}
					}
					p.co.runBatch(batch)
					for j, cl := range batch {
						require.NoError(t, cl.err)
						got[j] = cl.d
					}
				} else { // the single-call script, pipelined
					execs := make([]rueidis.LuaExec, len(ops))
					for j, o := range ops {
						execs[j].Keys, execs[j].Args = s.scriptArgs(nil, nil, key(o.i), p, o.cost)
					}
					for j, res := range p.script.lua.ExecMulti(context.Background(), c, execs...) {
						arr, err := res.ToArray()
						require.NoError(t, err)
						if !p.oneWord {
							arr = arr[1:]
						}
						got[j], err = decode(arr)
						require.NoError(t, err)
					}
				}
				for j, o := range ops {
					next, want := alg.Step(goStates[o.i], now, o.cost)
					if got[j] != want {
						if failures++; failures <= 5 {
							t.Errorf("params %v key %d step %d call %d (now=%d n=%d, batch=%v):\n go  %+v\n lua %+v", p.spec.Lua.Params, o.i, step, j, now, o.cost, batched, want, got[j])
						}
					}
					goStates[o.i] = next
				}
				for i := range goStates { // the store drops full states
					if goStates[i].W[0] <= now {
						goStates[i] = algo.State{}
					}
				}
			}
		})
	}
}

// Many goroutines deciding groups of two ops (a shared key of a bucket
// that does not refill during the test, and a key of their own) with
// ApplyAll, some only evaluating: exactly the shared burst of committed
// groups is admitted, each goroutine's own key paid for exactly its
// admitted groups (a refused or evaluated group took nothing), and the
// groups beyond the in-flight limit were coalesced into batch scripts.
func TestCoalescedGroupsAdmitExactly(t *testing.T) {
	c := newClient(t, singleAddr)
	s := testStore(t, c, WithCoalescing(2))
	const burst, own, goroutines, each = 700, 1000, 64, 20
	shared := tokenBucket(t, floodgate.PerHour(1), burst)
	mine := tokenBucket(t, floodgate.PerHour(1), own)
	ctx := context.Background()
	var admitted atomic.Int64
	per := make([]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			key := "own-" + strconv.Itoa(g)
			out := make([]floodgate.Decision, 2)
			for i := range each {
				ops := []store.Op{{Key: "hot", Alg: shared, N: 1}, {Key: key, Alg: mine, N: 1}}
				commit := i%4 != 3
				all, err := s.ApplyAll(ctx, ops, out, commit)
				if !assert.NoError(t, err) {
					return
				}
				if all != (out[0].Allowed && out[1].Allowed) {
					t.Errorf("all = %v with decisions %+v", all, out)
				}
				if all && commit {
					admitted.Add(1)
					per[g]++
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(burst), admitted.Load())
	gc := s.groupCoalescerFor(&group{script: scriptFor(kindGroup, twinIDs(t, shared)), twins: twinIDs(t, shared)})
	t.Logf("%d groups, %d batch scripts carried %d of them", goroutines*each, gc.batches.Load(), gc.batched.Load())
	assert.Positive(t, gc.batches.Load(), "nothing was coalesced")
	for g := range goroutines {
		d, err := s.Apply(ctx, "own-"+strconv.Itoa(g), mine, 0)
		require.NoError(t, err)
		assert.Equal(t, own-per[g], d.Remaining, "goroutine %d's own key", g)
	}
	d, err := s.Apply(ctx, "hot", shared, 0)
	require.NoError(t, err)
	assert.Zero(t, d.Remaining)
}

// twinIDs is the sorted twin numbers of algs.
func twinIDs(t *testing.T, algs ...algo.Algorithm) []uint16 {
	t.Helper()
	var ids []uint16
	for _, a := range algs {
		id, err := twinID(a.Spec())
		require.NoError(t, err)
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// The batch script converts a key written with other parameters (a live
// change) as the single-call scripts do: states left by one version
// through single calls, then one batch of the next version on the same
// keys (every other key twice, or each key once: the one-word script's
// path for distinct keys), decide as the Go convert then step do.
func TestBatchScriptConverts(t *testing.T) {
	c := newClient(t, singleAddr)
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := testStore(t, c, withClock(clk), WithCoalescing(1))
	for run, versions := range livetest.Versions(t) {
		for _, twice := range []bool{true, false} {
			family := run
			if !twice {
				family += "-distinct"
			}
			t.Run(family, func(t *testing.T) { batchConverts(t, s, clk, family, versions, twice) })
		}
	}
}

func batchConverts(t *testing.T, s *Store, clk *storetest.Clock, family string, versions []algo.Algorithm, twice bool) {
	const keys = 60
	r := rand.New(rand.NewPCG(uint64(len(family)), 11))
	goStates := make([]algo.State, keys)
	key := func(i int) string { return family + ":" + strconv.Itoa(i) }
	for v := 1; v < len(versions); v++ {
		from, to := versions[v-1], versions[v]
		for i := range keys { // states of from, through single calls
			clk.Advance(time.Duration(r.IntN(3000)) * time.Microsecond)
			n := r.Int64N(from.Spec().Capacity + 1)
			_, err := s.Apply(context.Background(), key(i), from, n)
			require.NoError(t, err)
			goStates[i], _ = from.Step(goStates[i], micros.Of(clk.Now()), n)
		}
		clk.Advance(time.Duration(r.IntN(3000)) * time.Microsecond)
		now := micros.Of(clk.Now())
		p, err := s.prepare(to)
		require.NoError(t, err)
		var batch []*call
		var idx []int
		for i := range keys {
			calls := 1
			if twice {
				calls += i % 2
			}
			for range calls {
				batch = append(batch, &call{key: key(i), n: r.Int64N(to.Spec().Capacity+2) - 1, done: make(chan struct{}, 1)})
				idx = append(idx, i)
			}
		}
		moved := make([]bool, keys)
		conv := !slices.Equal(algo.StateParams(from.Spec()), algo.StateParams(to.Spec()))
		p.co.runBatch(batch)
		for j, cl := range batch {
			require.NoError(t, cl.err)
			i := idx[j]
			st := goStates[i]
			if st.W[0] <= now {
				st = algo.State{}
			} else if conv && !moved[i] {
				st = to.(algo.Converter).Convert(st, now, from)
			}
			moved[i] = true
			next, want := to.Step(st, now, cl.n)
			require.Equal(t, want, cl.d, "version %d, key %d, call %d (n=%d)", v, i, j, cl.n)
			goStates[i] = next
		}
	}
}

// Coalesced groups decide as the memory store does when it runs them one
// after the other: batches of groups of one script whose policies differ
// from group to group (each group numbers its own, the batch sends each
// once), some only evaluated, on keys they share.
func TestCoalescedGroupsSameAsMemory(t *testing.T) {
	c := newClient(t, singleAddr)
	clk := storetest.NewClock(time.UnixMicro(1_700_000_000_000_000))
	rs := testStore(t, c, withClock(clk), WithCoalescing(1))
	ms, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { ms.Close() })
	var algs []algo.Algorithm
	for _, w := range []window.Config{{Limit: 5, Window: time.Second}, {Limit: 3, Window: 10 * time.Second}, {Limit: 8, Window: time.Minute}, {Limit: 2, Window: 300 * time.Millisecond}} {
		a, err := w.FixedAlgorithm()
		require.NoError(t, err)
		algs = append(algs, a)
	}
	keys := []string{"a", "b", "c"}
	r := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	for trial := range 400 {
		clk.Set(time.UnixMicro(nextTime(r, clk.Now().UnixMicro())))
		var batch []*groupCall
		var opss [][]store.Op
		for range 1 + r.IntN(6) {
			ops := make([]store.Op, 1+r.IntN(4))
			ps := make([]*policy, len(ops))
			for i := range ops {
				a := algs[r.IntN(len(algs))]
				ops[i] = store.Op{Key: keys[r.IntN(len(keys))], Alg: a, N: 1 + r.Int64N(a.Spec().Capacity+1)}
				ps[i], err = rs.prepare(a)
				require.NoError(t, err)
			}
			gs, err := rs.plan(ops, ps)
			require.NoError(t, err)
			mode := modeCommit
			if r.IntN(4) == 0 {
				mode = modeEvaluate
			}
			batch = append(batch, &groupCall{g: &gs[0], mode: mode, out: make([]floodgate.Decision, len(ops)), done: make(chan struct{}, 1)})
			opss = append(opss, ops)
		}
		rs.groupCoalescerFor(batch[0].g).runBatch(batch)
		for j, gc := range batch {
			require.NoError(t, gc.err)
			want := make([]floodgate.Decision, len(opss[j]))
			all, err := ms.ApplyAll(ctx, opss[j], want, gc.mode == modeCommit)
			require.NoError(t, err)
			require.Equal(t, all, gc.all, "trial %d, group %d", trial, j)
			require.Equal(t, want, gc.out, "trial %d, group %d of %d: %v", trial, j, len(batch), opss[j])
		}
	}
}

// distinct tells batches of distinct keys (the one-word script's path
// without a table of states) from batches with a key twice, small (pairs
// compared) and large (a set).
func TestDistinct(t *testing.T) {
	for _, n := range []int{0, 1, 2, 8, 9, 40} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		require.True(t, distinct(keys), "n=%d", n)
		for i := 1; i < n; i++ {
			for j := range i {
				dup := slices.Clone(keys)
				dup[i] = dup[j]
				require.False(t, distinct(dup), "n=%d, key %d twice (at %d)", n, j, i)
			}
		}
	}
}

// The one-word batch script's two paths (a batch of distinct keys, "d",
// and the path with a table of states, "") make the same replies and
// leave the same values and TTLs, from the same values: none, current,
// written with other parameters (with and without a params list longer
// than the policy's), without parameters (written before they were kept),
// full (past), not a number, at costs from a refund to more than the
// burst.
func TestBatchWordPathsSame(t *testing.T) {
	c := newClient(t, singleAddr)
	ctx := context.Background()
	s := testStore(t, c, WithCoalescing(1))
	to := tokenBucket(t, floodgate.PerSecond(7), 5)
	from := tokenBucket(t, floodgate.PerSecond(3), 9)
	p, err := s.prepare(to)
	require.NoError(t, err)
	pstr, fstr := stateParams(p.spec), stateParams(from.Spec())
	const now = 1_700_000_000_000_000
	fut, past := strconv.FormatInt(now+400_000, 10), strconv.FormatInt(now-400_000, 10)
	inits := []string{"", fut + "|" + pstr, fut + "|" + fstr, fut, past, "abc|" + pstr, past + "|" + pstr, fut + "|" + fstr + ",7", "x"}
	type result struct {
		reply []int64
		vals  []string
		ttls  []int64
	}
	for _, n := range []int64{0, 1, 3, 100, -2} {
		var out [2]result
		for pi, flag := range []string{"d", ""} {
			keys := make([]string, len(inits))
			args := []string{strconv.FormatInt(now, 10), p.args[0], flag}
			for i, v := range inits {
				keys[i] = s.redisKey("paths-"+strconv.Itoa(pi)+"-"+strconv.Itoa(i), p.nsHex)
				require.NoError(t, c.Do(ctx, c.B().Del().Key(keys[i]).Build()).Error())
				if v != "" {
					require.NoError(t, c.Do(ctx, c.B().Set().Key(keys[i]).Value(v).PxMilliseconds(123_456).Build()).Error())
				}
				args = append(args, strconv.FormatInt(n, 10))
			}
			out[pi].reply, err = s.call(ctx, batchScriptFor(p.spec), keys, args).AsIntSlice()
			require.NoError(t, err, "flag %q, n %d", flag, n)
			for _, k := range keys {
				v, err := c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
				if rueidis.IsRedisNil(err) {
					v = "<none>"
				}
				ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
				require.NoError(t, err)
				out[pi].vals = append(out[pi].vals, v)
				out[pi].ttls = append(out[pi].ttls, (ttl+500)/1000)
			}
		}
		require.Equal(t, out[1], out[0], "n %d: the distinct path (first) and the other", n)
	}
}

// With the server's clock, a value whose state word the batch leaves as
// it was but writes anew (one written before parameters were kept, now
// written with them) keeps its TTL (KEEPTTL), on both paths of the
// one-word batch script: SET with PX would set its time to full.
func TestBatchWordKeepsTTL(t *testing.T) {
	c := newClient(t, singleAddr)
	ctx := context.Background()
	s := testStore(t, c, WithCoalescing(1))
	p, err := s.prepare(tokenBucket(t, floodgate.PerSecond(7), 5))
	require.NoError(t, err)
	tm, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	sec, err := strconv.ParseInt(tm[0], 10, 64)
	require.NoError(t, err)
	fut := strconv.FormatInt(sec*1_000_000+60_000_000, 10) // a minute ahead: a peek leaves it
	for _, flag := range []string{"d", ""} {
		keys := []string{s.redisKey("keepttl-a"+flag, p.nsHex), s.redisKey("keepttl-b"+flag, p.nsHex)}
		require.NoError(t, c.Do(ctx, c.B().Set().Key(keys[0]).Value(fut).PxMilliseconds(900_000).Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Del().Key(keys[1]).Build()).Error())
		_, err := s.call(ctx, batchScriptFor(p.spec), keys, []string{"", p.args[0], flag, "0", "1"}).AsIntSlice()
		require.NoError(t, err)
		v, err := c.Do(ctx, c.B().Get().Key(keys[0]).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, fut+"|"+stateParams(p.spec), v, "flag %q", flag)
		ttl, err := c.Do(ctx, c.B().Pttl().Key(keys[0]).Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, ttl, int64(800_000), "flag %q: the TTL was set anew (%d ms), not kept", flag, ttl)
	}
}
