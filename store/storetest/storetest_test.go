package storetest_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// refStore is the simplest correct store: one mutex, one map keyed by
// (namespace, key). The suite must pass on it, on a manual clock and on
// real time.
type refStore struct {
	clock floodgate.Clock
	mu    sync.Mutex
	m     map[refKey]algo.State
}

type refKey struct {
	ns  uint64
	key string
}

func (r *refStore) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	k := refKey{alg.Spec().Namespace, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	st, d := alg.Step(r.m[k], r.clock.Now().UnixMicro(), n)
	r.m[k] = st
	return d, nil
}

// ApplyAll steps every op on a copy of its key's state, in order, and
// writes the copies back only when commit is set and every op admitted.
func (r *refStore) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if len(out) < len(ops) {
		return false, fmt.Errorf("%w: %d ops, %d decisions", floodgate.ErrInvalidConfig, len(ops), len(out))
	}
	for i, op := range ops {
		if op.N < 1 {
			return false, fmt.Errorf("%w: op %d has cost %d", floodgate.ErrInvalidCost, i, op.N)
		}
	}
	return r.group(ops, out, commit, flaws{}), nil
}

// flaws are the bugs brokenStore can give refStore's ApplyAll.
type flaws struct {
	commitsPartly     bool // keeps the admitted ops' states of a denied group
	stopsAtDenial     bool // steps no op after the first denial
	ignoresEarlierOps bool // steps every op on the stored state
}

// group is ApplyAll under the lock, with the flaws f.
func (r *refStore) group(ops []store.Op, out []floodgate.Decision, commit bool, f flaws) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now().UnixMicro()
	next := map[refKey]algo.State{}
	all := true
	for i, op := range ops {
		k := refKey{op.Alg.Spec().Namespace, op.Key}
		st, seen := next[k]
		if !seen || f.ignoresEarlierOps {
			st = r.m[k]
		}
		st, out[i] = op.Alg.Step(st, now, op.N)
		if out[i].Allowed || !f.commitsPartly {
			next[k] = st
		}
		all = all && out[i].Allowed
		if !out[i].Allowed && f.stopsAtDenial {
			clear(out[i+1 : len(ops)])
			break
		}
	}
	if !all && !f.commitsPartly {
		// Refused: the ops that fit report their key as it stands.
		for i, op := range ops {
			if out[i].Allowed {
				_, out[i] = op.Alg.Step(r.m[refKey{op.Alg.Spec().Namespace, op.Key}], now, 0)
			}
		}
	}
	if commit && (all || f.commitsPartly) {
		maps.Copy(r.m, next)
	}
	return all
}

func TestRunOnReferenceStore(t *testing.T) {
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return &refStore{clock: clk, m: map[refKey]algo.State{}}
	}, storetest.WithClock(clk))
}

func TestRunOnReferenceStoreRealTime(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return &refStore{clock: monotime.Clock{}, m: map[refKey]algo.State{}}
	})
}

func TestClock(t *testing.T) {
	start := time.Unix(1_700_000_000, 5)
	c := storetest.NewClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %v, want %v", c.Now(), start)
	}
	c.Advance(-time.Hour)
	if want := start.Add(-time.Hour); !c.Now().Equal(want) {
		t.Fatalf("after Advance(-1h): %v, want %v", c.Now(), want)
	}
	c.Set(start.Add(time.Minute))
	if want := start.Add(time.Minute); !c.Now().Equal(want) {
		t.Fatalf("after Set: %v, want %v", c.Now(), want)
	}
}
