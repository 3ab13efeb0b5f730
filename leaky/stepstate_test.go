package leaky_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
)

// TestStepStateMatchesStep checks that StepState (the in-place step a store
// may call) returns exactly Step's state and decision, on random states,
// times and costs: takes, refunds, peeks, costs beyond the limit, states
// around now, in the past, in the future (the clock went back by less and by
// more than a minute), the zero State and extreme words. *d holds garbage on
// entry: StepState must set every field.
func TestStepStateMatchesStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []leaky.Config{
		{Rate: floodgate.PerSecond(10), Burst: 5},
		{Rate: floodgate.PerSecond(10), Burst: 5, Delay: 2},
		{Rate: floodgate.PerSecond(3), Burst: 0, NoDelay: true},
		{Rate: floodgate.PerMinute(7), Burst: 20, NoDelay: true},
	} {
		alg, err := c.Algorithm()
		if err != nil {
			t.Fatal(err)
		}
		ss := alg.(algo.StateStepper)
		limit := c.Burst + 1
		for i := range 20_000 {
			now := randNow(rng)
			var s algo.State
			if rng.IntN(10) != 0 { // else the zero State
				nowMs := now / 1000
				s.W[0] = randNear(rng, now, 10_000_000)
				s.W[1] = randNear(rng, nowMs, 120_000)
				s.W[2] = randNear(rng, 0, (limit+2)*1000)
			}
			n := rng.Int64N(2*limit+7) - limit - 3
			want, wd := alg.Step(s, now, n)
			got := s
			gd := floodgate.Decision{Allowed: rng.IntN(2) == 0, Limit: -1, Remaining: -1, RetryAfter: -1, ResetAfter: -1, Delay: -1}
			ss.StepState(&got, now, n, &gd)
			if got.W != want.W || got.Log != nil || gd != wd {
				t.Fatalf("%+v, step %d: state %v, now %d, n %d:\nStep      %v %+v\nStepState %v %+v", c, i, s.W, now, n, want.W, wd, got.W, gd)
			}
		}
	}
}

// randNow is a time (µs) around 2026, or now and then an extreme one.
func randNow(rng *rand.Rand) int64 {
	switch rng.IntN(20) {
	case 0:
		return rng.Int64() - math.MaxInt64/2
	case 1:
		return 0
	}
	return t0 + rng.Int64N(10*365*24*3600*1_000_000)
}

// randNear is x plus or minus up to spread, or now and then an extreme
// value.
func randNear(rng *rand.Rand, x, spread int64) int64 {
	switch rng.IntN(30) {
	case 0:
		return math.MaxInt64
	case 1:
		return math.MinInt64
	case 2:
		return 0
	case 3:
		return x
	}
	return x + rng.Int64N(2*spread+1) - spread
}
