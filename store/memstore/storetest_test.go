package memstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
)

func newStore(t *testing.T, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// conformanceAlgorithms are the algorithms besides the token bucket that
// the suite runs on the store: every table the store keeps (one word, three
// and four words, a log). Their rates are slow enough for the real-time run.
func conformanceAlgorithms(t *testing.T) storetest.Option {
	t.Helper()
	lk, err := leaky.Config{Rate: floodgate.PerMinute(5), Burst: 4, Delay: 2}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	wc := window.Config{Limit: 5, Window: time.Hour}
	algs := []algo.Algorithm{lk}
	for _, ctor := range []func(window.Config) (algo.Algorithm, error){
		window.Config.FixedAlgorithm, window.Config.SlidingLogAlgorithm, window.Config.SlidingCounterAlgorithm,
	} {
		a, err := ctor(wc)
		if err != nil {
			t.Fatal(err)
		}
		algs = append(algs, a)
	}
	return storetest.WithAlgorithms(algs...)
}

// TestConformance runs the store suite on a manual clock (exact durations,
// clock jumps, decision-by-decision equality with the algorithm's step).
func TestConformance(t *testing.T) {
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return newStore(t, memstore.WithClock(clk))
	}, storetest.WithClock(clk), conformanceAlgorithms(t))
}

// TestConformanceRealTime runs it again on the default clock, the way a store
// that owns its time (Redis) runs it.
func TestConformanceRealTime(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t) }, conformanceAlgorithms(t))
}

// TestConformanceOneShard runs it with every key in one shard and a sweeper
// running every millisecond alongside the checks.
func TestConformanceOneShard(t *testing.T) {
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithSweepInterval(time.Millisecond))
	}, storetest.WithClock(clk), conformanceAlgorithms(t))
}
