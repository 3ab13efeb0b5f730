package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Option configures [Run] and [RunAlgorithm]; build one with a With
// function.
type Option struct {
	apply func(*config)
}

type config struct {
	clock *Clock
	algs  []algo.Algorithm
}

// WithClock declares that every store newStore returns reads its time from c
// (for instance memstore.WithClock(c)). The suite then moves time by
// advancing c, never sleeps, and requires exact durations; it also runs the
// checks that need full control of time (clock jumps, the step-by-step
// comparison with the algorithm's Go step).
//
// Without WithClock the stores use real time (a Redis server's TIME, say):
// the suite sleeps where time must pass (never more than a few tens of
// milliseconds per check) and accepts durations short of the exact value by
// the time the check has taken.
func WithClock(c *Clock) Option { return Option{func(cf *config) { cf.clock = c }} }

// WithAlgorithms makes [Run] also run [RunAlgorithm] with each of algs, after
// the token-bucket checks.
func WithAlgorithms(algs ...algo.Algorithm) Option {
	return Option{func(cf *config) { cf.algs = append(cf.algs, algs...) }}
}

// suite carries what every check needs.
type suite struct {
	cfg      config
	newStore func(t *testing.T) store.Store
	luaTwins atomic.Bool // the stores implement TwinStepper
}

func newSuite(newStore func(t *testing.T) store.Store, opts []Option) *suite {
	s := &suite{}
	s.newStore = func(t *testing.T) store.Store {
		st := newStore(t)
		if _, ok := st.(TwinStepper); ok {
			s.luaTwins.Store(true)
		}
		return st
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&s.cfg)
		}
	}
	return s
}

// exact reports whether the suite controls time.
func (s *suite) exact() bool { return s.cfg.clock != nil }

// advance lets d pass for the stores under test.
func (s *suite) advance(d time.Duration) {
	if s.exact() {
		s.cfg.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

// slack is how much real time may have moved the stores' clock since mark:
// zero when the suite controls time.
func (s *suite) slack(mark time.Time) time.Duration {
	if s.exact() {
		return 0
	}
	return time.Since(mark) + 2*time.Millisecond
}

// clockSkew is how much a store's own clock (Redis TIME, read when the
// server runs the script) may lag the test's between two calls, from
// scheduling delays on a loaded 2-core machine running a Redis Cluster beside
// the tests. Only durations that real time shortens use it.
const clockSkew = 8 * time.Millisecond

// late reports, on real time only, that more than interval may have passed
// since mark: a check that a policy of that interval denies is then
// inconclusive (a loaded machine paused the test), not failed.
func (s *suite) late(t *testing.T, mark time.Time, interval time.Duration) bool {
	t.Helper()
	if s.slack(mark) < interval {
		return false
	}
	t.Logf("%v passed on real time, more than the %v interval: denial not checked", s.slack(mark), interval)
	return true
}

// dur checks a duration that real time can only shorten.
func (s *suite) dur(t *testing.T, what string, got, want time.Duration, mark time.Time) {
	t.Helper()
	slack := s.slack(mark)
	if !s.exact() {
		slack += clockSkew
	}
	if got > want || got < want-slack {
		if s.exact() {
			t.Fatalf("%s = %v, want exactly %v", what, got, want)
		}
		t.Fatalf("%s = %v, want %v (or up to %v less)", what, got, want, slack)
	}
}

// remaining checks a count that real time can only raise, by one unit per
// interval of the policy.
func (s *suite) remaining(t *testing.T, d floodgate.Decision, want int64, interval time.Duration, mark time.Time) {
	t.Helper()
	extra := int64(s.slack(mark) / interval)
	if d.Remaining < want || d.Remaining > min(want+extra, d.Limit) {
		t.Fatalf("Remaining = %d, want %d (decision %+v)", d.Remaining, want, d)
	}
}

// checkDecision asserts the invariants every decision keeps.
func checkDecision(t *testing.T, d floodgate.Decision) {
	t.Helper()
	if msg := decisionProblem(d); msg != "" {
		t.Fatal(msg)
	}
}

// decisionProblem says which invariant d breaks, or "" when it keeps them
// all (for goroutines, which may not call t.Fatal).
func decisionProblem(d floodgate.Decision) string {
	switch {
	case d.Limit < 1:
		return fmt.Sprintf("Limit = %d < 1: %+v", d.Limit, d)
	case d.Remaining < 0 || d.Remaining > d.Limit:
		return fmt.Sprintf("Remaining = %d outside 0..Limit: %+v", d.Remaining, d)
	case d.Allowed != (d.RetryAfter == 0):
		return fmt.Sprintf("Allowed = %v with RetryAfter = %v: %+v", d.Allowed, d.RetryAfter, d)
	case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0:
		return fmt.Sprintf("negative duration: %+v", d)
	case !d.Allowed && d.Delay != 0:
		return fmt.Sprintf("denial with a Delay: %+v", d)
	}
	return ""
}

// take runs one Take that must succeed as a call and keep the invariants.
func take(t *testing.T, l *store.Limiter, key string, n int) floodgate.Decision {
	t.Helper()
	d, err := l.Take(context.Background(), key, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", short(key), n, err)
	}
	checkDecision(t, d)
	return d
}

func peek(t *testing.T, l *store.Limiter, key string) floodgate.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("Peek(%q): %v", short(key), err)
	}
	checkDecision(t, d)
	return d
}

