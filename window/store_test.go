package window

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// TestStoreConformance runs the store suite's algorithm checks with each
// window algorithm on the memory store (manual clock: exact durations and a
// decision-by-decision comparison with Step) and on its real clock.
func TestStoreConformance(t *testing.T) {
	for name, alg := range algs(t, Config{Limit: 7, Window: time.Hour}) {
		t.Run(name, func(t *testing.T) {
			t.Run("memstore", func(t *testing.T) {
				clk := storetest.NewClock(time.UnixMicro(t0))
				storetest.RunAlgorithm(t, func(t *testing.T) store.Store {
					s, err := memstore.New(memstore.WithClock(clk))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
					return s
				}, alg, storetest.WithClock(clk))
			})
			t.Run("memstore-realtime", func(t *testing.T) {
				storetest.RunAlgorithm(t, func(t *testing.T) store.Store {
					s, err := memstore.New()
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
					return s
				}, alg)
			})
		})
	}
}
