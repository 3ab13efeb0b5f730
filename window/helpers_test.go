package window

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// t0 is a Unix time (µs) aligned to every window the tests use (1µs..1h).
const t0 = int64(1_700_002_800_000_000)

const (
	second = int64(1_000_000)
	hour   = 3600 * second
	year   = 365 * 24 * hour
)

// mapStore is the smallest correct store.Store: one mutex, one map, an
// explicit clock, and the W[0] contract honoured (a state back to full is
// dropped).
type mapStore struct {
	mu  sync.Mutex
	m   map[string]algo.State
	now int64
}

func newMapStore(now int64) *mapStore { return &mapStore{m: map[string]algo.State{}, now: now} }

func (s *mapStore) Apply(_ context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, d := alg.Step(s.m[key], s.now, n)
	if st.W[0] <= s.now {
		delete(s.m, key)
	} else {
		s.m[key] = st
	}
	return d, nil
}

// ApplyAll steps every op on a copy of its key's state, in order, and
// keeps the copies only when commit is set and every op admitted.
func (s *mapStore) ApplyAll(_ context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	if len(out) < len(ops) {
		return false, fmt.Errorf("%w: %d ops, %d decisions", floodgate.ErrInvalidConfig, len(ops), len(out))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]algo.State{}
	all := true
	for i, op := range ops {
		if op.N < 1 {
			return false, fmt.Errorf("%w: op %d has cost %d", floodgate.ErrInvalidCost, i, op.N)
		}
		st, seen := next[op.Key]
		if !seen {
			st = s.m[op.Key]
		}
		next[op.Key], out[i] = op.Alg.Step(st, s.now, op.N)
		all = all && out[i].Allowed
	}
	if !all || !commit {
		return all, nil
	}
	for k, st := range next {
		if st.W[0] <= s.now {
			delete(s.m, k)
		} else {
			s.m[k] = st
		}
	}
	return true, nil
}

func (s *mapStore) set(now int64) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

// algs returns the three algorithms of c, failing the test on error.
func algs(t testing.TB, c Config) map[string]algo.Algorithm {
	t.Helper()
	f, err := c.FixedAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.SlidingCounterAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]algo.Algorithm{"fixed": f, "log": l, "counter": k}
}

// us converts a duration to microseconds.
func us(d time.Duration) int64 { return int64(d / time.Microsecond) }

// step is one row of a table test: at t0+at, a request of cost n gets the
// decision (allowed, remaining, retry, reset), the durations in µs.
type step struct {
	at, n            int64
	allowed          bool
	rem, retry, rset int64
}

// runTable runs the rows on alg from the zero state, threading the state.
func runTable(t *testing.T, alg algo.Algorithm, limit int64, rows []step) {
	t.Helper()
	var s algo.State
	for i, r := range rows {
		var d floodgate.Decision
		s, d = alg.Step(s, t0+r.at, r.n)
		got := step{r.at, r.n, d.Allowed, d.Remaining, us(d.RetryAfter), us(d.ResetAfter)}
		if got != r {
			t.Fatalf("row %d: got %+v, want %+v", i, got, r)
		}
		if d.Limit != limit || d.Delay != 0 {
			t.Fatalf("row %d: limit %d delay %v", i, d.Limit, d.Delay)
		}
		checkDecision(t, alg, s, t0+r.at, r.n, d)
	}
}

// checkDecision asserts the per-decision invariants of d, the result of a
// step of cost n at now that left state s. It steps s further (purely) to
// check that RetryAfter is exact and that W[0] is the time to full.
func checkDecision(t testing.TB, alg algo.Algorithm, s algo.State, now, n int64, d floodgate.Decision) {
	t.Helper()
	limit, w := alg.Spec().Lua.Params[0], alg.Spec().Lua.Params[1]
	maxReset := w
	if alg.Spec().Name == "sliding-counter" {
		maxReset = 2 * w
	}
	switch {
	case d.Remaining < 0 || d.Remaining > d.Limit || d.Limit != limit:
		t.Fatalf("now %d n %d: remaining %d outside 0..%d", now, n, d.Remaining, d.Limit)
	case d.Allowed != (d.RetryAfter == 0):
		t.Fatalf("now %d n %d: allowed %v with retry %v", now, n, d.Allowed, d.RetryAfter)
	case n <= 0 && !d.Allowed:
		t.Fatalf("now %d n %d: refund or peek denied", now, n)
	case d.Delay != 0:
		t.Fatalf("now %d n %d: delay %v", now, n, d.Delay)
	case us(d.ResetAfter) < 0 || us(d.ResetAfter) > maxReset:
		t.Fatalf("now %d n %d: reset after %v beyond %dus", now, n, d.ResetAfter, maxReset)
	case (d.ResetAfter == 0) != (d.Remaining == d.Limit):
		t.Fatalf("now %d n %d: reset after %v with remaining %d/%d", now, n, d.ResetAfter, d.Remaining, d.Limit)
	case d.ResetAfter == 0 && (s.W != [algo.MaxWords]int64{} || s.Log != nil):
		t.Fatalf("now %d n %d: full state not zero: %v", now, n, s)
	case d.ResetAfter != 0 && s.W[0] != now+us(d.ResetAfter):
		t.Fatalf("now %d n %d: W[0] %d != now + reset %v", now, n, s.W[0], d.ResetAfter)
	case int64(len(s.Log)) > limit:
		t.Fatalf("now %d n %d: log of %d entries > limit %d", now, n, len(s.Log), limit)
	}
	if !d.Allowed && n <= limit {
		// The same request at now+RetryAfter is admitted, and not 1µs before.
		at := now + us(d.RetryAfter)
		if _, d2 := alg.Step(s, at, n); !d2.Allowed {
			t.Fatalf("now %d n %d: denied again at now+RetryAfter (%v): %+v", now, n, d.RetryAfter, d2)
		}
		if _, d2 := alg.Step(s, at-1, n); d2.Allowed {
			t.Fatalf("now %d n %d: admitted at now+RetryAfter-1µs (%v): RetryAfter not the shortest", now, n, d.RetryAfter)
		}
	}
	if s.W[0] != 0 {
		// From W[0] on, the state decides as the zero state does.
		for _, at := range []int64{s.W[0], s.W[0] + w/2 + 1} {
			for _, m := range []int64{0, 1, limit} {
				s1, d1 := alg.Step(s, at, m)
				s2, d2 := alg.Step(algo.State{}, at, m)
				if d1 != d2 || s1.W != s2.W || len(s1.Log) != len(s2.Log) {
					t.Fatalf("now %d n %d: at W[0]=%d the state is not full: %+v vs %+v", now, n, s.W[0], d1, d2)
				}
			}
		}
	}
}

func zeroState() algo.State { return algo.State{} }