func apply(t *testing.T, st store.Store, key string, alg algo.Algorithm, n int64) floodgate.Decision {
	t.Helper()
	d, err := st.Apply(context.Background(), key, alg, n)
	if err != nil {
		t.Fatalf("Apply(%q, %s, %d): %v", short(key), alg.Spec().Name, n, err)
	}
	checkDecision(t, d)
	return d
}

// short shortens a key for messages.
func short(key string) string {
	if len(key) > 24 {
		return fmt.Sprintf("%s...(%d bytes)", key[:16], len(key))
	}
	return key
}

// tokenBucket returns a keyed token bucket of burst units refilling one unit
// per interval, on st.
func tokenBucket(t *testing.T, st store.Store, burst int64, interval time.Duration) *store.Limiter {
	t.Helper()
	return namedBucket(t, st, "", burst, interval)
}

// namedBucket is tokenBucket with a policy name: limiters of one name share
// each key's state.
func namedBucket(t *testing.T, st store.Store, name string, burst int64, interval time.Duration) *store.Limiter {
	t.Helper()
	l, err := bucket.NewKeyed(st, bucket.Config{Name: name, Rate: floodgate.Rate{N: 1, Per: interval}, Burst: burst})
	if err != nil {
		t.Fatalf("bucket.NewKeyed: %v", err)
	}
	return l
}

// slow is the interval of the policies that must not refill while a check
// runs on real time.
const slow = 12 * time.Minute // 5 per hour

// Run runs the conformance suite on the stores newStore returns. Every store
// must pass it. newStore is called once per check and must return an empty
// store (for a shared server: a fresh key prefix) that stays usable until
// the test ends; register its cleanup with t.Cleanup.
//
// The checks run one after another (a [Clock] given with [WithClock] is
// shared). They use the keyed token bucket of package bucket; then
// [RunAlgorithm] runs on the token bucket and on every algorithm given with
// [WithAlgorithms].
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	s := newSuite(newStore, opts)
	t.Run("FreshKeyAdmitsBurst", s.freshKeyAdmitsBurst)
	t.Run("RetryAfterIsExact", s.retryAfterIsExact)
	t.Run("Refill", s.refill)
	t.Run("CostN", s.costN)
	t.Run("Refund", s.refund)
	t.Run("Peek", s.peek)
	t.Run("NamespacesIsolated", s.namespacesIsolated)
	t.Run("KeysIsolated", s.keysIsolated)
	t.Run("ConcurrentTakesAdmitExactlyBurst", s.concurrentTakes)
	t.Run("InvalidCost", s.invalidCost)
	t.Run("ContextDone", s.contextDone)
	if s.exact() {
		t.Run("ClockJumps", s.clockJumps)
	}
	t.Run("ApplyAll", s.runApplyAll)
	tb, err := bucket.Config{Rate: floodgate.PerHour(5), Burst: 5}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	algs := append([]algo.Algorithm{tb}, s.cfg.algs...)
	for _, alg := range algs {
		t.Run("Algorithm/"+alg.Spec().Name, func(t *testing.T) { s.runAlgorithm(t, alg) })
	}
}

