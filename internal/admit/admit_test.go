package admit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// fake is a limiter whose decisions a test sets; it records takes and
// refunds and describes itself with policy.
type fake struct {
	policy floodgate.Description
	decide func(key string, n int) (floodgate.Decision, error)

	mu       sync.Mutex
	takes    []string
	refunded map[string]int
}

func (f *fake) Take(_ context.Context, key string, n int) (floodgate.Decision, error) {
	f.mu.Lock()
	f.takes = append(f.takes, key)
	f.mu.Unlock()
	return f.decide(key, n)
}

func (f *fake) Refund(_ context.Context, key string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refunded == nil {
		f.refunded = map[string]int{}
	}
	f.refunded[key] += n
	return nil
}

func (f *fake) Describe() floodgate.Description { return f.policy }

func (f *fake) refunds(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refunded[key]
}

func returns(d floodgate.Decision, err error) func(string, int) (floodgate.Decision, error) {
	return func(string, int) (floodgate.Decision, error) { return d, err }
}

func named(name string, d floodgate.Decision, err error) *fake {
	return &fake{policy: floodgate.Description{Name: name, Capacity: 10, Undelayed: 10}, decide: returns(d, err)}
}

// recorder is an observer that keeps its events.
type recorder struct {
	mu sync.Mutex
	ev []floodgate.Event
}

func (r *recorder) Observe(e floodgate.Event) {
	r.mu.Lock()
	r.ev = append(r.ev, e)
	r.mu.Unlock()
}

func (r *recorder) one(t *testing.T) floodgate.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.ev, 1, "exactly one event per request")
	return r.ev[0]
}

// outcomes is the outcome of each event by policy, checking there is one
// event per policy.
func (r *recorder) outcomes(t *testing.T) map[string]string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]string{}
	for _, e := range r.ev {
		_, dup := m[e.Policy]
		require.False(t, dup, "two events for policy %q", e.Policy)
		m[e.Policy] = e.Source.String() + " " + e.Outcome.String()
	}
	return m
}

var (
	allowed = floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}
	denied  = floodgate.Decision{Limit: 10, RetryAfter: 3 * time.Second, ResetAfter: 9 * time.Second}
	errDown = errors.New("store down")
)

func mustCore(t *testing.T, cfg Config, ls ...floodgate.Limiter) *Core {
	t.Helper()
	c, err := New(cfg, ls...)
	require.NoError(t, err)
	return c
}

func TestNewRefusesMissingAndNilLimiters(t *testing.T) {
	_, err := New(Config{})
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = New(Config{}, nil)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = New(Config{}, (*fake)(nil))
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "typed nil")
	_, err = New(Config{}, floodgate.LimiterFunc(nil))
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "nil func")
	c, err := New(Config{Observer: (*recorder)(nil)}, named("a", allowed, nil))
	require.NoError(t, err, "a typed-nil observer is no observer")
	assert.Zero(t, c.Start(), "no observer: the clock is not read")
	assert.Equal(t, "a", c.Limits()[0].Policy.Name)
}

