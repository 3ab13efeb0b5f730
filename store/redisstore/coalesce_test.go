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
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
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

// The batch script makes the same decisions as the Go steps (keys that
// appear twice in one batch included), and shares the state encoding with
// the single-call script: steps alternate between the two, with injected
// times (one time per batch).
func TestBatchScriptEquivalence(t *testing.T) {
	const timelines, perBatch, steps = 8, 250, 8
	c := newClient(t, singleAddr)
	clk := storetest.NewClock(time.Unix(0, 0))
	s := testStore(t, c, withClock(clk), WithCoalescing(1))
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	slices.Sort(names)
	for fi, name := range names {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(fi), 7))
			failures := 0
			for tl := range timelines {
				alg, err := families[name](r)
				require.NoError(t, err)
				p, err := s.prepare(alg)
				require.NoError(t, err)
				// One timeline (shared times), perBatch sequences of costs.
				times := randomSequence(r, steps, p.limit)
				goStates := make([]algo.State, perBatch)
				for step, tm := range times {
					clk.Set(time.UnixMicro(tm.now))
					// The calls of this step: one per key; a batch step adds a
					// second call on every other key, at the end of the batch,
					// so that the batch script sees keys twice.
					type op struct {
						i    int
						cost int64
					}
					var ops []op
					for i := range perBatch {
						ops = append(ops, op{i, randomSequence(r, 1, p.limit)[0].n})
					}
					batched := step%2 == 0
					if batched {
						for i := 0; i < perBatch; i += 2 {
							ops = append(ops, op{i, randomSequence(r, 1, p.limit)[0].n})
						}
					}
					key := func(i int) string { return "tl" + strconv.Itoa(tl) + ":" + strconv.Itoa(i) }
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
							execs[j].Keys, execs[j].Args = s.scriptArgs(nil, nil, key(o.i), []*policy{p}, o.cost, s.injectedNow())
						}
						states := make([]algo.State, 1)
						for j, res := range p.script.ExecMulti(context.Background(), c, execs...) {
							arr, err := res.ToArray()
							require.NoError(t, err)
							got[j], err = decode(arr, []*policy{p}, states)
							require.NoError(t, err)
						}
					}
					for j, o := range ops {
						next, want := alg.Step(goStates[o.i], tm.now, o.cost)
						if got[j] != want {
							if failures++; failures <= 5 {
								t.Errorf("params %v timeline %d key %d step %d call %d (now=%d n=%d, batch=%v):\n go  %+v\n lua %+v", p.spec.Lua.Params, tl, o.i, step, j, tm.now, o.cost, batched, want, got[j])
							}
						}
						goStates[o.i] = next
					}
					for i := range goStates { // the store drops full states
						if goStates[i].W[0] <= tm.now {
							goStates[i] = algo.State{}
						}
					}
				}
			}
		})
	}
}