func (s *suite) freshKeyAdmitsBurst(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 5, slow)
	mark := time.Now()
	for i := int64(1); i <= 5; i++ {
		d := take(t, l, "fresh", 1)
		if !d.Allowed || d.Limit != 5 {
			t.Fatalf("take %d: %+v, want allowed with Limit 5", i, d)
		}
		s.remaining(t, d, 5-i, slow, mark)
		s.dur(t, fmt.Sprintf("take %d: ResetAfter", i), d.ResetAfter, time.Duration(i)*slow, mark)
	}
	for i := range 2 { // a denial consumes nothing: the second is the same
		d := take(t, l, "fresh", 1)
		if d.Allowed || d.Remaining != 0 {
			t.Fatalf("take %d past the burst: %+v, want denied with Remaining 0", 6+i, d)
		}
		s.dur(t, "RetryAfter", d.RetryAfter, slow, mark)
		s.dur(t, "ResetAfter", d.ResetAfter, 5*slow, mark)
	}
}

func (s *suite) retryAfterIsExact(t *testing.T) {
	const interval = 20 * time.Millisecond
	l := tokenBucket(t, s.newStore(t), 2, interval)
	mark := time.Now()
	take(t, l, "k", 2)
	d := take(t, l, "k", 1)
	if d.Allowed && s.late(t, mark, interval) {
		return
	}
	if d.Allowed {
		t.Fatalf("take past the burst admitted: %+v", d)
	}
	if s.exact() {
		if d.RetryAfter != interval {
			t.Fatalf("RetryAfter = %v, want %v", d.RetryAfter, interval)
		}
		s.advance(d.RetryAfter - time.Microsecond)
		if d2 := take(t, l, "k", 1); d2.Allowed || d2.RetryAfter != time.Microsecond {
			t.Fatalf("1µs before RetryAfter: %+v, want denied with RetryAfter 1µs", d2)
		}
		s.advance(time.Microsecond)
	} else {
		// The state's clock starts at the admission time due, however late
		// the sleep returns: count that lateness in the slack below.
		mark = time.Now().Add(d.RetryAfter)
		s.advance(d.RetryAfter)
	}
	if d := take(t, l, "k", 1); !d.Allowed {
		t.Fatalf("retry at RetryAfter denied: %+v", d)
	}
	// A cost of 2 on an empty bucket waits two intervals.
	if s.exact() {
		mark = time.Now()
	}
	d = take(t, l, "k", 2)
	if d.Allowed && s.late(t, mark, interval) {
		return
	}
	if d.Allowed {
		t.Fatalf("cost 2 on an empty bucket admitted: %+v", d)
	}
	s.dur(t, "RetryAfter for cost 2", d.RetryAfter, 2*interval, mark)
	s.advance(d.RetryAfter)
	if d := take(t, l, "k", 2); !d.Allowed {
		t.Fatalf("retry of cost 2 at RetryAfter denied: %+v", d)
	}
}