// TestVerdicts covers every verdict kind, enforced and in dry run, through
// Decide and DecideOne alike.
func TestVerdicts(t *testing.T) {
	cases := []struct {
		name     string
		d        floodgate.Decision
		err      error
		cfg      Config
		kind     Kind
		outcome  floodgate.Outcome
		reason   string
		retry    time.Duration
		headers  bool
		errIsNil bool
	}{
		{name: "admit", d: allowed, kind: Admit, outcome: floodgate.OutcomeAllowed, headers: true, errIsNil: true},
		{name: "deny", d: denied, kind: Deny, outcome: floodgate.OutcomeDenied, reason: ReasonRateLimited, retry: 3 * time.Second, headers: true, errIsNil: true},
		{name: "deny without retry time", d: floodgate.Decision{Limit: 1, ResetAfter: 5 * time.Second}, kind: Deny, outcome: floodgate.OutcomeDenied, reason: ReasonRateLimited, retry: 5 * time.Second, headers: true, errIsNil: true},
		{name: "cost exceeds capacity", err: floodgate.ErrCostExceedsCapacity, kind: NeverFits, outcome: floodgate.OutcomeDenied, reason: ReasonCost},
		{name: "invalid cost", err: floodgate.ErrInvalidCost, kind: NeverFits, outcome: floodgate.OutcomeDenied, reason: ReasonCost},
		{name: "invalid key", err: floodgate.ErrInvalidKey, kind: NeverFits, outcome: floodgate.OutcomeDenied, reason: ReasonKey},
		{name: "error fail open", err: errDown, kind: Admit, outcome: floodgate.OutcomeErrorOpen},
		{name: "error fail closed", err: errDown, cfg: Config{FailMode: FailClosed}, kind: Unavailable, outcome: floodgate.OutcomeErrorClosed, reason: ReasonUnavailable, retry: UnavailableRetry},
		{name: "dry run admit", d: allowed, cfg: Config{DryRun: true}, kind: Admit, outcome: floodgate.OutcomeAllowed, errIsNil: true},
		{name: "dry run deny", d: denied, cfg: Config{DryRun: true}, kind: Admit, outcome: floodgate.OutcomeWouldDeny, errIsNil: true},
		{name: "dry run never fits", err: floodgate.ErrCostExceedsCapacity, cfg: Config{DryRun: true}, kind: Admit, outcome: floodgate.OutcomeWouldDeny, reason: ReasonCost},
		{name: "dry run fail closed", err: errDown, cfg: Config{DryRun: true, FailMode: FailClosed}, kind: Admit, outcome: floodgate.OutcomeErrorOpen},
		{name: "fallback admit", d: floodgate.Decision{Allowed: true, Fallback: true, Limit: 10, Remaining: 1}, kind: Admit, outcome: floodgate.OutcomeFallback, headers: true, errIsNil: true},
		{name: "fallback deny", d: floodgate.Decision{Fallback: true, Limit: 10, RetryAfter: time.Second}, kind: Deny, outcome: floodgate.OutcomeFallback, reason: ReasonRateLimited, retry: time.Second, headers: true, errIsNil: true},
	}
	for _, tc := range cases {
		for _, path := range []string{"Decide", "DecideOne"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				rec := &recorder{}
				cfg := tc.cfg
				cfg.Observer, cfg.Tier = rec, "edge"
				l := named("lim", tc.d, tc.err)
				c := mustCore(t, cfg, l)
				ev := floodgate.Event{Route: "/svc/M", Class: "standard"}
				var v Verdict
				if path == "Decide" {
					checks := []floodgate.Check{{Key: "k", N: 2}}
					v = c.Decide(context.Background(), checks, ev, c.Start())
					assert.Equal(t, tc.d, checks[0].Decision, "the check holds its limit's own decision")
				} else {
					v = c.DecideOne(context.Background(), "k", 2, ev, c.Start())
				}
				assert.Equal(t, tc.kind, v.Kind)
				assert.Equal(t, tc.outcome, v.Outcome)
				assert.Equal(t, tc.reason, v.Reason)
				assert.Equal(t, tc.retry, v.RetryAfter)
				assert.Equal(t, tc.headers, v.Headers)
				if tc.errIsNil {
					assert.NoError(t, v.Err)
				} else {
					assert.ErrorIs(t, v.Err, tc.err)
				}
				if v.Kind == Deny {
					assert.Equal(t, v.RetryAfter, v.Decision.RetryAfter)
				}
				got := rec.one(t)
				assert.Equal(t, floodgate.SourceRequest, got.Source)
				assert.Equal(t, "lim", got.Policy, "the deciding limit's name")
				assert.Equal(t, "edge", got.Tier)
				assert.Equal(t, "/svc/M", got.Route)
				assert.Equal(t, "standard", got.Class)
				assert.Equal(t, v.Outcome, got.Outcome)
				assert.Equal(t, v.Decision, got.Decision)
				assert.Equal(t, v.Err, got.Err)
				assert.Positive(t, got.Latency)
			})
		}
	}
}

