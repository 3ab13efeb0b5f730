// Package admit is the admission core of floodgate's middleware: it turns
// the decisions of a request's limits into one verdict (admit, deny, never
// fits, unavailable), applying dry run, the fail mode, shaping delays,
// panics and refunds, and reports the request's observer events, one per
// (request, limit).
// httplimit and grpclimit call it and only translate the verdict into their
// own status codes and headers. The Envoy rate limit service (module rls)
// decides a request's descriptors in store calls of its own (per-descriptor
// statuses, hits_addend, quota and shadow modes, its over-limit cache),
// then has the core judge the request ([Core.Judge]: deny, dry run,
// fallback) and report its events ([Core.Report]).
package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/middleware"
)

// FailMode is what happens when the limits cannot decide: the transports'
// [middleware.FailMode], one type for every transport.
type FailMode = middleware.FailMode

// The fail modes.
const (
	FailOpen   = middleware.FailOpen
	FailClosed = middleware.FailClosed
)

// DelayMode is what happens to a request admitted with a shaping delay:
// [middleware.DelayMode].
type DelayMode = middleware.DelayMode

// The delay modes.
const (
	DelayHonour = middleware.DelayHonour
	DelayRefuse = middleware.DelayRefuse
)

// Kind is the verdict's kind.
type Kind uint8

// The kinds of verdict.
const (
	// Admit: go on (any delay has been waited).
	Admit Kind = iota + 1
	// Deny: rate limited; retry after Verdict.RetryAfter.
	Deny
	// NeverFits: the request can never be admitted (its cost exceeds a
	// limit's capacity, or its cost or key is invalid): retrying is
	// useless, so no retry time is given.
	NeverFits
	// Unavailable: the limits could not decide and the fail mode is closed.
	Unavailable
)

// Reasons, stable strings for diagnostic headers and problem details.
const (
	ReasonRateLimited = "rate_limited"
	ReasonDelay       = "delay_refused"
	ReasonCost        = "cost_exceeds_limit"
	ReasonKey         = "invalid_key"
	ReasonUnavailable = "limiter_unavailable"
)

// UnavailableRetry is the retry delay suggested when the limits could not
// decide and the fail mode is closed.
const UnavailableRetry = time.Second

// ErrPanic is wrapped by the error of a limiter that panicked:
// [middleware.ErrLimiterPanic].
var ErrPanic = middleware.ErrLimiterPanic

// Limit is one policy a request is checked against.
type Limit struct {
	Limiter floodgate.Limiter
	// Policy is what the limiter says of itself (zero when it cannot).
	Policy floodgate.Description
}

// Config is what a transport sets up once.
type Config struct {
	// Name, when set, names a fixed core's first limit in its events (the
	// other limits keep their own names), and a dynamic core's event of a
	// request that matched no limit.
	Name string
	Tier string
	// Observer receives the request's events, one per (request, limit)
	// (nil: none).
	Observer  floodgate.Observer
	FailMode  FailMode
	DelayMode DelayMode
	DryRun    bool
}

// Core decides requests against a fixed list of limits. It is immutable and
// safe for concurrent use.
type Core struct {
	cfg    Config
	limits []Limit
}

// New returns the core for limits. It refuses an empty list and nil or
// typed-nil limiters.
func New(cfg Config, limiters ...floodgate.Limiter) (*Core, error) {
	if len(limiters) == 0 {
		return nil, fmt.Errorf("%w: no limiter", floodgate.ErrInvalidConfig)
	}
	c := &Core{cfg: cfg}
	if nilcheck.Is(cfg.Observer) {
		c.cfg.Observer = nil
	}
	for i, l := range limiters {
		if nilcheck.Is(l) {
			return nil, fmt.Errorf("%w: limiter %d is nil", floodgate.ErrInvalidConfig, i)
		}
		lim := Limit{Limiter: l}
		if d, ok := l.(floodgate.Describer); ok {
			lim.Policy = d.Describe()
		}
		c.limits = append(c.limits, lim)
	}
	return c, nil
}

// Limits returns the core's limits, in order.
func (c *Core) Limits() []Limit { return c.limits }