func (s *suite) refill(t *testing.T) {
	const interval = 10 * time.Millisecond
	l := tokenBucket(t, s.newStore(t), 10, interval)
	take(t, l, "k", 10)
	mark := time.Now()
	s.advance(3 * interval)
	d := peek(t, l, "k")
	s.remaining(t, d, 3, interval, mark)
	if s.exact() && d.ResetAfter != 7*interval {
		t.Fatalf("ResetAfter = %v after 3 of 10 refilled, want %v", d.ResetAfter, 7*interval)
	}
	for i := int64(0); i < 3; i++ {
		if d := take(t, l, "k", 1); !d.Allowed {
			t.Fatalf("refilled token %d denied: %+v", i+1, d)
		}
	}
	s.advance(20 * interval) // twice the time to full: refill stops at the burst
	mark = time.Now()
	d = peek(t, l, "k")
	if d.Remaining != 10 || d.ResetAfter != 0 {
		t.Fatalf("after a long idle time: %+v, want Remaining 10, ResetAfter 0", d)
	}
	for i := range 10 {
		if d := take(t, l, "k", 1); !d.Allowed {
			t.Fatalf("take %d of a refilled burst denied: %+v", i+1, d)
		}
	}
	if d := take(t, l, "k", 1); d.Allowed && !s.late(t, mark, interval) {
		t.Fatalf("refill went past the burst: %+v", d)
	}
}

func (s *suite) costN(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 5, slow)
	mark := time.Now()
	d := take(t, l, "k", 3)
	if !d.Allowed {
		t.Fatalf("cost 3 of 5 denied: %+v", d)
	}
	s.remaining(t, d, 2, slow, mark)
	d = take(t, l, "k", 3)
	if d.Allowed {
		t.Fatalf("cost 3 with 2 left admitted: %+v", d)
	}
	s.remaining(t, d, 2, slow, mark)
	s.dur(t, "RetryAfter (one unit short)", d.RetryAfter, slow, mark)
	d = take(t, l, "k", 2)
	if !d.Allowed {
		t.Fatalf("cost 2 with 2 left denied: %+v", d)
	}
	s.remaining(t, d, 0, slow, mark)
	s.dur(t, "ResetAfter", d.ResetAfter, 5*slow, mark)
}

func (s *suite) refund(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 5, slow)
	ctx := context.Background()
	mark := time.Now()
	take(t, l, "k", 4)
	if err := l.Refund(ctx, "k", 2); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	s.remaining(t, peek(t, l, "k"), 3, slow, mark)
	if err := l.Refund(ctx, "k", 5); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if d := peek(t, l, "k"); d.Remaining != 5 || d.ResetAfter != 0 {
		t.Fatalf("refund past full: %+v, want Remaining 5 and ResetAfter 0", d)
	}
	if err := l.Refund(ctx, "fresh", 3); err != nil {
		t.Fatalf("Refund on a fresh key: %v", err)
	}
	if d := peek(t, l, "fresh"); d.Remaining != 5 {
		t.Fatalf("refund on a fresh key: %+v, want Remaining 5", d)
	}
	for i := range 5 {
		if d := take(t, l, "fresh", 1); !d.Allowed {
			t.Fatalf("take %d after a refund on a fresh key denied: %+v", i+1, d)
		}
	}
	if d := take(t, l, "fresh", 1); d.Allowed {
		t.Fatalf("a refund on a fresh key credited past the burst: %+v", d)
	}
}

func (s *suite) peek(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 5, slow)
	d := peek(t, l, "k")
	if !d.Allowed || d.Remaining != 5 || d.Limit != 5 || d.ResetAfter != 0 {
		t.Fatalf("peek on a fresh key: %+v, want allowed, 5 of 5, ResetAfter 0", d)
	}
	mark := time.Now()
	take(t, l, "k", 2)
	for range 3 {
		d := peek(t, l, "k")
		s.remaining(t, d, 3, slow, mark)
		s.dur(t, "ResetAfter", d.ResetAfter, 2*slow, mark)
	}
	take(t, l, "k", 3)
	if d := peek(t, l, "k"); d.Remaining != 0 {
		t.Fatalf("peek on an empty bucket: %+v, want Remaining 0", d)
	}
	if d := take(t, l, "k", 1); d.Allowed {
		t.Fatalf("peeks consumed nothing, yet the bucket admitted past its burst: %+v", d)
	}
}

