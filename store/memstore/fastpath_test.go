package memstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
)

// plainAlg hides every optional interface of the algorithm it wraps: the
// store runs it through Spec and Step only.
type plainAlg struct{ alg algo.Algorithm }

func (p plainAlg) Spec() algo.Spec { return p.alg.Spec() }
func (p plainAlg) Step(s algo.State, now, n int64) (algo.State, floodgate.Decision) {
	return p.alg.Step(s, now, n)
}

// TestWordFastPathMatchesStep runs the token bucket (Layout and WordStepper:
// the one-word fast path) and the same algorithm through Spec and Step only.
func TestWordFastPathMatchesStep(t *testing.T) {
	alg, err := bucket.Config{Rate: floodgate.PerSecond(50), Burst: 5}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := alg.(algo.WordStepper); !ok {
		t.Fatal("the token bucket does not implement algo.WordStepper: this test proves nothing")
	}
	requireFastPathMatchesStep(t, alg, 100, 50_000)
}

// TestStateFastPathMatchesStep runs every shipped multi-word algorithm
// (Layout and StateStepper: the in-place path with the shard's scratch) and
// the same algorithm through Spec and Step only.
func TestStateFastPathMatchesStep(t *testing.T) {
	algs := shippedAlgs(t)[1:]
	for _, a := range algs {
		t.Run(a.Spec().Name, func(t *testing.T) {
			if _, ok := a.(algo.StateStepper); !ok {
				t.Fatalf("%s does not implement algo.StateStepper", a.Spec().Name)
			}
			requireFastPathMatchesStep(t, a, 20, 20_000)
		})
	}
}

