package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/window"
)

// algorithmTable lists every algorithm of the module that has a Lua twin, in
// a few configurations each: the equivalence test runs them all.
func algorithmTable(t testing.TB) map[string]store.Algorithm {
	t.Helper()
	out := map[string]store.Algorithm{}
	add := func(name string, a store.Algorithm, err error) {
		require.NoError(t, err, name)
		out[name] = a
	}
	for _, c := range []bucket.Config{
		{Rate: floodgate.PerSecond(10), Burst: 5},
		{Rate: floodgate.PerMinute(3), Burst: 1},
		{Rate: floodgate.PerSecond(1000), Burst: 100},
		{Rate: floodgate.Rate{N: 7, Per: 3 * time.Second}, Burst: 4},
	} {
		a, err := c.Algorithm()
		add("token-bucket/"+c.Rate.String()+"/"+strconv.FormatInt(c.Burst, 10), a, err)
	}
	for _, c := range []window.Config{
		{Limit: 5, Window: time.Second},
		{Limit: 3, Window: 90 * time.Second},
		{Limit: 20, Window: 1500 * time.Microsecond},
	} {
		name := "/" + strconv.FormatInt(c.Limit, 10) + "/" + c.Window.String()
		a, err := c.FixedAlgorithm()
		add("fixed-window"+name, a, err)
		a, err = c.SlidingLogAlgorithm()
		add("sliding-log"+name, a, err)
		a, err = c.SlidingCounterAlgorithm()
		add("sliding-counter"+name, a, err)
	}
	return out
}

type stepIn struct{ now, n int64 }

// randomSequence returns steps of (time, cost): mostly small moves forward at
// the scales of the algorithms, sometimes none, sometimes jumps back (1s, 1h)
// or forward (10 years); costs are mostly small, sometimes 0 (peek), negative
// (refund) or larger than the capacity.
func randomSequence(r *rand.Rand, steps int, limit int64) []stepIn {
	now := int64(1_700_000_000_000_000) + r.Int64N(1_000_000_000_000)
	out := make([]stepIn, steps)
	for i := range out {
		switch x := r.IntN(100); {
		case x < 20:
		case x < 45:
			now += r.Int64N(2_000)
		case x < 70:
			now += r.Int64N(2_000_000)
		case x < 85:
			now += r.Int64N(120_000_000)
		case x < 92:
			now -= 1_000_000
		case x < 97:
			now -= 3_600_000_000
		default:
			now += 10 * 365 * 24 * 3_600_000_000
		}
		var n int64
		switch x := r.IntN(100); {
		case x < 55:
			n = 1 + r.Int64N(min(limit, 3))
		case x < 70:
			n = 1 + r.Int64N(limit)
		case x < 78:
			n = 0
		case x < 95:
			n = -(1 + r.Int64N(limit))
		default:
			n = limit + 1 + r.Int64N(3)
		}
		out[i] = stepIn{now, n}
	}
	return out
}

// TestGoLuaEquivalence runs 10,000 random sequences per algorithm through the
// Go step (with the store's rule that a full state may be dropped) and
// through the Redis script with the same injected times: every decision and
// every state must be identical.
func TestGoLuaEquivalence(t *testing.T) {
	const sequences, steps, workers = 10_000, 4, 48
	c := newClient(t, singleAddr)
	s, err := New(c, WithPrefix(uniquePrefix(t)), WithTimeout(10*time.Second))
	require.NoError(t, err)
	algs := algorithmTable(t)
	names := make([]string, 0, len(algs))
	for n := range algs {
		names = append(names, n)
	}
	slices.Sort(names)
	ctx := context.Background()
	for ai, name := range names {
		alg := algs[name]
		t.Run(name, func(t *testing.T) {
			p, err := s.prepare(alg)
			require.NoError(t, err)
			ps := []*policy{p}
			work := make(chan int)
			var mu sync.Mutex
			var failures []string
			fail := func(f string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				if len(failures) < 5 {
					failures = append(failures, fmt.Sprintf(f, args...))
				}
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					states := make([]store.State, 1)
					for seq := range work {
						r := rand.New(rand.NewPCG(uint64(ai), uint64(seq)))
						key := "seq" + strconv.Itoa(seq)
						var goState store.State
						for i, in := range randomSequence(r, steps, p.limit) {
							want, wantD := alg.Step(goState, in.now, in.n)
							gotD, err := s.eval(ctx, key, ps, p.script, in.n, strconv.FormatInt(in.now, 10), states)
							if err != nil {
								fail("seq %d step %d (now=%d n=%d): %v", seq, i, in.now, in.n, err)
								break
							}
							if gotD != wantD {
								fail("seq %d step %d (now=%d n=%d): decision\n go  %+v\n lua %+v", seq, i, in.now, in.n, wantD, gotD)
								break
							}
							got := states[0]
							if !slices.Equal(got.W[:p.spec.Words], want.W[:p.spec.Words]) || !slices.Equal(got.Log, want.Log) {
								fail("seq %d step %d (now=%d n=%d): state\n go  %v %v\n lua %v %v", seq, i, in.now, in.n, want.W, want.Log, got.W, got.Log)
								break
							}
							goState = want
							if goState.W[0] <= in.now { // the store drops full states
								goState = store.State{}
							}
						}
					}
				})
			}
			for i := range sequences {
				work <- i
			}
			close(work)
			wg.Wait()
			for _, f := range failures {
				t.Error(f)
			}
		})
	}
}