func (s *suite) namespacesIsolated(t *testing.T) {
	st := s.newStore(t)
	a := namedBucket(t, st, "shared", 5, slow)
	a2 := namedBucket(t, st, "shared", 5, slow) // same name: same namespace, shared state
	u := tokenBucket(t, st, 5, slow)            // same parameters, unnamed: its own state
	b := tokenBucket(t, st, 3, slow)            // other burst
	c := tokenBucket(t, st, 5, slow/2)
	if a.Algorithm().Spec().Namespace == b.Algorithm().Spec().Namespace || a.Algorithm().Spec().Namespace == c.Algorithm().Spec().Namespace {
		t.Fatal("distinct token-bucket policies share a namespace")
	}
	take(t, a, "k", 5)
	if d := take(t, a2, "k", 1); d.Allowed {
		t.Fatalf("two limiters with the same name do not share state: %+v", d)
	}
	if d := peek(t, u, "k"); d.Remaining != 5 {
		t.Fatalf("an unnamed limiter with the same parameters sees a's takes: %+v", d)
	}
	if d := peek(t, b, "k"); d.Remaining != 3 {
		t.Fatalf("namespace b sees a's takes: %+v", d)
	}
	if d := peek(t, c, "k"); d.Remaining != 5 {
		t.Fatalf("namespace c sees a's takes: %+v", d)
	}
	take(t, b, "k", 3)
	take(t, c, "k", 1)
	if d := peek(t, a, "k"); d.Remaining != 0 {
		t.Fatalf("namespace a changed by b and c: %+v", d)
	}
	if d := peek(t, c, "k"); d.Remaining != 4 {
		t.Fatalf("namespace c changed by b: %+v", d)
	}
}

// hostileKeys are keys that break naive stores: empty, Redis hash-tag
// braces, line breaks, NUL, invalid UTF-8, prefixes of one another, and
// 64 KiB binary keys that differ only in their last byte.
func hostileKeys() []string {
	bin := make([]byte, 64<<10)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	bin2 := append([]byte(nil), bin...)
	bin2[len(bin2)-1] ^= 1
	return []string{
		"", "{", "}", "{}", "a}b{", "{a}", "{a}b", "a", "A", "a ", " a", "a\x00", "\x00a", "\x00",
		"a\x00b", "\r", "\n", "\r\n", "a\r\nb", "ключ", "\xff\xfe\xfd", "*", "?", "[a]", "%s", "${x}",
		"k:1", "k:10", "k:1:0", string(bin), string(bin2), string(bin[:len(bin)-1]),
	}
}

func (s *suite) keysIsolated(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 2, slow)
	keys := hostileKeys()
	for i, k := range keys {
		if d := peek(t, l, k); d.Remaining != 2 {
			t.Fatalf("key %d %q is not fresh before its first take: %+v (it shares state with an earlier key)", i, short(k), d)
		}
		take(t, l, k, 2)
		if d := take(t, l, k, 1); d.Allowed {
			t.Fatalf("key %d %q admitted past its burst: %+v", i, short(k), d)
		}
	}
	for i, k := range keys {
		if d := peek(t, l, k); d.Remaining != 0 {
			t.Fatalf("key %d %q lost its state: %+v", i, short(k), d)
		}
	}
}

// concurrency is how many goroutines race on one fresh key.
const concurrency = 1000

func (s *suite) concurrentTakes(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 100, slow)
	if got := admitConcurrently(t, func(ctx context.Context) (floodgate.Decision, error) {
		return l.Take(ctx, "hot", 1)
	}); got != 100 {
		t.Fatalf("%d concurrent takes on a fresh key of burst 100 admitted %d", concurrency, got)
	}
}