// DryRun reports whether the core is in dry-run mode.
func (c *Core) DryRun() bool { return c.cfg.DryRun }

// Verdict is the outcome of one request.
type Verdict struct {
	Kind    Kind
	Outcome floodgate.Outcome
	// Decision is the combined decision (zero when the limits could not
	// decide). With DelayRefuse, Remaining counts only undelayed units.
	Decision floodgate.Decision
	// RetryAfter is when to retry (Deny, Unavailable); zero otherwise.
	RetryAfter time.Duration
	// Reason is the reason of a refusal, "" on admission.
	Reason string
	// Headers reports whether the transport should write the rate-limit
	// headers of Decision (never in dry run, never without a decision).
	Headers bool
	// Err is the limiter's error, if any.
	Err error
}

// Decide decides one request. checks holds one entry per limit (in the
// order of Limits) with Key and N set by the transport; Limiter is set by
// Decide. On return every check's Decision is its limit's own. ev is the
// transport's start of the request's events (Route, Class); Decide fills
// the rest and reports one event per limit, named by the limit (see
// Config.Name), with the limit's own decision and the request's outcome,
// except that a limit that would have admitted a request another limit
// refused reports allowed: refusals are counted under the limits that
// refused. start is the Nanotime the decision began, or 0 when there is no
// observer.
func (c *Core) Decide(ctx context.Context, checks []floodgate.Check, ev floodgate.Event, start int64) Verdict {
	for i := range checks {
		checks[i].Limiter = c.limits[i].Limiter
	}
	return c.decide(ctx, checks, ev, start)
}

// NewDynamic returns a core whose requests bring their own limits (a policy
// set's rules match each request to its checks): see [Core.DecideChecks].
func NewDynamic(cfg Config) *Core {
	c := &Core{cfg: cfg}
	if nilcheck.Is(cfg.Observer) {
		c.cfg.Observer = nil
	}
	return c
}

// DecideChecks decides a request whose checks carry their limiters (a
// dynamic core's), and its shadow checks: the checks of dry-run policies,
// which are charged only when the request is admitted and never refuse it.
// A request without checks is admitted, without headers: no limit applies
// to it. The request gives one event per check, named by the check's
// policy (see [Core.Decide]), and, when its shadow checks were charged, one
// [floodgate.SourceShadow] event per shadow check: allowed, or would_deny
// for a dry-run policy that would have refused it.
func (c *Core) DecideChecks(ctx context.Context, checks, shadow []floodgate.Check, ev floodgate.Event, start int64) Verdict {
	v := Verdict{Kind: Admit, Outcome: floodgate.OutcomeAllowed}
	if len(checks) > 0 {
		v = c.verdict(ctx, checks)
	}
	c.observe(&ev, start, &v, checks)
	if len(shadow) > 0 && v.Kind == Admit {
		d, err := c.take(ctx, shadow)
		if err == nil && c.cfg.Observer != nil {
			sv := Verdict{Kind: Admit, Outcome: floodgate.OutcomeAllowed, Decision: d}
			if !d.Allowed {
				sv.Kind, sv.Outcome = Deny, floodgate.OutcomeWouldDeny
			}
			c.report(floodgate.SourceShadow, ev, start, sv, shadow)
		}
	}
	return v
}

func (c *Core) decide(ctx context.Context, checks []floodgate.Check, ev floodgate.Event, start int64) Verdict {
	v := c.verdict(ctx, checks)
	c.observe(&ev, start, &v, checks)
	return v
}

// verdict decides checks, without reporting.
func (c *Core) verdict(ctx context.Context, checks []floodgate.Check) Verdict {
	if c.cfg.DelayMode == DelayRefuse && c.shaping(checks) {
		// Refused rather than delayed: ask first, so that a request that
		// would be delayed charges nothing (a refund cannot restore a leaky
		// bucket exactly).
		if d, ok, err := evaluate(ctx, checks); err != nil || !ok {
			return c.judge(ctx, checks, d, err, false)
		}
	}
	d, err := c.take(ctx, checks)
	return c.judge(ctx, checks, d, err, true)
}

