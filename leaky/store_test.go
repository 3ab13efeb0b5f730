package leaky_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// conformanceConfigs covers every mode and both rate units.
var conformanceConfigs = map[string]leaky.Config{
	"nodelay": {Rate: floodgate.PerSecond(10), Burst: 20, NoDelay: true},
	"default": {Rate: floodgate.PerSecond(1), Burst: 5},
	"delayN":  {Rate: floodgate.PerSecond(5), Burst: 12, Delay: 8},
	"perMin":  {Rate: floodgate.PerMinute(1), Burst: 2},
	"burst0":  {Rate: floodgate.PerSecond(2)},
}

func newMemstore(t *testing.T, clk floodgate.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// The store conformance suite's algorithm part, on memstore with a manual
// clock (which adds the decision-by-decision comparison with Step), and on
// the test's own map store.
func TestConformance(t *testing.T) {
	for name, c := range conformanceConfigs {
		t.Run(name, func(t *testing.T) {
			a := mustAlg(t, c)
			clk := storetest.NewClock(time.UnixMicro(t0))
			storetest.RunAlgorithm(t, func(t *testing.T) store.Store { return newMemstore(t, clk) }, a, storetest.WithClock(clk))
			t.Run("mapStore", func(t *testing.T) {
				clk := storetest.NewClock(time.UnixMicro(t0))
				storetest.RunAlgorithm(t, func(t *testing.T) store.Store {
					return &mapStore{clock: clk, m: map[string]algo.State{}}
				}, a, storetest.WithClock(clk))
			})
		})
	}
}