// admitConcurrently runs do from concurrency goroutines released at once and
// returns how many were admitted.
func admitConcurrently(t *testing.T, do func(context.Context) (floodgate.Decision, error)) int64 {
	t.Helper()
	var (
		wg       sync.WaitGroup
		admitted atomic.Int64
		start    = make(chan struct{})
		errs     = make(chan error, concurrency)
	)
	for range concurrency {
		wg.Go(func() {
			<-start
			d, err := do(context.Background())
			if err != nil {
				errs <- err
				return
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent take: %v", err)
	}
	return admitted.Load()
}

func (s *suite) invalidCost(t *testing.T) {
	l := tokenBucket(t, s.newStore(t), 5, slow)
	ctx := context.Background()
	for _, n := range []int{0, -1, 6, 1 << 40} {
		if d, err := l.Take(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) || d != (floodgate.Decision{}) {
			t.Errorf("Take(n=%d) = %+v, %v; want the zero Decision and ErrInvalidCost", n, d, err)
		}
		if err := l.Refund(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) {
			t.Errorf("Refund(n=%d) = %v; want ErrInvalidCost", n, err)
		}
	}
	if d := peek(t, l, "k"); d.Remaining != 5 {
		t.Fatalf("invalid costs changed the state: %+v", d)
	}
}

// hangLimit bounds how long a store may take to refuse a done context.
const hangLimit = 10 * time.Second

func (s *suite) contextDone(t *testing.T) {
	st := s.newStore(t)
	l := tokenBucket(t, st, 5, slow)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"cancelled", cancelled, context.Canceled}, {"past deadline", expired, context.DeadlineExceeded}} {
		type result struct {
			d   floodgate.Decision
			err error
		}
		done := make(chan result, 1)
		go func() {
			d, err := st.Apply(c.ctx, "k", l.Algorithm(), 1)
			done <- result{d, err}
		}()
		select {
		case r := <-done:
			if r.err == nil || r.d != (floodgate.Decision{}) {
				t.Fatalf("Apply with a %s context = %+v, %v; want an error and the zero Decision", c.name, r.d, r.err)
			}
			if !errors.Is(r.err, c.want) {
				t.Logf("Apply with a %s context: %v (does not wrap %v)", c.name, r.err, c.want)
			}
		case <-time.After(hangLimit):
			t.Fatalf("Apply with a %s context hangs", c.name)
		}
	}
	if d := peek(t, l, "k"); d.Remaining != 5 {
		t.Fatalf("a failed Apply changed the state: %+v", d)
	}
}

// clockJumps moves the clock back by a second and an hour and forward by ten
// years: decisions keep their invariants, nothing is credited by going back,
// and a long jump forward leaves the bucket full.
func (s *suite) clockJumps(t *testing.T) {
	const interval = time.Second
	l := tokenBucket(t, s.newStore(t), 5, interval)
	take(t, l, "k", 3)
	for _, jump := range []time.Duration{-time.Second, -time.Hour} {
		s.advance(jump)
		d := peek(t, l, "k")
		if d.Remaining > 2 {
			t.Fatalf("clock back by %v credited tokens: %+v", jump, d)
		}
		admitted := int64(0)
		for range 10 {
			if take(t, l, "k", 1).Allowed {
				admitted++
			}
		}
		if admitted > 2 {
			t.Fatalf("clock back by %v: %d admitted with at most 2 left", jump, admitted)
		}
		s.advance(interval)
		if d := take(t, l, "k", 1); !d.Allowed {
			t.Fatalf("one interval after a jump back of %v: %+v, want a refilled token", jump, d)
		}
	}
	s.advance(10 * 365 * 24 * time.Hour)
	if d := peek(t, l, "k"); d.Remaining != 5 || d.ResetAfter != 0 {
		t.Fatalf("ten years later: %+v, want a full bucket", d)
	}
	for range 5 {
		if d := take(t, l, "k", 1); !d.Allowed {
			t.Fatalf("ten years later, take denied: %+v", d)
		}
	}
	if d := take(t, l, "k", 1); d.Allowed || d.RetryAfter != interval {
		t.Fatalf("ten years later, past the burst: %+v, want denied with RetryAfter %v", d, interval)
	}
}

// RunAlgorithm runs the algorithm-independent checks with alg on the stores
// newStore returns (see [Run] for newStore). Every algorithm package runs it
// with its own algorithms on every store, for instance
//
//	storetest.RunAlgorithm(t, newStore, myAlg, storetest.WithClock(clk))
//
// It requires of alg what the [algo.Algorithm] contract promises: a fresh
// key is full (a peek reports Remaining == Limit), Limit units of cost 1 are
// admitted at one instant and the next is denied, a retry after RetryAfter is
// admitted, a negative cost refunds, never beyond Limit. Limit must be at
// most 10,000. Without [WithClock] the algorithm must not restore a unit
// within a few seconds (the checks run on real time); with it, the suite also
// compares every decision of the store, over a random sequence of times,
// keys and costs, with alg's Step run directly, for single Applies and for
// ApplyAll groups of alg and a token bucket. On a store that runs Lua twins
// ([TwinStepper], the Redis store) it also runs [RunEquivalence].
func RunAlgorithm(t *testing.T, newStore func(t *testing.T) store.Store, alg algo.Algorithm, opts ...Option) {
	newSuite(newStore, opts).runAlgorithm(t, alg)
}

// maxAlgorithmLimit bounds the Limit RunAlgorithm drains one unit at a time.
const maxAlgorithmLimit = 10_000

func (s *suite) runAlgorithm(t *testing.T, alg algo.Algorithm) {
	if alg == nil {
		t.Fatal("nil algorithm")
	}
	sp := alg.Spec()
	if sp.Words < 1 || sp.Words > algo.MaxWords || sp.MaxLog < 0 {
		t.Fatalf("algorithm %q: Spec %+v outside the store contract", sp.Name, sp)
	}
	t.Run("FreshThenExhausted", func(t *testing.T) { s.algFresh(t, alg) })
	t.Run("Refund", func(t *testing.T) { s.algRefund(t, alg) })
	t.Run("NamespaceIsolated", func(t *testing.T) { s.algNamespace(t, alg) })
	t.Run("Concurrent", func(t *testing.T) { s.algConcurrent(t, alg) })
	t.Run("ContextDone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if d, err := s.newStore(t).Apply(ctx, "k", alg, 1); err == nil || d != (floodgate.Decision{}) {
			t.Fatalf("Apply with a cancelled context = %+v, %v; want an error", d, err)
		}
	})
	t.Run("ApplyAll", func(t *testing.T) { s.algGroup(t, alg) })
	if s.exact() {
		t.Run("SameAsStep", func(t *testing.T) { s.algSameAsStep(t, alg) })
		t.Run("ApplyAllSameAsStep", func(t *testing.T) { s.algGroupSameAsStep(t, alg) })
	}
	if s.luaTwins.Load() {
		t.Run("LuaTwinSameAsStep", func(t *testing.T) { RunEquivalence(t, s.newStore(t).(TwinStepper), alg) })
	}
}

