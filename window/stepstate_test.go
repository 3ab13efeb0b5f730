package window

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// TestStepStateMatchesStep checks, for each algorithm, that StepState (the
// in-place step a store may call) returns exactly Step's state and
// decision on random states, times and costs: takes, refunds, peeks, costs
// beyond the limit; states of the current window, the previous one, an
// older one, a future one (the clock went back), the zero State and extreme
// words; logs in order, out of order, longer than the limit and with spare
// capacity. *d holds garbage on entry: StepState must set every field. The
// entries of the input log must come out unchanged.
func TestStepStateMatchesStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 9))
	for _, c := range []Config{
		{Limit: 5, Window: time.Second},
		{Limit: 1, Window: 7 * time.Millisecond},
		{Limit: 100, Window: time.Hour},
	} {
		for _, mk := range []func() (algo.Algorithm, error){c.FixedAlgorithm, c.SlidingCounterAlgorithm, c.SlidingLogAlgorithm} {
			alg, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			ss, ok := alg.(algo.StateStepper)
			if !ok {
				t.Fatalf("%s does not implement algo.StateStepper", alg.Spec().Name)
			}
			w, limit := c.micros(), c.Limit
			for i := range 10_000 {
				now := t0 + rng.Int64N(10*year)
				if rng.IntN(20) == 0 {
					now = rng.Int64() // far past or future: clamped
				}
				s := randWindowState(rng, now, w, limit, alg.Spec().MaxLog > 0)
				in := slices.Clone(s.Log)
				n := rng.Int64N(2*limit+7) - limit - 3
				if rng.IntN(50) == 0 {
					n = -3 * limit // beyond every clamp of a refund
				}
				want, wd := alg.Step(s, now, n)
				wantLog := slices.Clone(want.Log)
				got := s
				gd := floodgate.Decision{Allowed: rng.IntN(2) == 0, Limit: -1, Remaining: -1, RetryAfter: -1, ResetAfter: -1, Delay: -1}
				ss.StepState(&got, now, n, &gd)
				if got.W != want.W || !slices.Equal(got.Log, wantLog) || (got.Log == nil) != (want.Log == nil) || gd != wd {
					t.Fatalf("%s %+v, step %d: state %v %v, now %d, n %d:\nStep      %v %v %+v\nStepState %v %v %+v",
						alg.Spec().Name, c, i, s.W, in, now, n, want.W, wantLog, wd, got.W, got.Log, gd)
				}
				if !slices.Equal(s.Log, in) {
					t.Fatalf("%s, step %d: the input log changed from %v to %v", alg.Spec().Name, i, in, s.Log)
				}
			}
		}
	}
}

// randWindowState is a random state for a window algorithm: words around
// now's window boundaries (or extreme ones), and a log when withLog.
func randWindowState(rng *rand.Rand, now, w, limit int64, withLog bool) algo.State {
	var s algo.State
	if rng.IntN(10) == 0 {
		return s // a fresh key
	}
	start := floorDiv(max(minNow, min(now, maxNow)), w) * w
	pick := func() int64 {
		switch rng.IntN(12) {
		case 0:
			return math.MaxInt64
		case 1:
			return math.MinInt64
		case 2:
			return 0
		case 3, 4:
			return start
		case 5:
			return start - w
		case 6:
			return start + w
		case 7:
			return start + 2*w
		case 8:
			return start + 3*w // a clock that went back
		}
		return start + rng.Int64N(4*w) - 2*w
	}
	count := func() int64 {
		if rng.IntN(15) == 0 {
			return rng.Int64() - math.MaxInt64/2
		}
		return rng.Int64N(limit+3) - 1
	}
	s.W[0], s.W[1], s.W[2], s.W[3] = pick(), pick(), count(), count()
	if rng.IntN(2) == 0 {
		s.W[1] = count() // the fixed window's count
	}
	if withLog {
		m := rng.Int64N(limit + 3)
		log := make([]int64, m, m+rng.Int64N(limit+1))
		at := now - w - rng.Int64N(w)
		for j := range log {
			at += rng.Int64N(w/max(1, m) + 2)
			log[j] = at
		}
		if rng.IntN(5) == 0 && m > 0 {
			log[rng.Int64N(m)] = now + rng.Int64N(2*w) // out of order, or in the future
		}
		s.Log = log
		if m == 0 {
			s.Log = nil
		}
		if m > 0 {
			s.W[0] = log[m-1] + w
		}
	}
	return s
}
