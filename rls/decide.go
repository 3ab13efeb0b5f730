package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/store"
)

// role is what a descriptor does in a request, decided once per call.
type role uint8

const (
	roleNone      role = iota // no limit (unknown, replaced): OK with nothing
	roleUnlimited             // OK, limit_remaining 2^32-1
	roleLook                  // hits_addend 0: looks, charges nothing
	roleRefund                // is_negative_hits: gives its hits back
	roleQuota                 // counted on its own, never refuses the request
	roleShadow                // counted when the request is admitted, never refuses
	roleEnforce               // counted all or nothing with the other enforcing ones
)

// call is one ShouldRateLimit decision in progress: the descriptors and
// what has been decided of the request so far.
type call struct {
	s   *Service
	ctx context.Context
	req *rlspb.RateLimitRequest
	ds  []dstatus
	sc  *scratch
	// refused: a limit refuses the request before anything is charged (a
	// look over its limit, a blocked limit, a cost above a capacity, a key
	// the local cache knows over its limit).
	refused bool
	// admitted: the enforcing descriptors were charged (the request is
	// admitted, shadow ones charged).
	admitted bool
	// v is the admission core's verdict of the request's enforcing group
	// (judge).
	v admit.Verdict
}

// decide runs the checks of the call's descriptors and writes the
// response, in the order of the reference's request path: the limits a
// request matches (resolve) have been found; here the store decides them
// (looks and refunds, then the counted descriptors together, else
// quota descriptors, the enforcing group and shadow descriptors in turn),
// the admission core judges the request (judge), then the statuses are
// written. lead is the check that stands for the response.
func (c *call) decide() (*rlspb.RateLimitResponse, *floodgate.Check, error) {
	c.buildChecks()
	err := c.looks()
	done := false
	if err == nil {
		done, err = c.together()
	}
	if err == nil && !done {
		err = c.quotas()
		if err == nil {
			err = c.enforce()
		}
		if err == nil {
			err = c.shadows()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	c.judge()
	resp, lead := c.respond()
	return resp, lead, nil
}

// together decides the quota-mode, enforcing and shadow-mode descriptors in
// one store call, all or nothing, when deciding them one kind after the
// other would take several calls (one per quota-mode descriptor, one for
// the enforcing ones, one per shadow-mode descriptor) and nothing refused
// the request before: when every check admits, each would have been
// charged as on its own (quota ones when they admit, the enforcing ones
// all together, shadow ones when the request is admitted), so the answer
// is the same, in one call. When a check refuses, nothing was charged and
// done is false: they are decided one kind after the other.
func (c *call) together() (done bool, err error) {
	calls, enforcing := 0, false
	for i := range c.ds {
		d := &c.ds[i]
		switch {
		case d.role < roleQuota:
			continue
		case d.precheck:
			return false, nil
		case d.role != roleEnforce:
			calls++
		case !enforcing:
			enforcing = true
			calls++
		}
	}
	if calls < 2 || c.refused {
		return false, nil
	}
	group := c.sc.enforcing[:0]
	defer func() { c.sc.enforcing = group[:0] }()
	for i := range c.ds {
		if d := &c.ds[i]; d.role >= roleQuota {
			group = append(group, d.checks...)
		}
	}
	ok, err := c.s.take(c.ctx, group, true)
	if err != nil || !ok {
		return false, err
	}
	k := 0
	for i := range c.ds {
		if d := &c.ds[i]; d.role >= roleQuota {
			k += copy(d.checks, group[k:k+len(d.checks)])
		}
	}
	return true, nil
}

// buildChecks gives every limited descriptor its checks, one per limit;
// a check the store cannot admit (a blocked limit, a cost above its
// capacity, a key the over-limit cache knows refused) marks the request
// refused before anything is charged.
func (c *call) buildChecks() {
	var now time.Time
	if c.s.over != nil {
		now = c.s.opts.now()
	}
	for i := range c.ds {
		d := &c.ds[i]
		if d.role <= roleUnlimited {
			continue
		}
		d.checks = c.sc.checks(len(d.lm.lims))
		for j := range d.lm.lims {
			l := &d.lm.lims[j]
			ch := &d.checks[j]
			*ch = floodgate.Check{Key: d.key, N: d.hits}
			if l.l == nil {
				d.precheck = d.precheck || d.hits > 0 // blocked: nothing ever passes
				continue
			}
			ch.Limiter = l.decider()
			if d.hits > 0 && int64(d.hits) > l.l.Capacity() {
				d.precheck = true
			}
			if d.role == roleEnforce && c.s.over != nil {
				if dec, ok := c.s.over.get(l.policy, d.key, now); ok {
					ch.Limiter, ch.Decision = &knownOver{l.l, dec}, dec
					d.precheck, d.cached = true, true
				}
			}
		}
		if d.precheck && d.role == roleEnforce {
			c.refused = true
		}
	}
}

// looks decides the descriptors that only look (hits_addend 0) or give
// back (is_negative_hits), each on its own. A look over its limit refuses
// the request (unless shadow or quota): it charges nothing elsewhere.
func (c *call) looks() error {
	for i := range c.ds {
		d := &c.ds[i]
		if d.role != roleLook && d.role != roleRefund {
			continue
		}
		for j := range d.checks {
			if err := c.look(d, &d.checks[j]); err != nil {
				return err
			}
			if d.role == roleLook && !d.lm.shadow && !d.quota && !d.checks[j].Decision.Allowed {
				c.refused = true
			}
		}
	}
	return nil
}

// look decides one check of a look or a refund: a refund gives the hits
// back, then both read the key. A look is over the limit when no unit is
// left (a counted hit would be refused); a refund is always allowed.
func (c *call) look(d *dstatus, ch *floodgate.Check) error {
	if ch.Limiter == nil {
		ch.Decision = floodgate.Decision{Allowed: d.role == roleRefund} // blocked: nothing is ever left
		return nil
	}
	l := direct(ch.Limiter) // a leased limit's refund and look go to its global bucket
	if d.role == roleRefund && d.hits > 0 {
		if err := l.Refund(c.ctx, ch.Key, d.hits); err != nil {
			return err
		}
		c.s.over.forget(ch.Key)
	}
	dec, err := l.Peek(c.ctx, ch.Key)
	if err != nil {
		return err
	}
	dec.Allowed = d.role == roleRefund || dec.Remaining > 0
	ch.Decision = dec
	return nil
}

// quotas decides the quota-mode descriptors, each on its own: charged
// when it admits, never refusing the request (the reference's quota mode).
func (c *call) quotas() error {
	return c.each(roleQuota, func(d *dstatus) bool { return !d.precheck })
}

// each decides the descriptors of role r each on its own, charged when
// commit says so, else only evaluated.
func (c *call) each(r role, commit func(*dstatus) bool) error {
	for i := range c.ds {
		d := &c.ds[i]
		if d.role != r {
			continue
		}
		if _, err := c.s.take(c.ctx, d.checks, commit(d)); err != nil {
			return err
		}
	}
	return nil
}

// enforce decides the enforcing descriptors all or nothing, in one store
// call: charged only when every one admits and nothing refused before.
func (c *call) enforce() error {
	group := c.sc.enforcing[:0]
	defer func() { c.sc.enforcing = group[:0] }()
	for i := range c.ds {
		if d := &c.ds[i]; d.role == roleEnforce {
			group = append(group, d.checks...)
		}
	}
	if len(group) == 0 {
		c.admitted = !c.refused
		return nil
	}
	ok, err := c.s.take(c.ctx, group, !c.refused)
	if err != nil {
		return err
	}
	c.admitted = ok && !c.refused
	k := 0
	for i := range c.ds {
		if d := &c.ds[i]; d.role == roleEnforce {
			k += copy(d.checks, group[k:k+len(d.checks)])
		}
	}
	return nil
}

// shadows decides the shadow-mode descriptors: charged when the request is
// admitted (floodgate's dry-run rule), else only evaluated.
func (c *call) shadows() error {
	return c.each(roleShadow, func(d *dstatus) bool { return c.admitted && !d.precheck })
}

// respond writes the statuses, the overall code, the headers and the
// metadata, counts the metrics and remembers the keys refused with nothing
// left; it returns the lead check (the refusing one, else the one with the
// fewest left) for the observer.
func (c *call) respond() (*rlspb.RateLimitResponse, *floodgate.Check) {
	n := len(c.ds)
	resp := &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, n)}
	// The statuses and their durations, one allocation each for all the
	// descriptors.
	sts, durs := make([]rlspb.RateLimitResponse_DescriptorStatus, n), make([]durationpb.Duration, n)
	var ld leader
	now := c.s.opts.now()
	for i := range c.ds {
		d, st := &c.ds[i], &sts[i]
		resp.Statuses[i] = st
		st.Code = rlspb.RateLimitResponse_OK
		switch d.role {
		case roleNone:
			continue
		case roleUnlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		j := pick(d.checks)
		over := c.status(d, j, st, &durs[i], now)
		c.count(d, j)
		if over && d.role == roleEnforce && !d.cached {
			c.s.over.remember(d, now)
		}
		ld.consider(d, j, st)
	}
	// The request's code is the core's verdict: OVER_LIMIT when an
	// enforcing check refuses (its status says so), OK when they admit or
	// in the global shadow mode (the core's dry run).
	overall := rlspb.RateLimitResponse_OK
	if c.v.Kind == admit.Deny || c.v.Kind == admit.Unavailable {
		overall = rlspb.RateLimitResponse_OVER_LIMIT
	}
	resp.OverallCode = overall
	resp.ResponseHeadersToAdd = c.s.headers(c.ds, resp, ld, overall == rlspb.RateLimitResponse_OVER_LIMIT, now)
	if c.s.opts.metadata {
		resp.DynamicMetadata = c.metadata()
	}
	return resp, ld.check
}

// status writes into st the status of a limited descriptor whose check j
// stands for it (pick), its duration_until_reset in dur, and reports
// whether one of its limits is over.
func (c *call) status(d *dstatus, j int, st *rlspb.RateLimitResponse_DescriptorStatus, dur *durationpb.Duration, now time.Time) bool {
	l, dec := &d.lm.lims[j], d.checks[j].Decision
	over := !dec.Allowed
	st.CurrentLimit = l.pb
	if !over {
		st.LimitRemaining = uint32(min(max(dec.Remaining, 0), math.MaxUint32))
	}
	switch {
	case !over || d.lm.shadow:
		// Shadow mode: OK whatever the limit says, the reset told.
	case d.quota:
		// The reference's quota mode: OK, with the limit and nothing left,
		// no reset.
		return over
	default:
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	r := resetOf(l, dec, over, now)
	dur.Seconds, dur.Nanos = int64(r/time.Second), int32(r%time.Second)
	st.DurationUntilReset = dur
	return over
}

// count counts a counted descriptor's hits in the metrics. Charged:
// quota-mode descriptors each when they admit, the others when the request
// is admitted.
func (c *call) count(d *dstatus, j int) {
	m := c.s.opts.metrics
	if m == nil || d.role < roleQuota {
		return
	}
	m.record(c.req.Domain, d, j, c.s.opts.nearRatio, d.role == roleQuota || c.admitted)
}

// leader finds the descriptor that stands for the response: a refusal
// first (the longest wait), then the fewest units left.
type leader struct {
	check *floodgate.Check // nil when the lead has no limiter (blocked)
	st    *rlspb.RateLimitResponse_DescriptorStatus
	d     *dstatus
	dec   floodgate.Decision
	set   bool
}

func (ld *leader) consider(d *dstatus, j int, st *rlspb.RateLimitResponse_DescriptorStatus) {
	dec := d.checks[j].Decision
	if ld.set && !leads(&dec, &ld.dec) {
		return
	}
	ld.set, ld.st, ld.d, ld.dec, ld.check = true, st, d, dec, nil
	if d.checks[j].Limiter != nil {
		ld.check = &d.checks[j]
	}
}

// take decides checks all or nothing: charged when commit, else only
// evaluated. Checks without a limiter (blocked limits) refuse.
func (s *Service) take(ctx context.Context, checks []floodgate.Check, commit bool) (bool, error) {
	var group []floodgate.Check
	blocked := false
	for i := range checks {
		if checks[i].Limiter == nil {
			checks[i].Decision = floodgate.Decision{}
			blocked = true
		}
	}
	if blocked {
		commit = false
	}
	group = checks
	if commit {
		if _, err := floodgate.TakeAll(ctx, group); err != nil {
			if errors.Is(err, floodgate.ErrInvalidCost) {
				return s.evaluate(ctx, checks)
			}
			return false, err
		}
		for i := range group {
			if !group[i].Decision.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
	ok, err := s.evaluate(ctx, checks)
	return ok && !blocked, err
}

// evaluate tells what checks would decide, changing nothing.
func (s *Service) evaluate(ctx context.Context, checks []floodgate.Check) (bool, error) {
	var fit []floodgate.Check
	var idx []int
	all := true
	for i := range checks {
		ch := &checks[i]
		if ch.Limiter == nil {
			all = false
			continue
		}
		if k, ok := ch.Limiter.(*knownOver); ok {
			ch.Decision, all = k.dec, false // the over-limit cache answers
			continue
		}
		if lz, ok := ch.Limiter.(*leased); ok {
			// A leased limit answers from this node's lease when it has
			// one, as the request would have been decided.
			if d, ok := lz.Look(ch.Key, ch.N); ok {
				ch.Decision = d
				all = all && d.Allowed
				continue
			}
		}
		l := direct(ch.Limiter) // a leased limit without a lease here: its global bucket
		if int64(ch.N) > l.Capacity() {
			d, err := l.Peek(ctx, ch.Key)
			if err != nil {
				return false, err
			}
			d.Allowed = false
			ch.Decision = d
			all = false
			continue
		}
		fit = append(fit, *ch)
		fit[len(fit)-1].Limiter = l
		idx = append(idx, i)
	}
	if len(fit) == 0 {
		return all, nil
	}
	l := fit[0].Limiter.(*store.Limiter)
	ok, err := l.TakeGroup(ctx, fit, false)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, fmt.Errorf("rls: the store could not evaluate the group")
	}
	for k, i := range idx {
		dec := fit[k].Decision
		if ok {
			// An admitting evaluation tells the state after a commit; what
			// was not charged is the state before it.
			dec.Remaining = min(dec.Remaining+int64(fit[k].N), max(dec.Limit, dec.Remaining))
		}
		checks[i].Decision = dec
		if !dec.Allowed {
			all = false
		}
	}
	return all, nil
}

// pick returns the index of the check that stands for a descriptor: the
// refusing one with the longest wait, else the one with the fewest left.
func pick(checks []floodgate.Check) int {
	best := 0
	for i := 1; i < len(checks); i++ {
		if leads(&checks[i].Decision, &checks[best].Decision) {
			best = i
		}
	}
	return best
}

// leads reports whether decision a stands for a group before b: a refusal
// before an admission, the longer wait among refusals, the fewer units
// left among admissions.
func leads(a, b *floodgate.Decision) bool {
	switch {
	case !a.Allowed && b.Allowed:
		return true
	case !a.Allowed && !b.Allowed:
		return a.RetryAfter > b.RetryAfter
	case a.Allowed && b.Allowed:
		return a.Remaining < b.Remaining
	}
	return false
}

// resetOf is a descriptor's duration_until_reset in whole seconds, rounded
// up as the reference's (window - now % window): for a fixed window the end
// of the window holding now; for the other algorithms the wait on a
// refusal, else the time until full.
func resetOf(l *lim, d floodgate.Decision, over bool, now time.Time) time.Duration {
	var r time.Duration
	switch {
	case l.fixed || l.blocked:
		r = d.ResetAfter
		if over && d.RetryAfter > 0 {
			r = d.RetryAfter
		}
		if r == 0 && l.window > 0 {
			r = l.window - time.Duration(now.UnixNano()%int64(l.window))
		}
	case over:
		r = d.RetryAfter
	default:
		r = d.ResetAfter
	}
	return (r + time.Second - 1) / time.Second * time.Second
}

// scratch holds the buffers of one call, pooled.
type scratch struct {
	ds        []dstatus
	nodes     []*node
	ents      []entry
	enforcing []floodgate.Check
	backing   []floodgate.Check
	// group and names: the checks of a group the core reports, and their
	// names (report); grouped: they hold some.
	group   []floodgate.Check
	names   []string
	grouped bool
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{ents: make([]entry, 0, 8), enforcing: make([]floodgate.Check, 0, 8), backing: make([]floodgate.Check, 0, 8),
		group: make([]floodgate.Check, 0, 8), names: make([]string, 0, 8)}
}}

// path returns n cleared node slots for lookup.
func (sc *scratch) path(n int) []*node {
	if cap(sc.nodes) < n {
		sc.nodes = make([]*node, n)
	}
	p := sc.nodes[:n]
	clear(p)
	return p
}

func (sc *scratch) statuses(n int) []dstatus {
	if cap(sc.ds) < n {
		sc.ds = make([]dstatus, n)
	}
	sc.ds = sc.ds[:n]
	clear(sc.ds)
	return sc.ds
}

// checks returns n zeroed checks from the backing buffer (a full buffer
// is left to the descriptors that hold it and a new one started).
func (sc *scratch) checks(n int) []floodgate.Check {
	if cap(sc.backing)-len(sc.backing) < n {
		sc.backing = make([]floodgate.Check, 0, max(8, 2*n))
	}
	k := len(sc.backing)
	sc.backing = sc.backing[:k+n]
	out := sc.backing[k : k+n : k+n]
	clear(out)
	return out
}

func (sc *scratch) release() {
	if len(sc.ds) > 64 || cap(sc.backing) > 256 || cap(sc.group) > 256 || cap(sc.names) > 256 {
		return // an outsized call: let its buffers go
	}
	if sc.grouped {
		clear(sc.group[:cap(sc.group)])
		sc.group = sc.group[:0]
		clear(sc.names[:cap(sc.names)])
		sc.names = sc.names[:0]
		sc.grouped = false
	}
	clear(sc.backing[:cap(sc.backing)])
	sc.backing = sc.backing[:0]
	clear(sc.ds)
	clear(sc.enforcing[:cap(sc.enforcing)])
	scratchPool.Put(sc)
}
