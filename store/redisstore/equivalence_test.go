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
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/window"
)

// families lists every algorithm of the module that has a Lua twin. Each
// family draws random configurations: the equivalence test runs every family
// on a few of them.
var families = map[string]func(r *rand.Rand) (store.Algorithm, error){
	"token-bucket": func(r *rand.Rand) (store.Algorithm, error) {
		per := []time.Duration{time.Second, time.Minute, 3 * time.Second, 1500 * time.Millisecond}[r.IntN(4)]
		return bucket.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(1000), Per: per}, Burst: 1 + r.Int64N(50)}.Algorithm()
	},
	"leaky-bucket": func(r *rand.Rand) (store.Algorithm, error) {
		per := []time.Duration{time.Second, time.Minute}[r.IntN(2)]
		c := leaky.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(500), Per: per}, Burst: r.Int64N(20)}
		switch r.IntN(3) {
		case 0:
			c.NoDelay = true
		case 1:
			c.Delay = r.Int64N(c.Burst + 1)
		}
		return c.Algorithm()
	},
	"fixed-window": func(r *rand.Rand) (store.Algorithm, error) { return randomWindow(r).FixedAlgorithm() },
	"sliding-log":  func(r *rand.Rand) (store.Algorithm, error) { return randomWindow(r).SlidingLogAlgorithm() },
	"sliding-counter": func(r *rand.Rand) (store.Algorithm, error) {
		return randomWindow(r).SlidingCounterAlgorithm()
	},
}

func randomWindow(r *rand.Rand) window.Config {
	w := []time.Duration{1500 * time.Microsecond, time.Second, 90 * time.Second, time.Hour}[r.IntN(4)]
	return window.Config{Limit: 1 + r.Int64N(30), Window: w}
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

// TestGoLuaEquivalence runs 10,000 random sequences per algorithm family
// (spread over a few random configurations) through the Go step, with the
// store's rule that a full state may be dropped, and through the Redis script
// with the same injected times: every decision and every state must be
// identical.
func TestGoLuaEquivalence(t *testing.T) {
	const sequences, configs, steps, workers = 10_000, 4, 4, 48
	c := newClient(t, singleAddr)
	s, err := New(c, WithPrefix(uniquePrefix(t)), WithTimeout(10*time.Second))
	require.NoError(t, err)
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	slices.Sort(names)
	ctx := context.Background()
	for fi, name := range names {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(fi), 42))
			var ps []*policy
			for range configs {
				alg, err := families[name](r)
				require.NoError(t, err)
				p, err := s.prepare(alg)
				require.NoError(t, err)
				ps = append(ps, p)
			}
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
						r := rand.New(rand.NewPCG(uint64(fi), uint64(seq)))
						p := ps[seq%configs]
						alg := p.alg
						pl := []*policy{p}
						key := "seq" + strconv.Itoa(seq)
						var goState store.State
						for i, in := range randomSequence(r, steps, p.limit) {
							want, wantD := alg.Step(goState, in.now, in.n)
							gotD, err := s.eval(ctx, key, pl, p.script, in.n, strconv.FormatInt(in.now, 10), states)
							if err != nil {
								fail("%v seq %d step %d (now=%d n=%d): %v", p.spec.Lua.Params, seq, i, in.now, in.n, err)
								break
							}
							if gotD != wantD {
								fail("%v seq %d step %d (now=%d n=%d): decision\n go  %+v\n lua %+v", p.spec.Lua.Params, seq, i, in.now, in.n, wantD, gotD)
								break
							}
							got := states[0]
							if !slices.Equal(got.W[:p.spec.Words], want.W[:p.spec.Words]) || !slices.Equal(got.Log, want.Log) {
								fail("%v seq %d step %d (now=%d n=%d): state\n go  %v %v\n lua %v %v", p.spec.Lua.Params, seq, i, in.now, in.n, want.W, want.Log, got.W, got.Log)
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
