package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// families lists every algorithm of the module that has a Lua twin. Each
// family draws random configurations: the equivalence test runs every family
// on a few of them.
var families = map[string]func(r *rand.Rand) (algo.Algorithm, error){
	"token-bucket": func(r *rand.Rand) (algo.Algorithm, error) {
		per := []time.Duration{time.Second, time.Minute, 3 * time.Second, 1500 * time.Millisecond}[r.IntN(4)]
		return bucket.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(1000), Per: per}, Burst: 1 + r.Int64N(50)}.Algorithm()
	},
	"leaky-bucket": func(r *rand.Rand) (algo.Algorithm, error) {
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
	"fixed-window": func(r *rand.Rand) (algo.Algorithm, error) { return randomWindow(r).FixedAlgorithm() },
	"sliding-log":  func(r *rand.Rand) (algo.Algorithm, error) { return randomWindow(r).SlidingLogAlgorithm() },
	"sliding-counter": func(r *rand.Rand) (algo.Algorithm, error) {
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
// identical. The scripts of one step of all sequences go to Redis in
// pipelined batches (the arguments are built and the replies decoded by the
// store's own code).
func TestGoLuaEquivalence(t *testing.T) {
	const sequences, configs, steps, batch = 10_000, 4, 4, 2_500
	c := newClient(t, singleAddr)
	s, err := New(c, WithPrefix(uniquePrefix(t)))
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
			type sequence struct {
				p     *policy
				key   string
				in    []stepIn
				state algo.State // the Go side's state
				bad   bool
			}
			seqs := make([]sequence, sequences)
			for i := range seqs {
				p := ps[i%configs]
				seqs[i] = sequence{p: p, key: "seq" + strconv.Itoa(i), in: randomSequence(r, steps, p.limit)}
			}
			failures := 0
			fail := func(sq *sequence, step int, f string, args ...any) {
				sq.bad = true
				if failures++; failures <= 5 {
					in := sq.in[step]
					t.Errorf("%s params %v step %d (now=%d n=%d): %s", sq.key, sq.p.spec.Lua.Params, step, in.now, in.n, fmt.Sprintf(f, args...))
				}
			}
			states := make([]algo.State, 1)
			for step := range steps {
				for lo := 0; lo < sequences; lo += batch {
					part := seqs[lo:min(lo+batch, sequences)]
					execs := make([]rueidis.LuaExec, len(part))
					for i := range part {
						sq := &part[i]
						in := sq.in[step]
						execs[i].Keys, execs[i].Args = s.scriptArgs(nil, nil, sq.key, []*policy{sq.p}, in.n, strconv.FormatInt(in.now, 10))
					}
					// One script per family and config: group by script.
					res := make([]rueidis.RedisResult, len(part))
					for _, p := range ps {
						var idx []int
						var sub []rueidis.LuaExec
						for i := range part {
							if part[i].p == p {
								idx = append(idx, i)
								sub = append(sub, execs[i])
							}
						}
						for j, rr := range p.script.ExecMulti(ctx, c, sub...) {
							res[idx[j]] = rr
						}
					}
					for i := range part {
						sq := &part[i]
						if sq.bad {
							continue
						}
						in := sq.in[step]
						want, wantD := sq.p.alg.Step(sq.state, in.now, in.n)
						arr, err := res[i].ToArray()
						if err != nil {
							fail(sq, step, "%v", err)
							continue
						}
						gotD, err := decode(arr, []*policy{sq.p}, states)
						if err != nil {
							fail(sq, step, "%v", err)
							continue
						}
						if gotD != wantD {
							fail(sq, step, "decision\n go  %+v\n lua %+v", wantD, gotD)
							continue
						}
						got := states[0]
						if !slices.Equal(got.W[:sq.p.spec.Words], want.W[:sq.p.spec.Words]) || !slices.Equal(got.Log, want.Log) {
							fail(sq, step, "state\n go  %v %v\n lua %v %v", want.W, want.Log, got.W, got.Log)
							continue
						}
						sq.state = want
						if sq.state.W[0] <= in.now { // the store drops full states
							sq.state = algo.State{}
						}
					}
				}
			}
		})
	}
}

// TestMultiEquivalence runs random sequences through multi-policy scripts
// (two or three policies drawn from every family) and through a Go model of
// the script built on the Go steps: step every policy; when one denies, peek
// the others (nothing consumed); merge as floodgate.All does. Decisions and
// states must be identical.
func TestMultiEquivalence(t *testing.T) {
	const combos, perCombo, steps = 40, 50, 6
	c := newClient(t, singleAddr)
	s := testStore(t, c)
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	slices.Sort(names)
	r := rand.New(rand.NewPCG(99, 1))
	ctx := context.Background()
	failures := 0
	for ci := range combos {
		var ps []*policy
		seen := map[uint64]bool{}
		for len(ps) < 2+r.IntN(2) {
			alg, err := families[names[r.IntN(len(names))]](r)
			require.NoError(t, err)
			p, err := s.prepare(alg)
			require.NoError(t, err)
			if !seen[p.spec.Namespace] {
				seen[p.spec.Namespace] = true
				ps = append(ps, p)
			}
		}
		specs := make([]algo.Spec, len(ps))
		limit := ps[0].limit
		for i, p := range ps {
			specs[i] = p.spec
			limit = min(limit, p.limit)
		}
		script := scriptFor(specs)
		seqs := make([][]stepIn, perCombo)
		goStates := make([][]algo.State, perCombo)
		for i := range seqs {
			seqs[i] = randomSequence(r, steps, limit)
			goStates[i] = make([]algo.State, len(ps))
		}
		for step := range steps {
			execs := make([]rueidis.LuaExec, perCombo)
			for i := range execs {
				in := seqs[i][step]
				execs[i].Keys, execs[i].Args = s.scriptArgs(nil, nil, "c"+strconv.Itoa(ci)+":"+strconv.Itoa(i), ps, in.n, strconv.FormatInt(in.now, 10))
			}
			for i, res := range script.ExecMulti(ctx, c, execs...) {
				in := seqs[i][step]
				arr, err := res.ToArray()
				require.NoError(t, err)
				gotStates := make([]algo.State, len(ps))
				gotD, err := decode(arr, ps, gotStates)
				require.NoError(t, err)

				// The Go model of the script.
				ds := make([]floodgate.Decision, len(ps))
				next := make([]algo.State, len(ps))
				denied := false
				for k, p := range ps {
					next[k], ds[k] = p.alg.Step(goStates[i][k], in.now, in.n)
					denied = denied || !ds[k].Allowed
				}
				if denied {
					for k, p := range ps {
						if ds[k].Allowed {
							next[k], ds[k] = p.alg.Step(goStates[i][k], in.now, 0)
						}
					}
				}
				want := mergeDecisions(ds, denied)
				ok := gotD == want
				for k := range ps {
					w := ps[k].spec.Words
					ok = ok && slices.Equal(gotStates[k].W[:w], next[k].W[:w]) && slices.Equal(gotStates[k].Log, next[k].Log)
				}
				if !ok {
					if failures++; failures <= 5 {
						t.Errorf("combo %d seq %d step %d (now=%d n=%d):\n go  %+v %v\n lua %+v %v", ci, i, step, in.now, in.n, want, next, gotD, gotStates)
					}
				}
				for k := range next { // the store drops full states
					if next[k].W[0] <= in.now {
						next[k] = algo.State{}
					}
				}
				goStates[i] = next
			}
		}
	}
}