func TestPanicFollowsFailMode(t *testing.T) {
	boom := &fake{decide: func(string, int) (floodgate.Decision, error) { panic("bug") }}
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		c := mustCore(t, Config{FailMode: mode}, boom)
		for _, v := range []Verdict{
			c.Decide(context.Background(), []floodgate.Check{{Key: "k", N: 1}}, floodgate.Event{}, 0),
			c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0),
		} {
			require.ErrorIs(t, v.Err, ErrPanic)
			assert.Contains(t, v.Err.Error(), "bug")
			if mode == FailOpen {
				assert.Equal(t, Admit, v.Kind)
				assert.Equal(t, floodgate.OutcomeErrorOpen, v.Outcome)
			} else {
				assert.Equal(t, Unavailable, v.Kind)
				assert.Equal(t, UnavailableRetry, v.RetryAfter)
			}
		}
	}
}

func TestFail(t *testing.T) {
	rec := &recorder{}
	c := mustCore(t, Config{FailMode: FailClosed, Observer: rec, Tier: "t"}, named("first", allowed, nil))
	v := c.Fail(context.Background(), errDown, floodgate.Event{Route: "r"}, c.Start())
	assert.Equal(t, Unavailable, v.Kind)
	assert.ErrorIs(t, v.Err, errDown)
	ev := rec.one(t)
	assert.Equal(t, floodgate.OutcomeErrorClosed, ev.Outcome)
	assert.Equal(t, "first", ev.Policy)
	assert.Equal(t, "r", ev.Route)

	rec = &recorder{}
	c = mustCore(t, Config{Name: "mine", Observer: rec}, named("first", allowed, nil))
	v = c.Fail(context.Background(), errDown, floodgate.Event{}, 0)
	assert.Equal(t, Admit, v.Kind)
	assert.Equal(t, "mine", rec.one(t).Policy, "Config.Name wins")
	assert.Zero(t, rec.one(t).Latency, "no start, no latency")
}

// TestAllOrNothing: several limits, one refuses; the others are refunded,
// each limit gets its event (the refusal counted under the refusing ones),
// the deciding limit is the longest refusal.
func TestAllOrNothing(t *testing.T) {
	rec := &recorder{}
	peer := named("per-peer", allowed, nil)
	token := named("per-token", denied, nil)
	slow := named("per-day", floodgate.Decision{Limit: 1, RetryAfter: time.Hour}, nil)
	c := mustCore(t, Config{Observer: rec}, peer, token, slow)
	checks := []floodgate.Check{{Key: "p", N: 1}, {Key: "t", N: 1}, {Key: "d", N: 1}}
	v := c.Decide(context.Background(), checks, floodgate.Event{}, c.Start())
	assert.Equal(t, Deny, v.Kind)
	assert.Equal(t, time.Hour, v.RetryAfter, "the longest refusal")
	assert.Equal(t, 1, peer.refunds("p"), "the admitting limit gets its units back")
	assert.Equal(t, map[string]string{
		"per-peer":  "request allowed",
		"per-token": "request denied",
		"per-day":   "request denied",
	}, rec.outcomes(t))
	assert.Equal(t, "per-day", c.Deciding(checks, v))

	// All admit: one allowed event per limit; Config.Name renames the
	// first limit only.
	rec = &recorder{}
	low := named("low", floodgate.Decision{Allowed: true, Limit: 10, Remaining: 2}, nil)
	c = mustCore(t, Config{Observer: rec, Name: "main"}, peer, low)
	v = c.DecideOne(context.Background(), "same", 1, floodgate.Event{}, 0)
	assert.Equal(t, Admit, v.Kind)
	assert.Equal(t, int64(2), v.Decision.Remaining)
	assert.Equal(t, map[string]string{"main": "request allowed", "low": "request allowed"}, rec.outcomes(t))
	assert.Equal(t, []string{"same"}, low.takes, "DecideOne charges the key on every limit")

	// Dry run: the refusing limit shows would_deny, the other allowed.
	rec = &recorder{}
	c = mustCore(t, Config{Observer: rec, DryRun: true}, peer, token)
	v = c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0)
	assert.Equal(t, Admit, v.Kind)
	assert.Equal(t, map[string]string{"per-peer": "request allowed", "per-token": "request would_deny"}, rec.outcomes(t))

	// A failure before the limits: every limit gets the error's event.
	rec = &recorder{}
	c = mustCore(t, Config{Observer: rec}, peer, token)
	c.Fail(context.Background(), errDown, floodgate.Event{}, 0)
	assert.Equal(t, map[string]string{"per-peer": "request error_open", "per-token": "request error_open"}, rec.outcomes(t))
}