// Start returns the time a decision starts, for the observer's latency; 0
// without an observer (the clock is then not read).
func (c *Core) Start() int64 {
	if c.cfg.Observer == nil {
		return 0
	}
	return monotime.Nanotime()
}

func (c *Core) take(ctx context.Context, checks []floodgate.Check) (d floodgate.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = floodgate.Decision{}, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	if len(checks) == 1 {
		ch := &checks[0]
		ch.Decision, err = ch.Limiter.Take(ctx, ch.Key, ch.N)
		return ch.Decision, err
	}
	return floodgate.TakeAll(ctx, checks)
}

// shaping reports whether a check's limiter may admit with a delay (a
// leaky bucket in delay mode).
func (c *Core) shaping(checks []floodgate.Check) bool {
	for i := range checks {
		if p := c.policy(checks, i); p.Undelayed > 0 && p.Undelayed < p.Capacity {
			return true
		}
	}
	return false
}

// evaluate decides checks without consuming anything, where their limiters
// can (a group taker); ok is false when the request would be refused or
// delayed, with the decision that says so. Limiters that cannot evaluate
// report ok (the take then decides, and a delay is refunded).
func evaluate(ctx context.Context, checks []floodgate.Check) (d floodgate.Decision, ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, ok, err = floodgate.Decision{}, false, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	g, isGroup := checks[0].Limiter.(floodgate.GroupTaker)
	if !isGroup {
		return floodgate.Decision{}, true, nil
	}
	handled, err := g.TakeGroup(ctx, checks, false)
	if err != nil || !handled {
		return floodgate.Decision{}, !handled, err
	}
	d = floodgate.Combine(checks)
	return d, d.Allowed && d.Delay == 0, nil
}

// judge turns the limits' answer into the verdict. taken says whether the
// checks were charged (a delay that is not honoured is then refunded).
func (c *Core) judge(ctx context.Context, checks []floodgate.Check, d floodgate.Decision, err error, taken bool) Verdict {
	if err != nil {
		return c.failed(err)
	}
	fallback := false
	for i := range checks {
		fallback = fallback || checks[i].Decision.Fallback
	}
	if fallback && d.Limit == 0 {
		return c.blanket(d)
	}
	outcome := func(o floodgate.Outcome) floodgate.Outcome {
		if fallback {
			return floodgate.OutcomeFallback
		}
		return o
	}
	switch {
	case c.cfg.DryRun:
		o := floodgate.OutcomeAllowed
		if !d.Allowed {
			o = floodgate.OutcomeWouldDeny
		}
		return Verdict{Kind: Admit, Outcome: outcome(o), Decision: d}
	case !d.Allowed:
		retry := d.RetryAfter
		if retry <= 0 {
			// A denial without a retry time breaks the Decision contract;
			// the time until full is certainly enough.
			retry = max(d.ResetAfter, time.Second)
		}
		d.RetryAfter = retry
		return Verdict{Kind: Deny, Outcome: outcome(floodgate.OutcomeDenied), Decision: d, RetryAfter: retry, Reason: ReasonRateLimited, Headers: true}
	case d.Delay > 0:
		v := c.delayed(ctx, checks, d, taken)
		v.Outcome = outcome(v.Outcome)
		return v
	}
	if c.cfg.DelayMode == DelayRefuse {
		d = c.undelayed(checks)
	}
	return Verdict{Kind: Admit, Outcome: outcome(floodgate.OutcomeAllowed), Decision: d, Headers: true}
}

// delayed is the verdict of an admission with a delay: held for it, or
// refused (DelayRefuse, or a delay the request cannot wait) and refunded
// when taken.
func (c *Core) delayed(ctx context.Context, checks []floodgate.Check, d floodgate.Decision, taken bool) Verdict {
	if c.cfg.DelayMode != DelayRefuse && wait(ctx, d.Delay) {
		return Verdict{Kind: Admit, Outcome: floodgate.OutcomeDelayed, Decision: d, Headers: true}
	}
	if taken {
		c.refund(ctx, checks)
	}
	d.Allowed, d.RetryAfter = false, d.Delay
	d.Remaining = 0
	d.Delay = 0
	return Verdict{Kind: Deny, Outcome: floodgate.OutcomeDenied, Decision: d, RetryAfter: d.RetryAfter, Reason: ReasonDelay, Headers: true}
}

