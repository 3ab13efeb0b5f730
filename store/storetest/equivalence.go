package storetest

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// TwinStepper is implemented by stores that run an algorithm's Lua twin
// ([algo.Spec].Lua) on a server, such as the Redis store. [RunAlgorithm]
// runs [RunEquivalence] on every store that implements it.
type TwinStepper interface {
	// StepTwin runs alg's twin once for each i, independently of the
	// others and of any stored key: on states[i], at now[i] (Unix
	// microseconds), with cost n[i] (negative refunds, 0 peeks). It writes
	// the new state to states[i] and the decision to out[i]. The slices have
	// the same length.
	StepTwin(ctx context.Context, alg algo.Algorithm, states []algo.State, now, n []int64, out []floodgate.Decision) error
}

// The size of RunEquivalence's run: sequences stepped side by side, steps
// per sequence.
const (
	twinSequences = 1000
	twinSteps     = 24
)

// RunEquivalence checks that alg's Lua twin, run by st, is alg's Go step:
// on random sequences of (now, n) from a fresh state, the twin and Step
// must return the same decision and the same state (Words and Log) at every
// step, each side stepping its own state. Time mostly moves forward at
// every scale from a microsecond to minutes, sometimes stands still, jumps
// back (a second, an hour) or forward (ten years); costs are mostly small,
// sometimes the whole capacity, 0 (a peek), negative (a refund) or above
// the capacity.
func RunEquivalence(t *testing.T, st TwinStepper, alg algo.Algorithm) {
	t.Helper()
	sp := alg.Spec()
	capacity := max(sp.Capacity, 1)
	r := rand.New(rand.NewPCG(sp.Namespace, uint64(capacity)))
	goStates := make([]algo.State, twinSequences)
	luaStates := make([]algo.State, twinSequences)
	now := make([]int64, twinSequences)
	n := make([]int64, twinSequences)
	got := make([]floodgate.Decision, twinSequences)
	for i := range now {
		now[i] = 1_700_000_000_000_000 + r.Int64N(1_000_000_000_000)
	}
	failed := make([]bool, twinSequences)
	failures := 0
	for step := range twinSteps {
		for i := range now {
			now[i] = randomMove(r, now[i])
			n[i] = randomCost(r, capacity)
		}
		if err := st.StepTwin(context.Background(), alg, luaStates, now, n, got); err != nil {
			t.Fatalf("StepTwin: %v", err)
		}
		for i := range goStates {
			if failed[i] {
				continue
			}
			before := goStates[i]
			var want floodgate.Decision
			goStates[i], want = alg.Step(goStates[i], now[i], n[i])
			w := sp.Words
			switch {
			case got[i] != want:
				failed[i] = true
				failures++
				if failures <= 5 {
					t.Errorf("%s sequence %d step %d: state %v %v, now %d, n %d:\n  Go  decision %+v\n  Lua decision %+v",
						sp.Name, i, step, before.W[:w], before.Log, now[i], n[i], want, got[i])
				}
			case !slices.Equal(goStates[i].W[:w], luaStates[i].W[:w]) || !slices.Equal(goStates[i].Log, luaStates[i].Log):
				failed[i] = true
				failures++
				if failures <= 5 {
					t.Errorf("%s sequence %d step %d: state %v %v, now %d, n %d:\n  Go  state %v %v\n  Lua state %v %v",
						sp.Name, i, step, before.W[:w], before.Log, now[i], n[i], goStates[i].W[:w], goStates[i].Log, luaStates[i].W[:w], luaStates[i].Log)
				}
			}
		}
	}
	if failures > 0 {
		t.Errorf("%s: %d of %d sequences differ between the Go step and the Lua twin", sp.Name, failures, twinSequences)
	}
}

// randomMove returns the time after now in a random sequence.
func randomMove(r *rand.Rand, now int64) int64 {
	switch x := r.IntN(100); {
	case x < 20:
		return now
	case x < 45:
		return now + r.Int64N(2_000)
	case x < 70:
		return now + r.Int64N(2_000_000)
	case x < 85:
		return now + r.Int64N(120_000_000)
	case x < 92:
		return now - 1_000_000
	case x < 97:
		return now - 3_600_000_000
	default:
		return now + 10*365*24*3_600_000_000
	}
}

// randomCost returns a cost in a random sequence of an algorithm of the
// given capacity.
func randomCost(r *rand.Rand, capacity int64) int64 {
	switch x := r.IntN(100); {
	case x < 55:
		return 1 + r.Int64N(min(capacity, 3))
	case x < 70:
		return 1 + r.Int64N(capacity)
	case x < 78:
		return 0
	case x < 95:
		return -(1 + r.Int64N(capacity))
	default:
		return capacity + 1 + r.Int64N(3)
	}
}
