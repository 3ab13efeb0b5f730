package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// The checks of [store.Store.ApplyAll]. Most of them compare twins: keys
// with the same history, one of which goes through the calls under test
// while the other does not (or goes through single Applies instead). A
// group that changes nothing must leave its key deciding exactly as its
// twin does, now and on every later request: that is "bit for bit", seen
// from outside the store.

// runApplyAll runs the ApplyAll checks of [Run].
func (s *suite) runApplyAll(t *testing.T) {
	t.Run("AllOrNothing", s.groupAllOrNothing)
	t.Run("EvaluateOnly", s.groupEvaluateOnly)
	t.Run("DecisionsAndRetryAfter", s.groupRetryAfter)
	t.Run("SameKeyTwice", s.groupSameKeyTwice)
	t.Run("CostAboveCapacity", s.groupCostAboveCapacity)
	t.Run("InvalidCalls", s.groupInvalidCalls)
	t.Run("Concurrent", s.groupConcurrent)
	t.Run("Closed", s.groupClosed)
}

// oddStep is a time step of an odd number of milliseconds: at 30 requests
// a minute (500 milli-requests a second) a leaky bucket leaks half a
// milli-request in it, which its integer state rounds away when a request
// is stepped, so that a take followed by a refund does not give the state
// back (the bucket's time to idle moves by 1ms).
const oddStep = 7 * time.Millisecond

// leakyBucket returns a keyed leaky bucket of 30 requests a minute, burst
// 4, the first 2 excess requests undelayed, on st.
func leakyBucket(t *testing.T, st store.Store) *store.Limiter {
	t.Helper()
	l, err := leaky.NewKeyed(st, leaky.Config{Rate: floodgate.PerMinute(30), Burst: 4, Delay: 2})
	if err != nil {
		t.Fatalf("leaky.NewKeyed: %v", err)
	}
	return l
}

// op is an ApplyAll op on limiter l.
func op(l *store.Limiter, key string, n int64) store.Op {
	return store.Op{Key: key, Alg: l.Algorithm(), N: n}
}

// applyAll runs one ApplyAll that must succeed as a call: every decision
// keeps the invariants, and the result is whether all of them admitted.
func applyAll(t *testing.T, st store.Store, ops []store.Op, commit bool) (bool, []floodgate.Decision) {
	t.Helper()
	out := make([]floodgate.Decision, len(ops))
	ok, err := st.ApplyAll(context.Background(), ops, out, commit)
	if err != nil {
		t.Fatalf("ApplyAll(%s, commit %v): %v", describe(ops), commit, err)
	}
	all := true
	for i, d := range out {
		if msg := decisionProblem(d); msg != "" {
			t.Fatalf("ApplyAll(%s, commit %v): op %d: %s", describe(ops), commit, i, msg)
		}
		all = all && d.Allowed
	}
	if ok != all {
		t.Fatalf("ApplyAll(%s, commit %v) = %v with decisions %+v", describe(ops), commit, ok, out)
	}
	return ok, out
}