// failed is the verdict of limits that returned err.
func (c *Core) failed(err error) Verdict {
	if errors.Is(err, floodgate.ErrInvalidCost) || errors.Is(err, floodgate.ErrInvalidKey) {
		// Never admissible: failing open would exempt exactly the most
		// expensive requests, or anyone who crafts a key a store refuses.
		reason := ReasonCost
		if errors.Is(err, floodgate.ErrInvalidKey) {
			reason = ReasonKey
		}
		if c.cfg.DryRun {
			return Verdict{Kind: Admit, Outcome: floodgate.OutcomeWouldDeny, Reason: reason, Err: err}
		}
		return Verdict{Kind: NeverFits, Outcome: floodgate.OutcomeDenied, Reason: reason, Err: err}
	}
	if c.cfg.FailMode == FailClosed && !c.cfg.DryRun {
		return Verdict{Kind: Unavailable, Outcome: floodgate.OutcomeErrorClosed, RetryAfter: UnavailableRetry, Reason: ReasonUnavailable, Err: err}
	}
	return Verdict{Kind: Admit, Outcome: floodgate.OutcomeErrorOpen, Err: err}
}

// blanket is the verdict of a store's blanket fail-open or fail-closed
// answer (a fallback decision without a limit): no quota to advertise; a
// refusal is the limiter being unavailable (503), not a rate limit.
func (c *Core) blanket(d floodgate.Decision) Verdict {
	if d.Allowed || c.cfg.DryRun {
		return Verdict{Kind: Admit, Outcome: floodgate.OutcomeErrorOpen, Decision: d}
	}
	retry := d.RetryAfter
	if retry <= 0 {
		retry = UnavailableRetry
	}
	return Verdict{Kind: Unavailable, Outcome: floodgate.OutcomeErrorClosed, Decision: d, RetryAfter: retry, Reason: ReasonUnavailable}
}

// undelayed recombines the checks' decisions counting as remaining only the
// units that would pass without a delay: what a client of a DelayRefuse
// transport can really still send.
func (c *Core) undelayed(checks []floodgate.Check) floodgate.Decision {
	for i := range checks {
		p := c.policy(checks, i)
		if p.Capacity > p.Undelayed && p.Undelayed > 0 {
			dd := &checks[i].Decision
			dd.Remaining = max(0, dd.Remaining-(p.Capacity-p.Undelayed))
			dd.Limit = min(dd.Limit, p.Undelayed)
		}
	}
	if len(checks) == 1 {
		return checks[0].Decision
	}
	return floodgate.Combine(checks)
}

// policy is what check i's limiter says of itself: the core's fixed
// limit's, or (on a dynamic core) the check's limiter's.
func (c *Core) policy(checks []floodgate.Check, i int) floodgate.Description {
	if len(c.limits) > 0 {
		return c.limits[i].Policy // a fixed core: checks[i] is limit i
	}
	if d, ok := checks[i].Limiter.(floodgate.Describer); ok {
		return d.Describe()
	}
	return floodgate.Description{}
}

// refund gives back the units of an admitted request that is refused after
// all (a delay that cannot be honoured). Best effort: a failing refund only
// leaves the keys charged.
func (c *Core) refund(ctx context.Context, checks []floodgate.Check) {
	defer func() { _ = recover() }()
	for i := range checks {
		if r, ok := checks[i].Limiter.(floodgate.Refunder); ok {
			_ = r.Refund(context.WithoutCancel(ctx), checks[i].Key, checks[i].N)
		}
	}
}

