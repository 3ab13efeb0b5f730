package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// brokenStore is refStore with one deliberate bug.
type brokenStore struct {
	ref refStore
	bug string
}

func (b *brokenStore) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	switch b.bug {
	case "ignores-context":
		ctx = context.Background()
	case "truncates-keys":
		if len(key) > 16 {
			key = key[:16]
		}
	case "forgets-state":
		b.ref.mu.Lock()
		clear(b.ref.m)
		b.ref.mu.Unlock()
	case "ignores-namespace":
		return b.ref.Apply(ctx, key, nsAlg{alg}, n)
	}
	return b.ref.Apply(ctx, key, alg, n)
}

func (b *brokenStore) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	switch b.bug {
	case "takes-then-refunds":
		// Each op applied alone, the admitted ones refunded on a denial:
		// the refund gives back the units but not the rounding.
		all := true
		for i, op := range ops {
			out[i], _ = b.ref.Apply(ctx, op.Key, op.Alg, op.N)
			all = all && out[i].Allowed
		}
		if !all || !commit {
			for i, op := range ops {
				if out[i].Allowed {
					b.ref.Apply(ctx, op.Key, op.Alg, -op.N)
				}
			}
		}
		return all, nil
	case "commits-evaluations":
		commit = true
	case "commits-partly", "stops-at-denial", "ignores-earlier-ops":
		f := flaws{commitsPartly: b.bug == "commits-partly", stopsAtDenial: b.bug == "stops-at-denial", ignoresEarlierOps: b.bug == "ignores-earlier-ops"}
		return b.ref.group(ops, out, commit, f), nil
	}
	return b.ref.ApplyAll(ctx, ops, out, commit)
}

// nsAlg hides an algorithm's namespace.
type nsAlg struct{ algo.Algorithm }

func (a nsAlg) Spec() algo.Spec {
	sp := a.Algorithm.Spec()
	sp.Namespace = 0
	return sp
}

// brokenEnv selects the bug when the test binary runs itself.
const brokenEnv = "STORETEST_BROKEN"

// TestBrokenStoreHelper runs the suite on a broken store. It does nothing
// unless TestSuiteCatchesBrokenStores starts it in a child process.
func TestBrokenStoreHelper(t *testing.T) {
	bug := os.Getenv(brokenEnv)
	if bug == "" {
		return
	}
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return &brokenStore{ref: refStore{clock: clk, m: map[refKey]algo.State{}}, bug: bug}
	}, storetest.WithClock(clk))
}

// TestSuiteCatchesBrokenStores checks that the suite fails, in the expected
// check, on stores with classic bugs.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	for bug, check := range map[string]string{
		"ignores-context":   "ContextDone",
		"truncates-keys":    "KeysIsolated",
		"forgets-state":     "FreshKeyAdmitsBurst",
		"ignores-namespace": "NamespacesIsolated",
		// ApplyAll
		"takes-then-refunds":  "ApplyAll/AllOrNothing",
		"commits-evaluations": "ApplyAll/EvaluateOnly",
		"commits-partly":      "ApplyAll/AllOrNothing",
		"stops-at-denial":     "ApplyAll/DecisionsAndRetryAfter",
		"ignores-earlier-ops": "ApplyAll/SameKeyTwice",
	} {
		t.Run(bug, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStoreHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that %s:\n%s", bug, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenStoreHelper/"+check) {
				t.Fatalf("the suite did not fail %s on a store that %s:\n%s", check, bug, out)
			}
		})
	}
}