// describe formats ops for messages.
func describe(ops []store.Op) string {
	parts := make([]string, len(ops))
	for i, o := range ops {
		parts[i] = fmt.Sprintf("%s %q %d", o.Alg.Spec().Name, short(o.Key), o.N)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// same checks that got, a decision on a key, is want, the decision of the
// same request on its twin: exactly when the suite controls time; on real
// time, the twins were stepped up to the time the check has taken apart.
func (s *suite) same(t *testing.T, what string, got, want floodgate.Decision, mark time.Time) {
	t.Helper()
	if s.exact() {
		if got != want {
			t.Fatalf("%s: %+v, want exactly %+v (its twin's)", what, got, want)
		}
		return
	}
	slack := s.slack(mark) + clockSkew
	near := func(a, b time.Duration) bool { return a-b <= slack && b-a <= slack }
	if got.Allowed != want.Allowed {
		// Decided on either side of the moment a token came back: the
		// refusal's wait must be within the time the twins were apart.
		refused := got
		if got.Allowed {
			refused = want
		}
		if refused.RetryAfter > slack {
			t.Fatalf("%s: %+v, want %+v (its twin's, up to %v apart)", what, got, want, slack)
		}
		return
	}
	if got.Allowed != want.Allowed || got.Limit != want.Limit || got.Remaining-want.Remaining > 1 || want.Remaining-got.Remaining > 1 ||
		!near(got.RetryAfter, want.RetryAfter) || !near(got.ResetAfter, want.ResetAfter) || !near(got.Delay, want.Delay) {
		t.Fatalf("%s: %+v, want %+v (its twin's, up to %v apart)", what, got, want, slack)
	}
}

// twins checks that key and its twin decide alike on every limiter of ls:
// a peek now, then a take of 1 on both every oddStep until both deny (at
// most 8 takes).
func (s *suite) twins(t *testing.T, ls []*store.Limiter, key, twin string, mark time.Time) {
	t.Helper()
	for _, l := range ls {
		name := l.Algorithm().Spec().Name
		s.same(t, fmt.Sprintf("%s: peek on %q", name, key), peek(t, l, key), peek(t, l, twin), mark)
	}
	for i := range 8 {
		s.advance(oddStep)
		denied := 0
		for _, l := range ls {
			name := l.Algorithm().Spec().Name
			d := take(t, l, key, 1)
			s.same(t, fmt.Sprintf("%s: take %d on %q", name, i+1, key), d, take(t, l, twin, 1), mark)
			if !d.Allowed {
				denied++
			}
		}
		if denied == len(ls) {
			return
		}
	}
}

// groupStore returns a fresh store with three limiters on it: a token
// bucket of 5, a leaky bucket (see leakyBucket) and a token bucket of 1 to
// drain, all slow.
func (s *suite) groupStore(t *testing.T) (st store.Store, tb, lk, deny *store.Limiter) {
	t.Helper()
	st = s.newStore(t)
	return st, tokenBucket(t, st, 5, slow), leakyBucket(t, st), tokenBucket(t, st, 1, slow)
}

// groupAllOrNothing: a group with one denying op changes no state at all,
// not even the rounding of a leaky bucket, and each op's decision is what
// it alone would get.
func (s *suite) groupAllOrNothing(t *testing.T) {
	st, tb, lk, deny := s.groupStore(t)
	mark := time.Now()
	// g goes through the groups, c never does, x takes each op alone.
	for _, k := range []string{"g", "c", "x"} {
		take(t, tb, k, 2)
		take(t, lk, k, 1)
	}
	take(t, deny, "d", 1)
	for round := range 3 {
		s.advance(oddStep)
		ops := []store.Op{op(tb, "g", 1), op(lk, "g", 1), op(deny, "d", 1)}
		ok, out := applyAll(t, st, ops, true)
		if ok || !out[0].Allowed || !out[1].Allowed || out[2].Allowed {
			t.Fatalf("round %d: ApplyAll(%s) = %v, %+v; want denied by the last op alone", round, describe(ops), ok, out)
		}
		if round == 0 {
			// Refused: the ops that fit report their key as it stands.
			s.same(t, "the token bucket's op", out[0], peek(t, tb, "x"), mark)
			s.same(t, "the leaky bucket's op", out[1], peek(t, lk, "x"), mark)
			s.same(t, "the denying op", out[2], take(t, deny, "d", 1), mark)
		}
	}
	// Denied by the leaky bucket this time: 5 units do not fit its excess.
	s.advance(oddStep)
	ops := []store.Op{op(tb, "g", 1), op(deny, "free", 1), op(lk, "g", 5)}
	if ok, out := applyAll(t, st, ops, true); ok || !out[0].Allowed || !out[1].Allowed || out[2].Allowed {
		t.Fatalf("ApplyAll(%s) = %v, %+v; want denied by the leaky bucket alone", describe(ops), ok, out)
	}
	if d := peek(t, deny, "free"); d.Remaining != 1 {
		t.Fatalf("a denied group consumed from a fresh key: %+v", d)
	}
	s.twins(t, []*store.Limiter{tb, lk}, "g", "c", mark)
}

// groupEvaluateOnly: commit false never changes state, admitted or not,
// and tells what the commit then decides.
func (s *suite) groupEvaluateOnly(t *testing.T) {
	st, tb, lk, deny := s.groupStore(t)
	mark := time.Now()
	for _, k := range []string{"g", "c"} {
		take(t, tb, k, 3)
		take(t, lk, k, 2)
	}
	take(t, deny, "d", 1)
	fits := []store.Op{op(tb, "g", 1), op(lk, "g", 2)}
	for round := range 3 {
		s.advance(oddStep)
		if ok, out := applyAll(t, st, fits, false); !ok {
			t.Fatalf("round %d: evaluating %s, which fits, denied: %+v", round, describe(fits), out)
		}
		ops := []store.Op{op(tb, "g", 2), op(deny, "d", 1), op(lk, "g", 1)}
		if ok, out := applyAll(t, st, ops, false); ok || out[1].Allowed {
			t.Fatalf("round %d: evaluating %s admitted: %+v", round, describe(ops), out)
		}
		if ok, out := applyAll(t, st, []store.Op{op(tb, "fresh", 5)}, false); !ok || out[0].Remaining != 0 {
			t.Fatalf("round %d: evaluating a take of the whole burst of a fresh key: %v, %+v", round, ok, out)
		}
	}
	s.same(t, "token bucket after evaluations", peek(t, tb, "g"), peek(t, tb, "c"), mark)
	s.same(t, "leaky bucket after evaluations", peek(t, lk, "g"), peek(t, lk, "c"), mark)
	if d := peek(t, tb, "fresh"); d.Remaining != 5 {
		t.Fatalf("an evaluation consumed from a fresh key: %+v", d)
	}
	// An evaluation tells what the commit decides; the commit's decisions
	// are what each op alone gets.
	s.advance(oddStep)
	_, eval := applyAll(t, st, fits, false)
	ok, got := applyAll(t, st, fits, true)
	if !ok {
		t.Fatalf("committing %s, which fits, denied: %+v", describe(fits), got)
	}
	for i := range fits {
		s.same(t, fmt.Sprintf("op %d: commit after its evaluation", i), got[i], eval[i], mark)
	}
	s.same(t, "the token bucket's op", got[0], take(t, tb, "c", 1), mark)
	s.same(t, "the leaky bucket's op", got[1], take(t, lk, "c", 2), mark)
	s.twins(t, []*store.Limiter{tb, lk}, "g", "c", mark)
}

// groupRetryAfter: a denied op's RetryAfter is exact, and a client that
// waits the largest RetryAfter of the group is then admitted by all of it.
func (s *suite) groupRetryAfter(t *testing.T) {
	const ia, ib = 20 * time.Millisecond, 30 * time.Millisecond
	st := s.newStore(t)
	a := tokenBucket(t, st, 2, ia)
	b := tokenBucket(t, st, 1, ib)
	free := tokenBucket(t, st, 5, slow)
	mark := time.Now()
	take(t, a, "a", 2)
	take(t, b, "b", 1)
	ops := []store.Op{op(a, "a", 1), op(free, "f", 1), op(b, "b", 1)}
	ok, out := applyAll(t, st, ops, true)
	if (ok || out[0].Allowed) && s.late(t, mark, ia) {
		return
	}
	if ok || out[0].Allowed || !out[1].Allowed || out[2].Allowed {
		t.Fatalf("ApplyAll(%s) = %v, %+v; want the first and last ops denied", describe(ops), ok, out)
	}
	s.dur(t, "RetryAfter of the first op", out[0].RetryAfter, ia, mark)
	s.dur(t, "RetryAfter of the last op", out[2].RetryAfter, ib, mark)
	s.same(t, "the first op", out[0], take(t, a, "a", 1), mark)
	s.same(t, "the op that fits, as it stands", out[1], peek(t, free, "f-twin"), mark)
	s.same(t, "the last op", out[2], take(t, b, "b", 1), mark)
	wait := max(out[0].RetryAfter, out[2].RetryAfter)
	if s.exact() {
		s.advance(wait - time.Microsecond)
		ok, out := applyAll(t, st, ops, true)
		if ok || !out[0].Allowed || out[2].RetryAfter != time.Microsecond {
			t.Fatalf("1µs before the largest RetryAfter: %v, %+v; want only the last op denied, for 1µs", ok, out)
		}
		s.advance(time.Microsecond)
	} else {
		s.advance(wait)
	}
	if ok, out := applyAll(t, st, ops, true); !ok {
		t.Fatalf("the group retried after its largest RetryAfter (%v) denied: %+v", wait, out)
	}
	if d := peek(t, free, "f"); d.Remaining != 4 {
		t.Fatalf("the group consumed %d from its admitted op's key, want 1 (only the admitted call): %+v", 5-d.Remaining, d)
	}
}

// groupSameKeyTwice: ops on one key and namespace step in order, each on
// the state the previous one left; one key under two namespaces is two
// states.
func (s *suite) groupSameKeyTwice(t *testing.T) {
	st := s.newStore(t)
	tb := tokenBucket(t, st, 5, slow)
	other := tokenBucket(t, st, 2, slow)
	mark := time.Now()
	ok, out := applyAll(t, st, []store.Op{op(tb, "k", 2), op(tb, "k", 2)}, true)
	if !ok {
		t.Fatalf("two takes of 2 on a fresh burst of 5 denied: %+v", out)
	}
	s.remaining(t, out[0], 3, slow, mark)
	s.remaining(t, out[1], 1, slow, mark)
	s.remaining(t, peek(t, tb, "k"), 1, slow, mark)
	for _, commit := range []bool{false, true} {
		ok, out = applyAll(t, st, []store.Op{op(tb, "k", 1), op(tb, "k", 1)}, commit)
		if ok || !out[0].Allowed || out[1].Allowed {
			t.Fatalf("commit %v: two takes of 1 with 1 left: %v, %+v; want the second denied", commit, ok, out)
		}
		s.remaining(t, out[0], 1, slow, mark) // refused: the key as it stands
		s.dur(t, "RetryAfter of the second take", out[1].RetryAfter, slow, mark)
		s.remaining(t, peek(t, tb, "k"), 1, slow, mark)
	}
	ok, out = applyAll(t, st, []store.Op{op(tb, "k", 1), op(other, "k", 2)}, true)
	if !ok {
		t.Fatalf("one key under two namespaces shares state within a group: %+v", out)
	}
	s.remaining(t, out[0], 0, slow, mark)
	s.remaining(t, out[1], 0, slow, mark)
	s.remaining(t, peek(t, tb, "k"), 0, slow, mark)
	s.remaining(t, peek(t, other, "k"), 0, slow, mark)

	// A leaky bucket twice in a group: two takes in a row on its twin.
	lk := leakyBucket(t, st)
	take(t, lk, "g", 1)
	take(t, lk, "c", 1)
	s.advance(oddStep)
	ok, out = applyAll(t, st, []store.Op{op(lk, "g", 2), op(lk, "g", 1)}, true)
	if !ok {
		t.Fatalf("a leaky bucket of capacity 5 with 4 left denied 2 then 1: %+v", out)
	}
	s.same(t, "first take of the leaky bucket", out[0], take(t, lk, "c", 2), mark)
	s.same(t, "second take of the leaky bucket", out[1], take(t, lk, "c", 1), mark)
	s.twins(t, []*store.Limiter{lk}, "g", "c", mark)

	// The second op's RetryAfter is when both fit.
	const interval = 20 * time.Millisecond
	q := tokenBucket(t, st, 3, interval)
	mark = time.Now()
	take(t, q, "q", 2)
	ops := []store.Op{op(q, "q", 1), op(q, "q", 1)}
	ok, out = applyAll(t, st, ops, true)
	if ok && s.late(t, mark, interval) {
		return
	}
	if ok || !out[0].Allowed || out[1].Allowed {
		t.Fatalf("two takes of 1 with 1 left: %v, %+v; want the second denied", ok, out)
	}
	s.dur(t, "RetryAfter of the second take", out[1].RetryAfter, interval, mark)
	s.advance(out[1].RetryAfter)
	if ok, out := applyAll(t, st, ops, true); !ok {
		t.Fatalf("the group retried after RetryAfter denied: %+v", out)
	}
}

// groupCostAboveCapacity: an op that could never fit denies its group (or
// the call fails) and changes nothing; through TakeAll it is
// floodgate.ErrCostExceedsCapacity.
func (s *suite) groupCostAboveCapacity(t *testing.T) {
	st := s.newStore(t)
	tb := tokenBucket(t, st, 5, slow)
	mark := time.Now()
	take(t, tb, "a", 1)
	ops := []store.Op{op(tb, "a", 1), op(tb, "b", 6)}
	for _, commit := range []bool{false, true} {
		out := make([]floodgate.Decision, len(ops))
		ok, err := st.ApplyAll(context.Background(), ops, out, commit)
		if err == nil {
			for i, d := range out {
				if msg := decisionProblem(d); msg != "" {
					t.Fatalf("op %d: %s", i, msg)
				}
			}
			if ok || !out[0].Allowed || out[1].Allowed {
				t.Fatalf("commit %v: a group with a cost above the capacity: %v, %+v; want it denied by that op alone", commit, ok, out)
			}
		}
	}
	s.remaining(t, peek(t, tb, "a"), 4, slow, mark)
	s.remaining(t, peek(t, tb, "b"), 5, slow, mark)

	ctx := context.Background()
	for _, c := range []struct {
		n        int
		exceeds  bool
		describe string
	}{{6, true, "above the capacity"}, {0, false, "zero"}, {-1, false, "negative"}} {
		checks := []floodgate.Check{{Limiter: tb, Key: "a", N: 1}, {Limiter: tb, Key: "b", N: c.n}}
		d, err := floodgate.TakeAll(ctx, checks)
		if !errors.Is(err, floodgate.ErrInvalidCost) || errors.Is(err, floodgate.ErrCostExceedsCapacity) != c.exceeds || d != (floodgate.Decision{}) {
			t.Fatalf("TakeAll with a cost %s = %+v, %v; want the zero Decision and ErrInvalidCost (ErrCostExceedsCapacity: %v)", c.describe, d, err, c.exceeds)
		}
	}
	s.remaining(t, peek(t, tb, "a"), 4, slow, mark)
	s.remaining(t, peek(t, tb, "b"), 5, slow, mark)
}

// groupInvalidCalls: fewer decisions than ops, or a cost below 1, is an
// error that changes nothing.
func (s *suite) groupInvalidCalls(t *testing.T) {
	st := s.newStore(t)
	tb := tokenBucket(t, st, 5, slow)
	ctx := context.Background()
	// refused calls ApplyAll, which must return an error (and not panic).
	refused := func(what string, ops []store.Op, out []floodgate.Decision) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("ApplyAll with %s panicked: %v", what, r)
				}
			}()
			_, err = st.ApplyAll(ctx, ops, out, true)
		}()
		if err == nil {
			t.Fatalf("ApplyAll with %s: no error", what)
		}
	}
	ops := []store.Op{op(tb, "k", 1), op(tb, "k2", 1)}
	refused("fewer decisions than ops", ops, make([]floodgate.Decision, 1))
	for _, n := range []int64{0, -1} {
		refused(fmt.Sprintf("a cost of %d", n), []store.Op{op(tb, "k", 1), op(tb, "k2", n)}, make([]floodgate.Decision, 2))
	}
	for _, k := range []string{"k", "k2"} {
		if d := peek(t, tb, k); d.Remaining != 5 {
			t.Fatalf("a refused ApplyAll changed %q: %+v", k, d)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.ApplyAll(cancelled, ops, make([]floodgate.Decision, 2), true); err == nil {
		t.Fatal("ApplyAll with a cancelled context: no error")
	}
	if d := peek(t, tb, "k"); d.Remaining != 5 {
		t.Fatalf("a cancelled ApplyAll changed the state: %+v", d)
	}
}

// Sizes of the concurrent group check.
const (
	groupWorkers = 16
	groupCalls   = 100 // per worker
	groupBurst   = 150 // per (policy, key)
	groupSlots   = 8   // (policy, key) pairs
	groupMaxOps  = 3   // ops per group
	groupMaxCost = 2   // per op
	groupSeed    = 0x5 // of the random groups
)

// groupConcurrent: many goroutines apply overlapping groups (keys in any
// order, the same key twice, one key under two policies): no deadlock, no
// key admits past its burst, and each key's state is exactly what the
// admitted groups consumed (a partial commit would show).
func (s *suite) groupConcurrent(t *testing.T) {
	st := s.newStore(t)
	a := tokenBucket(t, st, groupBurst, slow)
	b := tokenBucket(t, st, groupBurst, slow)
	slots := make([]groupSlot, groupSlots)
	for i := range slots {
		slots[i] = groupSlot{a, fmt.Sprint("k", i/2)}
		if i%2 == 1 {
			slots[i].l = b
		}
	}
	var (
		admitted [groupSlots]atomic.Int64
		wg       sync.WaitGroup
		start    = make(chan struct{})
		errs     = make(chan error, groupWorkers)
		mark     = time.Now()
	)
	for w := range groupWorkers {
		wg.Go(func() {
			if err := groupWorker(st, slots, w, &admitted, start); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangLimit):
		t.Fatalf("%d goroutines applying overlapping groups still running after %v: deadlock?", groupWorkers, hangLimit)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := int64(0)
	for i, sl := range slots {
		got := admitted[i].Load()
		total += got
		if got > groupBurst {
			t.Fatalf("%s on %q admitted %d units, past its burst of %d", sl.l.Algorithm().Spec().Name, sl.key, got, groupBurst)
		}
		d := peek(t, sl.l, sl.key)
		s.remaining(t, d, groupBurst-got, slow, mark)
	}
	if total == 0 {
		t.Fatal("no group was admitted")
	}
}

// groupSlot is one (limiter, key) of groupConcurrent.
type groupSlot struct {
	l   *store.Limiter
	key string
}

// groupWorker is worker w of groupConcurrent: once start is closed, it
// applies random groups over slots and adds what each admitted group took
// to admitted. It returns the first problem it finds.
func groupWorker(st store.Store, slots []groupSlot, w int, admitted *[groupSlots]atomic.Int64, start <-chan struct{}) error {
	r := rand.New(rand.NewPCG(groupSeed, uint64(w)))
	ops := make([]store.Op, 0, groupMaxOps)
	picked := make([]int, 0, groupMaxOps)
	out := make([]floodgate.Decision, groupMaxOps)
	<-start
	for range groupCalls {
		ops, picked = ops[:0], picked[:0]
		for range 2 + r.IntN(groupMaxOps-1) {
			i := r.IntN(groupSlots)
			n := 1 + r.Int64N(groupMaxCost)
			ops = append(ops, op(slots[i].l, slots[i].key, n))
			picked = append(picked, i)
		}
		ok, err := st.ApplyAll(context.Background(), ops, out, true)
		if err != nil {
			return fmt.Errorf("ApplyAll(%s): %w", describe(ops), err)
		}
		if err := checkGroup(ok, ops, out[:len(ops)]); err != nil {
			return err
		}
		if ok {
			for j, i := range picked {
				admitted[i].Add(ops[j].N)
			}
		}
	}
	return nil
}

// checkGroup checks the decisions of one ApplyAll of ops: each one
// coherent, and ok exactly when every op was admitted.
func checkGroup(ok bool, ops []store.Op, out []floodgate.Decision) error {
	all := true
	for i, d := range out {
		if msg := decisionProblem(d); msg != "" {
			return fmt.Errorf("ApplyAll(%s): op %d: %s", describe(ops), i, msg)
		}
		all = all && d.Allowed
	}
	if ok != all {
		return fmt.Errorf("ApplyAll(%s) = %v with decisions %+v", describe(ops), ok, out)
	}
	return nil
}

// groupClosed: for a store with a Close method, ApplyAll racing Close
// either decides or returns floodgate.ErrClosed, and every call after Close
// returns ErrClosed.
func (s *suite) groupClosed(t *testing.T) {
	st := s.newStore(t)
	c, ok := st.(io.Closer)
	if !ok {
		t.Skip("the store has no Close method")
	}
	tb := tokenBucket(t, st, 1000, slow)
	var (
		wg    sync.WaitGroup
		calls atomic.Int64
		errs  = make(chan error, groupWorkers)
	)
	for w := range groupWorkers {
		wg.Go(func() {
			out := make([]floodgate.Decision, 2)
			for i := range 1000 {
				ops := []store.Op{op(tb, fmt.Sprint(w, "/", i%50), 1), op(tb, "shared", 1)}
				_, err := st.ApplyAll(context.Background(), ops, out, i%4 != 0)
				calls.Add(1)
				if errors.Is(err, floodgate.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for calls.Load() < groupWorkers {
		time.Sleep(100 * time.Microsecond)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("ApplyAll racing Close: %v, want a decision or ErrClosed", err)
	}
	for _, commit := range []bool{false, true} {
		out := make([]floodgate.Decision, 1)
		if _, err := st.ApplyAll(context.Background(), []store.Op{op(tb, "k", 1)}, out, commit); !errors.Is(err, floodgate.ErrClosed) {
			t.Fatalf("ApplyAll (commit %v) after Close: %v, want ErrClosed", commit, err)
		}
	}
	if _, err := st.Apply(context.Background(), "k", tb.Algorithm(), 1); !errors.Is(err, floodgate.ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
}

// algGroup runs RunAlgorithm's ApplyAll checks with alg: a denied group
// and an evaluation leave alg's state as it was, and the same key twice
// steps in order.
func (s *suite) algGroup(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	deny := tokenBucket(t, st, 1, slow)
	limit := apply(t, st, "probe", alg, 0).Limit
	mark := time.Now()
	for _, k := range []string{"g", "c", "x"} {
		if limit >= 2 {
			apply(t, st, k, alg, 1)
		}
	}
	take(t, deny, "d", 1)
	for round := range 3 {
		s.advance(oddStep)
		ops := []store.Op{{Key: "g", Alg: alg, N: 1}, op(deny, "d", 1)}
		ok, out := applyAll(t, st, ops, true)
		if ok || !out[0].Allowed || out[1].Allowed {
			t.Fatalf("round %d: ApplyAll(%s) = %v, %+v; want denied by the token bucket alone", round, describe(ops), ok, out)
		}
		if round == 0 {
			s.same(t, "the algorithm's op, as it stands", out[0], apply(t, st, "x", alg, 0), mark)
		}
		if ok, out := applyAll(t, st, ops[:1], false); !ok {
			t.Fatalf("round %d: evaluating a take that fits denied: %+v", round, out)
		}
	}
	s.same(t, "peek after denied groups and evaluations", apply(t, st, "g", alg, 0), apply(t, st, "c", alg, 0), mark)
	for i := range min(limit+1, 50) {
		s.same(t, fmt.Sprintf("take %d after denied groups and evaluations", i+1), apply(t, st, "g", alg, 1), apply(t, st, "c", alg, 1), mark)
	}
	// Twice in one group: two Applies in a row on a twin.
	s.advance(oddStep)
	_, out := applyAll(t, st, []store.Op{{Key: "g2", Alg: alg, N: 1}, {Key: "g2", Alg: alg, N: limit}}, true)
	// 1 + limit does not fit: the group is refused; the first op (which
	// fits) reports its key as it stands, the second is denied on the
	// state the first would have left.
	s.same(t, "first of two ops on one key, as it stands", out[0], apply(t, st, "c3", alg, 0), mark)
	apply(t, st, "c2", alg, 1)
	s.same(t, "second of two ops on one key", out[1], apply(t, st, "c2", alg, limit), mark)
}

// algGroupSameAsStep drives ApplyAll and an oracle (alg's Step on states
// of its own, committed when every op admits) side by side over random
// groups of alg and a token bucket, times, keys, costs and commits, mixed
// with single Applies: every decision must be identical.
func (s *suite) algGroupSameAsStep(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	tbAlg := tokenBucket(t, st, 3, time.Second).Algorithm()
	algs := []algo.Algorithm{alg, tbAlg}
	limits := []int64{apply(t, st, "probe", alg, 0).Limit, 3}
	r := rand.New(rand.NewPCG(uint64(limits[0]), alg.Spec().Namespace^0x9e3779b9))
	steps := []time.Duration{0, 0, 0, time.Microsecond, oddStep, 37 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour}
	keys := []string{"a", "b", "c"}
	oracle := map[algSlot]algo.State{}
	out := make([]floodgate.Decision, 4)
	for i := range 1500 {
		s.advance(steps[r.IntN(len(steps))])
		now := micros.Of(s.cfg.clock.Now())
		if r.IntN(4) == 0 { // a single Apply: takes, peeks and refunds
			sl := algSlot{r.IntN(2), keys[r.IntN(len(keys))]}
			n := r.Int64N(limits[sl.alg]+3) - 2
			got := apply(t, st, sl.key, algs[sl.alg], n)
			var want floodgate.Decision
			oracle[sl], want = algs[sl.alg].Step(oracle[sl], now, n)
			if got != want {
				t.Fatalf("step %d: Apply(%s, %q, %d) = %+v, the Step %+v", i, algs[sl.alg].Spec().Name, sl.key, n, got, want)
			}
			continue
		}
		ops := make([]store.Op, 1+r.IntN(len(out)))
		picked := make([]algSlot, len(ops))
		for j := range ops {
			sl := algSlot{r.IntN(2), keys[r.IntN(len(keys))]}
			picked[j] = sl
			ops[j] = store.Op{Key: sl.key, Alg: algs[sl.alg], N: 1 + r.Int64N(limits[sl.alg])}
		}
		commit := r.IntN(5) != 0
		ok, err := st.ApplyAll(context.Background(), ops, out, commit)
		if err != nil {
			t.Fatalf("step %d: ApplyAll(%s): %v", i, describe(ops), err)
		}
		wants, next, all := groupOracle(oracle, ops, picked, now)
		for j := range ops {
			if out[j] != wants[j] {
				t.Fatalf("step %d: ApplyAll(%s, commit %v): op %d decided %+v, the Step %+v", i, describe(ops), commit, j, out[j], wants[j])
			}
		}
		if ok != all {
			t.Fatalf("step %d: ApplyAll(%s) = %v, the Steps say %v", i, describe(ops), ok, all)
		}
		if all && commit {
			for sl, stt := range next {
				oracle[sl] = stt
			}
		}
	}
}

// algSlot is one (algorithm, key) of algGroupSameAsStep.
type algSlot struct {
	alg int
	key string
}

// groupOracle is what the steps say of a group ops on the slots picked,
// from the states of oracle at now: each op's decision (on a refused
// group, an op that fits reports its key as it stands: a peek on the
// committed state), the slots' states were the group committed, and
// whether every op admits.
func groupOracle(oracle map[algSlot]algo.State, ops []store.Op, picked []algSlot, now int64) ([]floodgate.Decision, map[algSlot]algo.State, bool) {
	next := map[algSlot]algo.State{}
	all := true
	wants := make([]floodgate.Decision, len(ops))
	for j, o := range ops {
		sl := picked[j]
		prev, stepped := next[sl]
		if !stepped {
			prev = oracle[sl]
		}
		next[sl], wants[j] = o.Alg.Step(prev, now, o.N)
		all = all && wants[j].Allowed
	}
	if !all {
		for j, o := range ops {
			if wants[j].Allowed {
				_, wants[j] = o.Alg.Step(oracle[picked[j]], now, 0)
			}
		}
	}
	return wants, next, all
}