// wait holds a request for d; false when it cannot (the delay would pass
// the context's deadline, or the context ended).
func wait(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// observe reports a request's events: one per (request, policy).
func (c *Core) observe(ev *floodgate.Event, start int64, v *Verdict, checks []floodgate.Check) {
	if c.cfg.Observer != nil { // else the event and the verdict are not copied
		c.report(floodgate.SourceRequest, *ev, start, *v, checks)
	}
}

// report reports one event of source src per check: each names its
// check's policy and carries that policy's own decision and outcome (see
// [checkOutcome]). A request without checks (a policy set matched none to
// it) gets one event, under the core's Name. On a core of one limit the
// event carries the verdict's decision (DelayRefuse's undelayed one).
func (c *Core) report(src floodgate.Source, ev floodgate.Event, start int64, v Verdict, checks []floodgate.Check) {
	c.reportNamed(src, ev, start, v, checks, nil)
}

// reportNamed is report with the checks' names given (names[i] names
// check i; nil: each check's policy name).
func (c *Core) reportNamed(src floodgate.Source, ev floodgate.Event, start int64, v Verdict, checks []floodgate.Check, names []string) {
	o := c.cfg.Observer
	if o == nil {
		return
	}
	ev.Source = src
	ev.Tier = c.cfg.Tier
	ev.Err = v.Err
	if start != 0 {
		ev.Latency = time.Duration(monotime.Nanotime() - start)
	}
	if len(checks) == 0 {
		ev.Outcome, ev.Decision, ev.Policy = v.Outcome, v.Decision, c.cfg.Name
		o.Observe(ev)
		return
	}
	for i := range checks {
		e := ev
		if names != nil {
			e.Policy = names[i]
		} else {
			e.Policy = c.name(checks, i)
		}
		e.Outcome = checkOutcome(v, &checks[i].Decision, len(checks))
		e.Decision = checks[i].Decision
		if len(checks) == 1 && v.Decision != (floodgate.Decision{}) {
			e.Decision = v.Decision
		}
		o.Observe(e)
	}
}

// checkOutcome is the outcome of one of a request's n checks: the
// request's, except that when several checks decided together and the
// request was refused (or would have been, in dry run) for a rate limit,
// a check that would have admitted it reports allowed: its policy did not
// refuse (and, all or nothing, charged nothing). The refusal is counted
// under the policies that refused.
func checkOutcome(v Verdict, d *floodgate.Decision, n int) floodgate.Outcome {
	if n == 1 || (v.Kind != Deny && v.Outcome != floodgate.OutcomeWouldDeny) || v.Reason == ReasonCost || v.Reason == ReasonKey {
		return v.Outcome
	}
	refused := !d.Allowed || (v.Reason == ReasonDelay && d.Delay > 0)
	if d.Fallback && !refused {
		return floodgate.OutcomeFallback
	}
	if !refused {
		return floodgate.OutcomeAllowed
	}
	return v.Outcome
}

// name is the policy name of check i: the core's Name for a fixed core's
// first limit when set, else what the check's limiter says of itself.
func (c *Core) name(checks []floodgate.Check, i int) string {
	if i == 0 && c.cfg.Name != "" && len(c.limits) > 0 {
		return c.cfg.Name
	}
	return c.policy(checks, i).Name
}

// Deciding names the limit that decided a request whose verdict is v, for
// the transports' diagnostic headers and details: the refusing one with the
// longest retry (under a delay refusal, a limit that would have delayed
// the request refused it, its delay its retry, as [checkOutcome] counts
// it), else the one with the fewest units remaining; the core's Name when
// set (on a fixed core, for its first limit).
func (c *Core) Deciding(checks []floodgate.Check, v Verdict) string {
	if len(checks) == 0 {
		if len(c.limits) == 0 {
			return ""
		}
		return c.name(nil, 0)
	}
	refusal := func(d *floodgate.Decision) (retry time.Duration, refused bool) {
		switch {
		case !d.Allowed:
			return d.RetryAfter, true
		case v.Reason == ReasonDelay && d.Delay > 0:
			return d.Delay, true
		}
		return 0, false
	}
	best := 0
	for i := 1; i < len(checks); i++ {
		a, b := &checks[best].Decision, &checks[i].Decision
		ra, aRefused := refusal(a)
		rb, bRefused := refusal(b)
		switch {
		case bRefused && (!aRefused || rb > ra):
			best = i
		case !aRefused && !bRefused && b.Remaining < a.Remaining:
			best = i
		}
	}
	return c.name(checks, best)
}