// drain takes cost 1 from a fresh key until denied and returns the limit and
// the denial.
func drain(t *testing.T, st store.Store, alg algo.Algorithm, key string) (int64, floodgate.Decision) {
	t.Helper()
	d := apply(t, st, key, alg, 0)
	if !d.Allowed || d.Remaining != d.Limit {
		t.Fatalf("peek on a fresh key: %+v, want allowed with Remaining == Limit", d)
	}
	limit := d.Limit
	if limit > maxAlgorithmLimit {
		t.Fatalf("Limit %d above the %d the suite drains", limit, maxAlgorithmLimit)
	}
	for i := int64(1); i <= limit; i++ {
		if d := apply(t, st, key, alg, 1); !d.Allowed {
			t.Fatalf("take %d of a fresh key with Limit %d denied: %+v", i, limit, d)
		}
	}
	d = apply(t, st, key, alg, 1)
	if d.Allowed {
		t.Fatalf("take %d past Limit admitted: %+v", limit+1, d)
	}
	return limit, d
}

func (s *suite) algFresh(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	_, d := drain(t, st, alg, "k")
	if d.RetryAfter <= 0 {
		t.Fatalf("denial without RetryAfter: %+v", d)
	}
	if !s.exact() && d.RetryAfter > 100*time.Millisecond {
		return // too long to sleep on real time
	}
	s.advance(d.RetryAfter)
	if d2 := apply(t, st, "k", alg, 1); !d2.Allowed {
		t.Fatalf("retry after RetryAfter (%v) denied: %+v", d.RetryAfter, d2)
	}
}

