package bucket_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/algo"
)

// The keyed token bucket offers the stores' optional fast paths; each must
// agree exactly with Spec and Step.
func TestKeyedWordStepAgreesWithStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	configs := []bucket.Config{
		{Rate: floodgate.PerSecond(10), Burst: 20},
		{Rate: floodgate.PerSecond(1_000_000), Burst: 1},
		{Rate: floodgate.PerHour(1), Burst: 1000},
		{Rate: floodgate.Rate{N: 3, Per: 7 * time.Millisecond}, Burst: 5},
	}
	for _, c := range configs {
		alg := mustKeyedAlg(t, c)
		sp := alg.Spec()
		lay, ok := alg.(algo.Layout)
		if !ok {
			t.Fatalf("%+v: the token bucket does not implement algo.Layout", c)
		}
		if ns, words, maxLog, _ := lay.Layout(); ns != sp.Namespace || words != sp.Words || maxLog != sp.MaxLog {
			t.Fatalf("%+v: Layout() = (%#x, %d, %d), Spec has (%#x, %d, %d)", c, ns, words, maxLog, sp.Namespace, sp.Words, sp.MaxLog)
		}
		ws, ok := alg.(algo.WordStepper)
		if !ok {
			t.Fatalf("%+v: the token bucket does not implement algo.WordStepper", c)
		}
		// A chain of steps from a fresh key, with the clock going forwards,
		// backwards and jumping, costs, refunds and peeks.
		var s algo.State
		now := keyedEpoch
		for i := range 20_000 {
			switch r := rng.IntN(100); {
			case r < 70:
				now += rng.Int64N(2 * c.Rate.Per.Microseconds())
			case r < 80:
				now -= rng.Int64N(int64(time.Hour / time.Microsecond))
			case r < 85:
				now += rng.Int64N(10 * 365 * 24 * int64(time.Hour/time.Microsecond))
			}
			n := rng.Int64N(c.Burst+1) - rng.Int64N(c.Burst/2+1)
			in := s
			// Words past W[0] are not the token bucket's: Step keeps them.
			in.W[1], in.W[2] = rng.Int64(), -rng.Int64()
			next, d := alg.Step(in, now, n)
			var dw floodgate.Decision
			w := ws.StepWord(in.W[0], now, n, &dw)
			if w != next.W[0] || dw != d {
				t.Fatalf("%+v step %d: StepWord(%d, %d, %d) = (%d, %+v), Step = (%d, %+v)", c, i, in.W[0], now, n, w, dw, next.W[0], d)
			}
			if next.W[1] != in.W[1] || next.W[2] != in.W[2] {
				t.Fatalf("%+v step %d: Step changed words it does not own: %v -> %v", c, i, in.W, next.W)
			}
			s = algo.State{W: [algo.MaxWords]int64{w}}
		}
	}
}