// TestStateFastPathMixedTables interleaves algorithms of every width, with
// and without a log, on one store and the same keys: the shard's scratch
// state must carry nothing (words, log) from one table to the next.
func TestStateFastPathMixedTables(t *testing.T) {
	algs := shippedAlgs(t)
	clk := storetest.NewClock(t0)
	fast := newStore(t, memstore.WithClock(clk), memstore.WithShards(1))
	slow := newStore(t, memstore.WithClock(clk), memstore.WithShards(1))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 20_000 {
		if rng.IntN(2) == 0 {
			clk.Advance(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
		}
		a := algs[rng.IntN(len(algs))]
		key := "k" + strconv.Itoa(rng.IntN(5))
		n := rng.Int64N(5) - rng.Int64N(2)
		df, errF := fast.Apply(ctx, key, a, n)
		ds, errS := slow.Apply(ctx, key, plainAlg{a}, n)
		if df != ds || errF != nil || errS != nil {
			t.Fatalf("step %d (%s, %s, n=%d): fast path %+v, %v; Step %+v, %v", i, a.Spec().Name, key, n, df, errF, ds, errS)
		}
	}
	if sf, ss := fast.Stats(), slow.Stats(); sf.Keys != ss.Keys {
		t.Fatalf("fast path keeps %d keys, Step %d", sf.Keys, ss.Keys)
	}
}

// shippedAlgs returns every algorithm floodgate ships: the token bucket
// (one word), the leaky bucket, the fixed window, the sliding counter (more
// words) and the sliding log (a log), in that order.
func shippedAlgs(t *testing.T) []algo.Algorithm {
	t.Helper()
	tb, err := bucket.Config{Rate: floodgate.PerSecond(10), Burst: 5}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	lb, err := leaky.Config{Rate: floodgate.PerSecond(10), Burst: 5, Delay: 2}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	algs := []algo.Algorithm{tb, lb}
	wc := window.Config{Limit: 6, Window: time.Second}
	for _, mk := range []func() (algo.Algorithm, error){wc.FixedAlgorithm, wc.SlidingCounterAlgorithm, wc.SlidingLogAlgorithm} {
		a, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		algs = append(algs, a)
	}
	return algs
}

// requireFastPathMatchesStep runs alg as given (whatever optional
// interfaces it has) and through Spec and Step only, on two stores with one
// clock, through the same random sequence of keys (out of nkeys), costs
// (refunds and peeks included), clock moves (back by up to a minute, now and
// then by an hour, rarely forward by ten years) and sweeps: every decision, the
// number of keys kept and of keys expired must be the same. (No MaxKeys
// evictions: which key they drop depends on each store's random hash seed.)
func requireFastPathMatchesStep(t *testing.T, alg algo.Algorithm, nkeys, steps int) {
	t.Helper()
	clk := storetest.NewClock(t0)
	fast := newStore(t, memstore.WithClock(clk), memstore.WithShards(4))
	slow := newStore(t, memstore.WithClock(clk), memstore.WithShards(4))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range steps {
		switch r := rng.IntN(1000); {
		case r < 600:
			clk.Advance(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
		case r < 620:
			clk.Advance(-time.Duration(rng.Int64N(int64(time.Minute))))
		case r == 620:
			clk.Advance(-time.Hour)
		case r == 621 && rng.IntN(10) == 0:
			clk.Advance(10 * 365 * 24 * time.Hour)
		}
		if r := rng.IntN(1000); r == 0 {
			fast.Sweep()
			slow.Sweep()
		}
		key := "k" + strconv.Itoa(rng.IntN(nkeys))
		n := rng.Int64N(6) - rng.Int64N(3)
		df, errF := fast.Apply(ctx, key, alg, n)
		ds, errS := slow.Apply(ctx, key, plainAlg{alg}, n)
		if df != ds || errF != nil || errS != nil {
			t.Fatalf("step %d (%s, n=%d): fast path %+v, %v; Step %+v, %v", i, key, n, df, errF, ds, errS)
		}
		if sf, ss := fast.Stats(), slow.Stats(); sf.Keys != ss.Keys || sf.Expired != ss.Expired {
			t.Fatalf("step %d: fast path keeps %d keys (%d expired), Step %d (%d expired)", i, sf.Keys, sf.Expired, ss.Keys, ss.Expired)
		}
	}
	if st := fast.Stats(); st.Expired == 0 {
		t.Fatal("no key expired in a sweep: the sequence does not cover keys kept across calls")
	}
}

// layoutAlg declares its layout through algo.Layout (and a different, valid
// Spec, which the store must then not need).
type layoutAlg struct{ words, maxLog int }

func (a layoutAlg) Spec() algo.Spec                   { return algo.Spec{Name: "layout", Words: 1} }
func (a layoutAlg) Layout() (uint64, int, int, int64) { return 0x1a, a.words, a.maxLog, 0 }
func (a layoutAlg) Step(s algo.State, now, n int64) (algo.State, floodgate.Decision) {
	return s, floodgate.Decision{Allowed: true}
}

func TestApplyRejectsBadLayout(t *testing.T) {
	s := newStore(t)
	for _, a := range []layoutAlg{{words: 0}, {words: algo.MaxWords + 1}, {words: 1, maxLog: -1}} {
		if _, err := s.Apply(context.Background(), "k", a, 1); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("Layout (%d words, log %d): %v, want ErrInvalidConfig", a.words, a.maxLog, err)
		}
	}
}

// panicStateAlg panics in StepState, the in-place path's step.
type panicStateAlg struct{ panicAlg }

func (panicStateAlg) Layout() (uint64, int, int, int64) { return 0xbad2, 3, 0, 0 }
func (panicStateAlg) StepState(*algo.State, int64, int64, *floodgate.Decision) {
	panic("faulty algorithm")
}

func TestPanickingStateStepDoesNotLockTheShard(t *testing.T) {
	requireShardUsableAfterPanic(t, panicStateAlg{})
}

// panicWordAlg panics in StepWord, the fast path's step.
type panicWordAlg struct{ panicAlg }

func (panicWordAlg) Layout() (uint64, int, int, int64) { return 0xbad, 1, 0, 0 }
func (panicWordAlg) StepWord(int64, int64, int64, *floodgate.Decision) int64 {
	panic("faulty algorithm")
}

func TestPanickingWordStepDoesNotLockTheShard(t *testing.T) {
	requireShardUsableAfterPanic(t, panicWordAlg{})
}

// TestShippedLayoutsMatchSpecs checks that every algorithm floodgate ships
// implements algo.Layout, and that its values are its Spec's: a store that
// trusts Layout keeps exactly the state Spec describes.
func TestShippedLayoutsMatchSpecs(t *testing.T) {
	algs := shippedAlgs(t)
	for _, a := range algs {
		sp := a.Spec()
		l, ok := a.(algo.Layout)
		if !ok {
			t.Errorf("%s does not implement algo.Layout", sp.Name)
			continue
		}
		if ns, words, maxLog, _ := l.Layout(); ns != sp.Namespace || words != sp.Words || maxLog != sp.MaxLog {
			t.Errorf("%s: Layout() = (%#x, %d, %d), Spec has (%#x, %d, %d)", sp.Name, ns, words, maxLog, sp.Namespace, sp.Words, sp.MaxLog)
		}
		// The grain is algo.Grain of the Spec, or one more microsecond
		// (the token bucket's interval is rounded up).
		if _, _, _, grain := l.Layout(); grain < algo.Grain(sp) || grain > algo.Grain(sp)+1 || grain <= 0 {
			t.Errorf("%s: Layout's grain %d, want algo.Grain(Spec) = %d (or one more)", sp.Name, grain, algo.Grain(sp))
		}
	}
}

// TestBoundTakeMatchesStep runs Take of a token bucket Limiter on the store
// (the path memstore binds for it, see internal/bind) and the same
// algorithm through Spec and Step only on a second store, on one clock,
// through a random sequence of keys, costs, refunds, clock moves and
// sweeps: every decision and key count must be the same. Then the bound
// path must report a done context and a closed store as Apply does.
func TestBoundTakeMatchesStep(t *testing.T) {
	clk := storetest.NewClock(t0)
	fast := newStore(t, memstore.WithClock(clk), memstore.WithShards(4))
	slow := newStore(t, memstore.WithClock(clk), memstore.WithShards(4))
	l := keyed(t, fast, bucket.Config{Rate: floodgate.PerSecond(50), Burst: 5})
	alg := plainAlg{l.Algorithm()}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 4))
	for i := range 50_000 {
		switch r := rng.IntN(1000); {
		case r < 600:
			clk.Advance(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
		case r < 620:
			clk.Advance(-time.Duration(rng.Int64N(int64(time.Minute))))
		}
		if rng.IntN(1000) == 0 {
			fast.Sweep()
			slow.Sweep()
		}
		key := "k" + strconv.Itoa(rng.IntN(100))
		n := 1 + rng.IntN(5)
		if rng.IntN(5) == 0 {
			if err := l.Refund(ctx, key, n); err != nil {
				t.Fatal(err)
			}
			if _, err := slow.Apply(ctx, key, alg, -int64(n)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		df, errF := l.Take(ctx, key, n)
		ds, errS := slow.Apply(ctx, key, alg, int64(n))
		if df != ds || errF != nil || errS != nil {
			t.Fatalf("step %d (%s, n=%d): Take %+v, %v; Step %+v, %v", i, key, n, df, errF, ds, errS)
		}
		if sf, ss := fast.Stats(), slow.Stats(); sf.Keys != ss.Keys {
			t.Fatalf("step %d: Take keeps %d keys, Step %d", i, sf.Keys, ss.Keys)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Take(done, "k1", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with a done context: %v, want context.Canceled", err)
	}
	fast.Close()
	for _, key := range []string{"k1", "never-seen"} {
		if _, err := l.Take(ctx, key, 1); !errors.Is(err, floodgate.ErrClosed) {
			t.Fatalf("Take(%q) after Close: %v, want ErrClosed", key, err)
		}
	}
}
