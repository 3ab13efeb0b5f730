package leaky_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Times in the tests are Unix µs; t0 is 2026-01-01T00:00:00Z.
const (
	t0  = int64(1_767_225_600_000_000)
	us  = int64(1)
	ms  = 1000 * us
	sec = 1000 * ms
)

// mapStore is the smallest correct store: a mutex, a map, an explicit
// time (or clock, when set). Like a real store it drops a key once its W[0]
// has passed, which by contract changes no decision.
type mapStore struct {
	mu    sync.Mutex
	now   int64
	clock floodgate.Clock
	m     map[string]algo.State
}

func newMapStore(now int64) *mapStore { return &mapStore{now: now, m: map[string]algo.State{}} }

func (s *mapStore) set(now int64) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

func (s *mapStore) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fmt.Sprintf("%x/%s", alg.Spec().Namespace, key)
	now := s.now
	if s.clock != nil {
		now = s.clock.Now().UnixMicro()
	}
	st := s.m[k]
	if st.W[0] <= now {
		st = algo.State{}
	}
	st, d := alg.Step(st, now, n)
	s.m[k] = st
	return d, nil
}

// ApplyAll steps every op in order on a copy of the states and keeps the
// copies only when all admit and commit is set.
func (s *mapStore) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now
	if s.clock != nil {
		now = s.clock.Now().UnixMicro()
	}
	next := map[string]algo.State{}
	ok := true
	for i, op := range ops {
		k := fmt.Sprintf("%x/%s", op.Alg.Spec().Namespace, op.Key)
		st, seen := next[k]
		if !seen {
			st = s.m[k]
			if st.W[0] <= now {
				st = algo.State{}
			}
		}
		st, out[i] = op.Alg.Step(st, now, op.N)
		next[k] = st
		ok = ok && out[i].Allowed
	}
	if !ok {
		// Refused: the ops that fit report their key as it stands.
		for i, op := range ops {
			if out[i].Allowed {
				st := s.m[fmt.Sprintf("%x/%s", op.Alg.Spec().Namespace, op.Key)]
				if st.W[0] <= now {
					st = algo.State{}
				}
				_, out[i] = op.Alg.Step(st, now, 0)
			}
		}
	}
	if ok && commit {
		maps.Copy(s.m, next)
	}
	return ok, nil
}

func mustAlg(t testing.TB, c leaky.Config) *leaky.Algorithm {
	t.Helper()
	a, err := c.Algorithm()
	require.NoError(t, err)
	return a.(*leaky.Algorithm)
}

// step is one request of a table: at (Unix µs), cost n, expected decision.
type step struct {
	at   int64
	n    int64
	want floodgate.Decision
}

// pass, delayed and deny build expected decisions; limit is filled in by
// runSteps.
func pass(rem int64, reset time.Duration) floodgate.Decision {
	return floodgate.Decision{Allowed: true, Remaining: rem, ResetAfter: reset}
}

func delayed(rem int64, reset, delay time.Duration) floodgate.Decision {
	return floodgate.Decision{Allowed: true, Remaining: rem, ResetAfter: reset, Delay: delay}
}

func deny(rem int64, retry, reset time.Duration) floodgate.Decision {
	return floodgate.Decision{Remaining: rem, RetryAfter: retry, ResetAfter: reset}
}

// runSteps applies steps in order to one key with the pure step and checks
// every decision exactly. It returns the final state.
func runSteps(t *testing.T, c leaky.Config, steps []step) algo.State {
	t.Helper()
	a := mustAlg(t, c)
	var s algo.State
	for i, st := range steps {
		var d floodgate.Decision
		s, d = a.Step(s, st.at, st.n)
		want := st.want
		want.Limit = c.Capacity()
		require.Equal(t, want, d, "step %d: at t0%+dus n=%d", i, st.at-t0, st.n)
		checkInvariants(t, d)
	}
	return s
}

func checkInvariants(t testing.TB, d floodgate.Decision) {
	t.Helper()
	require.GreaterOrEqual(t, d.Remaining, int64(0))
	require.LessOrEqual(t, d.Remaining, d.Limit)
	require.Equal(t, d.Allowed, d.RetryAfter == 0, "RetryAfter must be 0 exactly when allowed: %+v", d)
	require.Equal(t, d.Remaining == d.Limit, d.ResetAfter == 0, "ResetAfter must be 0 exactly when full: %+v", d)
	if !d.Allowed {
		require.Zero(t, d.Delay)
	}
}

func dur(x int64) time.Duration { return time.Duration(x) * time.Microsecond }
