package rls

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
)

// side is the group a descriptor's checks are judged in: the request's
// enforcing group, a quota-mode descriptor's own group, or the
// shadow-mode descriptors' group.
type side uint8

const (
	sideNone    side = iota // no limit, unlimited, or a refund (decides nothing)
	sideEnforce             // can refuse the request: enforcing, and looks neither shadow nor quota
	sideQuota               // quota mode: charged when it admits, never refusing (a dry-run group of its own)
	sideShadow              // shadow mode: charged when the request is admitted, never refusing
)

func (d *dstatus) side() side {
	switch {
	case d.role <= roleUnlimited || d.role == roleRefund:
		return sideNone
	case d.role == roleQuota || (d.role == roleLook && d.quota):
		return sideQuota
	case d.role == roleShadow || (d.role == roleLook && d.lm.shadow):
		return sideShadow
	}
	return sideEnforce
}

// judge puts the request to the admission core: the verdict of its
// enforcing checks (refused when one refuses; admitted in the global
// shadow mode, the core's dry run, with would_deny; a store's fallback
// told), judged on the decision that stands for them all (the refusing
// one with the longest wait, else the one with the fewest left, as pick
// chooses; Fallback when any fell back), so that judging copies no check.
func (c *call) judge() {
	var one [1]floodgate.Check
	d := &one[0].Decision
	n, fallback := 0, false
	for i := range c.ds {
		ds := &c.ds[i]
		if ds.side() != sideEnforce {
			continue
		}
		for j := range ds.checks {
			x := &ds.checks[j].Decision
			fallback = fallback || x.Fallback
			if n == 0 || leads(x, d) {
				*d = *x
			}
			n++
		}
	}
	if n == 0 {
		c.v = admit.Verdict{Kind: admit.Admit, Outcome: floodgate.OutcomeAllowed}
		return
	}
	d.Fallback = fallback
	c.v = c.s.core.Judge(one[:], *d, nil)
}

// group gathers into the scratch buffers the checks of the descriptors
// keep selects, and their names.
func (c *call) group(keep func(*dstatus) bool) ([]floodgate.Check, []string) {
	g, names := c.sc.group[:0], c.sc.names[:0]
	for i := range c.ds {
		if d := &c.ds[i]; keep(d) {
			g = append(g, d.checks...)
			names = d.names(names)
		}
	}
	c.sc.group, c.sc.names, c.sc.grouped = g, names, true
	return g, names
}

// enforcing, shadowing and failing select the descriptors of the
// request's enforcing group, of its shadow-mode group, and those reported
// when the store failed (the enforcing and quota-mode ones, shadow-mode
// ones aside).
func enforcing(d *dstatus) bool { return d.side() == sideEnforce }

func shadowing(d *dstatus) bool { return d.side() == sideShadow }

func failing(d *dstatus) bool {
	s := d.side()
	return (s == sideEnforce || s == sideQuota) && !d.lm.shadow
}

// names appends the names of d's limits, those RateLimit-Policy
// advertises them under.
func (d *dstatus) names(out []string) []string {
	for j := range d.lm.lims {
		out = append(out, d.lm.lims[j].header)
	}
	return out
}

// report reports a decided call's events to the observer through the
// admission core, one per (request, limit), each named as RateLimit-Policy
// names the limit and carrying the limit's own decision: the enforcing
// group's as the core reports a request's policies (a limit that admitted
// a request another refused reports allowed), each quota-mode
// descriptor's as a dry-run group of its own (allowed, would_deny), and,
// when the request was admitted (and so charged them), the shadow-mode
// descriptors' with Source shadow (allowed, would_deny). A call that
// decided no limit reports one event, allowed, under Policy "rls".
func (c *call) report(start int64) {
	if c.s.opts.observer == nil {
		return
	}
	var ev floodgate.Event
	g, names := c.group(enforcing)
	n := len(g)
	if n > 0 {
		c.s.core.Report(floodgate.SourceRequest, ev, start, c.v, g, names)
	}
	for i := range c.ds {
		d := &c.ds[i]
		if d.side() != sideQuota {
			continue
		}
		src := floodgate.SourceRequest
		if d.lm.shadow {
			src = floodgate.SourceShadow
		}
		c.sc.names, c.sc.grouped = d.names(c.sc.names[:0]), true
		v := c.s.dry.Judge(d.checks, floodgate.Combine(d.checks), nil)
		c.s.dry.Report(src, ev, start, v, d.checks, c.sc.names)
		n += len(d.checks)
	}
	if c.admitted {
		n += c.reportShadows(start)
	}
	if n == 0 {
		c.s.core.Report(floodgate.SourceRequest, ev, start, c.v, nil, nil)
	}
}

// reportShadows reports the shadow-mode descriptors' events, Source
// shadow, and returns their number.
func (c *call) reportShadows(start int64) int {
	g, names := c.group(shadowing)
	if len(g) > 0 {
		v := c.s.dry.Judge(g, floodgate.Combine(g), nil)
		c.s.dry.Report(floodgate.SourceShadow, floodgate.Event{}, start, v, g, names)
	}
	return len(g)
}

// reportFailure reports a call the store could not decide (err), or that
// its blanket failure policy answered (err nil), as the failure mode
// answered it (closed: FailClosed): one event per limit of the enforcing
// and quota-mode descriptors, error_closed (their status OVER_LIMIT), else
// error_open (FailOpen; FailError too: the call fails and Envoy's
// failure_mode_deny decides; and the global shadow mode, whose request is
// admitted). Shadow-mode descriptors, never refused, report none, as the
// core's dry-run policies of a request that failed. A call without such a
// limit reports one event under Policy "rls".
func (c *call) reportFailure(closed bool, err error, start int64) {
	if c.s.opts.observer == nil {
		return
	}
	v := admit.Verdict{Kind: admit.Admit, Outcome: floodgate.OutcomeErrorOpen, Err: err}
	if closed && !c.s.opts.shadow {
		v = admit.Verdict{Kind: admit.Unavailable, Outcome: floodgate.OutcomeErrorClosed, RetryAfter: admit.UnavailableRetry, Reason: admit.ReasonUnavailable, Err: err}
	}
	g, names := c.group(failing)
	c.s.core.Report(floodgate.SourceRequest, floodgate.Event{}, start, v, g, names)
}

// cores returns the admission cores of a service with options o: the
// request's (the failure mode's FailOpen or FailClosed, FailError as
// FailOpen; dry run in the global shadow mode) and a dry-run one.
func (o *options) cores() (core, dry *admit.Core) {
	mode, _ := failCore(o.failure)
	cfg := admit.Config{Name: "rls", Observer: o.observer, FailMode: mode, DryRun: o.shadow}
	core = admit.NewDynamic(cfg)
	cfg.DryRun = true
	return core, admit.NewDynamic(cfg)
}
