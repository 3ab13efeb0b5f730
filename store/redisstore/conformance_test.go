package redisstore

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
)

// conformanceAlgorithms are the algorithms besides the token bucket that the
// conformance suite runs on the Redis store. Their rates are slow so that the
// real-time run's concurrent check (1,000 takes) sees no refill.
func conformanceAlgorithms(t *testing.T) []algo.Algorithm {
	lk, err := leaky.Config{Rate: floodgate.PerMinute(5), Burst: 4, NoDelay: true}.Algorithm()
	require.NoError(t, err)
	ld, err := leaky.Config{Rate: floodgate.PerMinute(5), Burst: 4, Delay: 2}.Algorithm()
	require.NoError(t, err)
	wc := window.Config{Limit: 5, Window: time.Hour}
	fx, err := wc.FixedAlgorithm()
	require.NoError(t, err)
	lg, err := wc.SlidingLogAlgorithm()
	require.NoError(t, err)
	ct, err := wc.SlidingCounterAlgorithm()
	require.NoError(t, err)
	return []algo.Algorithm{lk, ld, fx, lg, ct}
}

// TestConformance runs the store conformance suite on a single node and on
// the cluster, twice: with the Redis server's time (the production path:
// the suite sleeps where time must pass), and with the suite's clock
// injected in ARGV instead of Redis TIME, which lets it check every duration
// exactly, jump the clock (-1s, -1h, +10y) and compare the store with the Go
// steps decision by decision.
func TestConformance(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name+"/server-time", func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				return testStore(t, c)
			}, storetest.WithAlgorithms(conformanceAlgorithms(t)...))
		})
		t.Run(name+"/injected-clock", func(t *testing.T) {
			clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
			storetest.Run(t, func(t *testing.T) store.Store {
				return testStore(t, c, withClock(clk))
			}, storetest.WithClock(clk), storetest.WithAlgorithms(conformanceAlgorithms(t)...))
		})
	}
	// A store made by Dial, which owns its client (Close closes it).
	t.Run("single/dial", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			s, err := Dial(rueidis.ClientOption{InitAddress: []string{singleAddr}, DisableCache: true}, WithPrefix(uniquePrefix(t)), WithTimeout(5*time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		}, storetest.WithAlgorithms(conformanceAlgorithms(t)...))
	})
}
