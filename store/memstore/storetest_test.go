package memstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
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

// TestConformance runs the store suite on a manual clock (exact durations,
// clock jumps, decision-by-decision equality with the algorithm's step).
func TestConformance(t *testing.T) {
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return newStore(t, memstore.WithClock(clk))
	}, storetest.WithClock(clk))
}

// TestConformanceRealTime runs it again on the default clock, the way a store
// that owns its time (Redis) runs it.
func TestConformanceRealTime(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t) })
}

// TestConformanceOneShard runs it with every key in one shard and a sweeper
// running every millisecond alongside the checks.
func TestConformanceOneShard(t *testing.T) {
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithSweepInterval(time.Millisecond))
	}, storetest.WithClock(clk))
}