func TestDelayHonouredOrRefused(t *testing.T) {
	delayed := floodgate.Decision{Allowed: true, Limit: 10, Remaining: 4, Delay: 200 * time.Millisecond}
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		l := named("shape", delayed, nil)
		c := mustCore(t, Config{Observer: rec}, l)
		start := time.Now()
		v := c.DecideOne(context.Background(), "k", 3, floodgate.Event{}, c.Start())
		assert.Equal(t, Admit, v.Kind)
		assert.Equal(t, floodgate.OutcomeDelayed, v.Outcome)
		assert.Equal(t, 200*time.Millisecond, time.Since(start), "the core waited the delay")
		assert.Zero(t, l.refunds("k"))
		assert.Equal(t, floodgate.OutcomeDelayed, rec.one(t).Outcome)
	})
	synctest.Test(t, func(t *testing.T) {
		// A deadline before the delay ends: refused at once, units back.
		l := named("shape", delayed, nil)
		c := mustCore(t, Config{}, l)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		v := c.DecideOne(ctx, "k", 3, floodgate.Event{}, 0)
		assert.Zero(t, time.Since(start), "no waiting for what cannot be honoured")
		assert.Equal(t, Deny, v.Kind)
		assert.Equal(t, ReasonDelay, v.Reason)
		assert.Equal(t, 200*time.Millisecond, v.RetryAfter)
		assert.False(t, v.Decision.Allowed)
		assert.Zero(t, v.Decision.Remaining)
		assert.Zero(t, v.Decision.Delay)
		assert.Equal(t, 3, l.refunds("k"))
	})
	synctest.Test(t, func(t *testing.T) {
		// The context ends while waiting: refused, units back.
		l := named("shape", delayed, nil)
		c := mustCore(t, Config{}, l)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		v := c.Decide(ctx, []floodgate.Check{{Key: "k", N: 2}}, floodgate.Event{}, 0)
		assert.Equal(t, Deny, v.Kind)
		assert.Equal(t, 2, l.refunds("k"))
	})
	synctest.Test(t, func(t *testing.T) {
		// Dry run: reported, not applied.
		c := mustCore(t, Config{DryRun: true}, named("shape", delayed, nil))
		start := time.Now()
		v := c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0)
		assert.Equal(t, Admit, v.Kind)
		assert.Zero(t, time.Since(start))
		assert.False(t, v.Headers, "no headers in dry run")
	})
}

// TestDelayRefuse: a delayed admission is refused and refunded, and an
// undelayed one counts as remaining only what would pass without a delay.
func TestDelayRefuse(t *testing.T) {
	shaping := &fake{policy: floodgate.Description{Name: "shape", Capacity: 10, Undelayed: 4}}
	c := mustCore(t, Config{DelayMode: DelayRefuse}, shaping)

	shaping.decide = returns(floodgate.Decision{Allowed: true, Limit: 10, Remaining: 5, Delay: time.Second}, nil)
	v := c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0)
	assert.Equal(t, Deny, v.Kind)
	assert.Equal(t, ReasonDelay, v.Reason)
	assert.Equal(t, time.Second, v.RetryAfter)
	assert.Zero(t, v.Decision.Remaining)
	assert.Equal(t, 1, shaping.refunds("k"))

	// 9 remaining of 10, 6 of which only with a delay: 3 undelayed left,
	// of a limit of 4.
	shaping.decide = returns(floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil)
	v = c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0)
	assert.Equal(t, Admit, v.Kind)
	assert.Equal(t, int64(3), v.Decision.Remaining)
	assert.Equal(t, int64(4), v.Decision.Limit)
	// Fewer remaining than the delayed part: none undelayed.
	shaping.decide = returns(floodgate.Decision{Allowed: true, Limit: 10, Remaining: 5}, nil)
	v = c.Decide(context.Background(), []floodgate.Check{{Key: "k", N: 1}}, floodgate.Event{}, 0)
	assert.Zero(t, v.Decision.Remaining)

	// With DelayHonour the full figures stay.
	c = mustCore(t, Config{}, shaping)
	v = c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0)
	assert.Equal(t, int64(5), v.Decision.Remaining)
	assert.Equal(t, int64(10), v.Decision.Limit)
}

