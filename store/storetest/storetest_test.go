package storetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
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

func TestRunOnReferenceStore(t *testing.T) {
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	storetest.Run(t, func(t *testing.T) store.Store {
		return &refStore{clock: clk, m: map[refKey]algo.State{}}
	}, storetest.WithClock(clk))
}

func TestRunOnReferenceStoreRealTime(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return &refStore{clock: floodgate.SystemClock, m: map[refKey]algo.State{}}
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
