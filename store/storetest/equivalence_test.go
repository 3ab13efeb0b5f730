package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// goStepper is a TwinStepper whose "twin" is the Go step itself, with an
// optional bug.
type goStepper struct {
	bug  string
	last map[int]int64 // the latest time each sequence saw
}

func (g *goStepper) StepTwin(_ context.Context, alg algo.Algorithm, states []algo.State, now, n []int64, out []floodgate.Decision) error {
	for i := range states {
		cost, at := n[i], now[i]
		switch {
		case g.bug == "refund-credits-one-more" && cost < 0:
			cost--
		case g.bug == "time-never-goes-back":
			at = max(at, g.last[i])
			g.last[i] = at
		}
		states[i], out[i] = alg.Step(states[i], at, cost)
	}
	return nil
}

func twinTestAlg(t *testing.T) algo.Algorithm {
	a, err := bucket.Config{Rate: floodgate.PerSecond(7), Burst: 9}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRunEquivalenceOnTheGoStep(t *testing.T) {
	storetest.RunEquivalence(t, &goStepper{}, twinTestAlg(t))
}

const twinBugEnv = "STORETEST_TWIN_BUG"

// TestTwinBugHelper runs RunEquivalence on a stepper with a bug. It does
// nothing unless TestRunEquivalenceCatchesBugs starts it in a child process.
func TestTwinBugHelper(t *testing.T) {
	if bug := os.Getenv(twinBugEnv); bug != "" {
		storetest.RunEquivalence(t, &goStepper{bug: bug, last: map[int]int64{}}, twinTestAlg(t))
	}
}

// RunEquivalence fails on a twin that credits a refund wrongly, and on one
// that never lets time go back (now = max(now, last), which the Go step
// does not do).
func TestRunEquivalenceCatchesBugs(t *testing.T) {
	for _, bug := range []string{"refund-credits-one-more", "time-never-goes-back"} {
		t.Run(bug, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestTwinBugHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), twinBugEnv+"="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "differ between the Go step and the Lua twin") {
				t.Fatalf("RunEquivalence passed a twin with the bug %s:\n%s", bug, out)
			}
		})
	}
}
