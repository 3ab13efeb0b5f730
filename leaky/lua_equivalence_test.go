package leaky_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// TestLuaTwinOnRedis runs the leaky bucket on a real Redis
// (FLOODGATE_REDIS_ADDR; skipped without it): the store suite's algorithm
// checks in both modes, which on Redis include the Go step against the Lua
// twin on random sequences of (now, n), refunds and time going back
// included; then that equivalence alone on random configurations (policing,
// delaying all or part of the burst, bursts from 0 to 19).
func TestLuaTwinOnRedis(t *testing.T) {
	newStore := redistest.Stores(t)
	for name, c := range map[string]leaky.Config{
		"nodelay": {Rate: floodgate.PerMinute(5), Burst: 4, NoDelay: true},
		"delay":   {Rate: floodgate.PerMinute(5), Burst: 4, Delay: 2},
	} {
		t.Run(name, func(t *testing.T) { storetest.RunAlgorithm(t, newStore, algorithm(t, c)) })
	}

	r := rand.New(rand.NewPCG(3, 4))
	for i := range 8 {
		per := []time.Duration{time.Second, time.Minute}[r.IntN(2)]
		c := leaky.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(500), Per: per}, Burst: r.Int64N(20)}
		switch r.IntN(3) {
		case 0:
			c.NoDelay = true
		case 1:
			c.Delay = r.Int64N(c.Burst + 1)
		}
		alg := algorithm(t, c)
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			storetest.RunEquivalence(t, newStore(t).(storetest.TwinStepper), alg)
		})
	}
}

func algorithm(t *testing.T, c leaky.Config) algo.Algorithm {
	t.Helper()
	a, err := c.Algorithm()
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	return a
}
