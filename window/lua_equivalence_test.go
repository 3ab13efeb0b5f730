package window_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
)

// TestLuaTwinOnRedis runs the three window algorithms on a real Redis
// (FLOODGATE_REDIS_ADDR; skipped without it): the store suite's algorithm
// checks, which on Redis include the Go step against the Lua twin on random
// sequences of (now, n), refunds and time going back included; then that
// equivalence alone on random configurations (limits from 1 to 30, windows
// from 1.5ms to an hour).
func TestLuaTwinOnRedis(t *testing.T) {
	newStore := redistest.Stores(t)
	kinds := []struct {
		name string
		alg  func(window.Config) (algo.Algorithm, error)
	}{
		{"fixed", window.Config.FixedAlgorithm},
		{"sliding-log", window.Config.SlidingLogAlgorithm},
		{"sliding-counter", window.Config.SlidingCounterAlgorithm},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range kinds {
		kind := k.alg
		t.Run(k.name, func(t *testing.T) {
			storetest.RunAlgorithm(t, newStore, algorithm(t, kind, window.Config{Limit: 5, Window: time.Hour}))
			for i := range 4 {
				w := []time.Duration{1500 * time.Microsecond, time.Second, 90 * time.Second, time.Hour}[r.IntN(4)]
				alg := algorithm(t, kind, window.Config{Limit: 1 + r.Int64N(30), Window: w})
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					storetest.RunEquivalence(t, newStore(t).(storetest.TwinStepper), alg)
				})
			}
		})
	}
}

func algorithm(t *testing.T, kind func(window.Config) (algo.Algorithm, error), c window.Config) algo.Algorithm {
	t.Helper()
	a, err := kind(c)
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	return a
}