func (s *suite) algRefund(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	limit := apply(t, st, "k", alg, 0).Limit
	if limit < 2 {
		return
	}
	apply(t, st, "k", alg, 2)
	if d := apply(t, st, "k", alg, -1); !d.Allowed || d.Remaining != limit-1 {
		t.Fatalf("refund of 1 after taking 2: %+v, want allowed with Remaining %d", d, limit-1)
	}
	if d := apply(t, st, "k", alg, -limit); !d.Allowed || d.Remaining != limit {
		t.Fatalf("refund past full: %+v, want allowed with Remaining %d", d, limit)
	}
}

func (s *suite) algNamespace(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	other := tokenBucket(t, st, 3, slow)
	if other.Algorithm().Spec().Namespace == alg.Spec().Namespace {
		t.Fatal("the algorithm shares the token bucket's namespace")
	}
	drain(t, st, alg, "k")
	if d := peek(t, other, "k"); d.Remaining != 3 {
		t.Fatalf("another namespace sees the algorithm's takes: %+v", d)
	}
	take(t, other, "k", 3)
	if d := apply(t, st, "k", alg, 1); d.Allowed {
		t.Fatalf("another namespace's takes credited the algorithm: %+v", d)
	}
}

func (s *suite) algConcurrent(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	limit := apply(t, st, "probe", alg, 0).Limit
	got := admitConcurrently(t, func(ctx context.Context) (floodgate.Decision, error) {
		return st.Apply(ctx, "hot", alg, 1)
	})
	if want := min(limit, concurrency); got != want {
		t.Fatalf("%d concurrent takes on a fresh key with Limit %d admitted %d, want %d", concurrency, limit, got, want)
	}
}

// algSameAsStep drives the store and alg.Step side by side over random
// times, keys and costs: every decision must be identical.
func (s *suite) algSameAsStep(t *testing.T, alg algo.Algorithm) {
	st := s.newStore(t)
	limit := apply(t, st, "probe", alg, 0).Limit
	r := rand.New(rand.NewPCG(uint64(limit), alg.Spec().Namespace))
	// Time only moves forward here: a store may drop a state that is full
	// (the contract of State.W[0]), which a clock going back would reveal.
	steps := []time.Duration{0, 0, time.Microsecond, 999 * time.Microsecond, time.Millisecond, 37 * time.Millisecond,
		time.Second, 7 * time.Second, time.Minute, time.Hour}
	keys := []string{"a", "b", "c", "d"}
	oracle := map[string]algo.State{}
	for i := range 2000 {
		s.advance(steps[r.IntN(len(steps))])
		key := keys[r.IntN(len(keys))]
		n := r.Int64N(limit+3) - 2 // -2 .. limit
		got := apply(t, st, key, alg, n)
		var want floodgate.Decision
		oracle[key], want = alg.Step(oracle[key], micros.Of(s.cfg.clock.Now()), n)
		if got != want {
			t.Fatalf("step %d (key %s, n %d): store decided %+v, the algorithm's Step %+v", i, key, n, got, want)
		}
	}
}
