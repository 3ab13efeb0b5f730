package bucket_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// TestLuaTwinOnRedis runs the token bucket on a real Redis
// (FLOODGATE_REDIS_ADDR; skipped without it): the store suite's algorithm
// checks, which on Redis include the Go step against the Lua twin on random
// sequences of (now, n), refunds and time going back included; then that
// equivalence alone on random configurations (fast and slow rates,
// intervals that do not divide a second, bursts from 1 to 50).
func TestLuaTwinOnRedis(t *testing.T) {
	newStore := redistest.Stores(t)
	alg, err := bucket.Config{Rate: floodgate.PerHour(5), Burst: 5}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunAlgorithm(t, newStore, alg)

	r := rand.New(rand.NewPCG(1, 2))
	for i := range 8 {
		per := []time.Duration{time.Second, time.Minute, 3 * time.Second, 1500 * time.Millisecond}[r.IntN(4)]
		c := bucket.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(1000), Per: per}, Burst: 1 + r.Int64N(50)}
		alg, err := c.Algorithm()
		if err != nil {
			t.Fatal(err)
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			storetest.RunEquivalence(t, newStore(t).(storetest.TwinStepper), alg)
		})
	}
}