// TestDecidingDelayRefusal: a request refused for a delay is decided by the
// limit that would have delayed it (the longest delay), not by one that
// admits it at once with fewer units left; an honoured delay leaves the
// one with the fewest units left.
func TestDecidingDelayRefusal(t *testing.T) {
	shapeShort := &fake{policy: floodgate.Description{Name: "shape-short", Capacity: 10, Undelayed: 4},
		decide: returns(floodgate.Decision{Allowed: true, Limit: 10, Remaining: 5, Delay: time.Second}, nil)}
	tight := named("tight", floodgate.Decision{Allowed: true, Limit: 10, Remaining: 1}, nil)
	shapeLong := &fake{policy: floodgate.Description{Name: "shape-long", Capacity: 10, Undelayed: 4},
		decide: returns(floodgate.Decision{Allowed: true, Limit: 10, Remaining: 6, Delay: 2 * time.Second}, nil)}
	checks := func() []floodgate.Check {
		return []floodgate.Check{{Key: "a", N: 1}, {Key: "b", N: 1}, {Key: "c", N: 1}}
	}

	c := mustCore(t, Config{DelayMode: DelayRefuse}, shapeShort, tight, shapeLong)
	ch := checks()
	v := c.Decide(context.Background(), ch, floodgate.Event{}, 0)
	require.Equal(t, Deny, v.Kind)
	require.Equal(t, ReasonDelay, v.Reason)
	assert.Equal(t, "shape-long", c.Deciding(ch, v), "the longest delay refused")

	c = mustCore(t, Config{DelayMode: DelayRefuse}, tight, shapeShort)
	ch = checks()[:2]
	v = c.Decide(context.Background(), ch, floodgate.Event{}, 0)
	require.Equal(t, ReasonDelay, v.Reason)
	assert.Equal(t, "shape-short", c.Deciding(ch, v), "the delaying limit, second")

	// Honoured: nothing refused, the fewest units left decide.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shapeShort.decide = returns(floodgate.Decision{Allowed: true, Limit: 10, Remaining: 5, Delay: time.Millisecond}, nil)
	c = mustCore(t, Config{}, shapeShort, tight)
	ch = checks()[:2]
	v = c.Decide(ctx, ch, floodgate.Event{}, 0)
	require.Equal(t, Admit, v.Kind)
	assert.Equal(t, "tight", c.Deciding(ch, v))
}

// TestRefundPanicIsContained: a limiter whose Refund panics leaves the key
// charged; the refusal still goes out.
func TestRefundPanicIsContained(t *testing.T) {
	c := mustCore(t, Config{DelayMode: DelayRefuse}, &panicRefund{})
	v := c.DecideOne(context.Background(), "k", 1, floodgate.Event{}, 0)
	assert.Equal(t, Deny, v.Kind)
}

type panicRefund struct{}

func (*panicRefund) Take(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 1, Delay: time.Second}, nil
}
func (*panicRefund) Refund(context.Context, string, int) error { panic("refund bug") }

func TestDecideOneAllocatesNothing(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) { return allowed, nil })
	c := mustCore(t, Config{Observer: floodgate.ObserverFunc(func(floodgate.Event) {})}, l)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		_ = c.DecideOne(ctx, "key", 1, floodgate.Event{Route: "r"}, c.Start())
	})
	assert.Zero(t, allocs)
}

func BenchmarkDecideOne(b *testing.B) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) { return allowed, nil })
	c, err := New(Config{}, l)
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.DecideOne(ctx, "key", 1, floodgate.Event{}, 0)
	}
}
