package rls

import (
	"context"
	"math"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/middleware"
)

// dstatus is what one request descriptor came to.
type dstatus struct {
	lm       *limit
	role     role
	quota    bool // quota mode: the descriptor's, or the global one
	hits     int
	checks   []floodgate.Check // one per lim (blocked ones too, Limiter nil)
	key      string            // the store key
	stats    string            // the metric key
	precheck bool              // refused before any store call (blocked, cost too large, known over)
	cached   bool              // a check was answered by the over-limit cache
}

// ShouldRateLimit implements the Envoy rate limit service: the limits the
// request matches (resolve), their decision (decide), then what the store's
// failure policy or this service's failure mode makes of it; the events go
// to the observer through the admission core (report).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := s.core.Start()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	ds, err := s.resolve(s.cur.Load(), req, sc)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	marks := s.failMarks()
	c := call{s: s, ctx: ctx, req: req, ds: ds, sc: sc, admitted: true}
	resp, lead, err := c.decide()
	if err != nil {
		return s.answerError(&c, err, start)
	}
	if mode, failed := s.storeFailure(lead, marks); failed {
		// redisstore's FailOpen / FailClosed: a blanket answer with no
		// quota behind it, answered as this service's own failure modes.
		s.storeFailed(modeName(mode), nil)
		c.reportFailure(mode == admit.FailClosed, nil, start)
		return s.failAnswer(ds, mode), nil
	}
	if lead != nil {
		if lead.Decision.Fallback || s.failN[2].Load() != marks[2] {
			s.storeFailed("local", nil)
		} else {
			s.storeDecided()
		}
	}
	c.report(start)
	return resp, nil
}

// resolve finds the limit of every descriptor of req, as the reference's
// constructLimitsToCheck: the config's (or the descriptor's own limit),
// the store and metric keys, the hits, and its role in the decision; a
// limit that another matched limit replaces is dropped.
func (s *Service) resolve(c *compiled, req *rlspb.RateLimitRequest, sc *scratch) ([]dstatus, error) {
	ds := sc.statuses(len(req.Descriptors))
	root := c.domains[req.Domain]
	if root == nil {
		return ds, nil // unknown domain: no limit at all, the request's own ones included
	}
	var replacing map[string]bool // made when a limit replaces another
	for i, d := range req.Descriptors {
		if err := s.match(root, req.Domain, d, &ds[i], sc); err != nil {
			return nil, err
		}
		lm := ds[i].lm
		if lm == nil {
			continue
		}
		for _, r := range lm.replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		hits := uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		ds[i].hits = int(min(hits, math.MaxInt32))
		ds[i].quota = s.opts.quota || lm.quota
		ds[i].role = roleOf(lm, ds[i].hits, d.GetIsNegativeHits(), ds[i].quota)
	}
	for i := range ds {
		if lm := ds[i].lm; lm != nil && lm.name != "" && replacing[lm.name] {
			ds[i] = dstatus{}
		}
	}
	return ds, nil
}

// roleOf is the role of a descriptor whose limit is lm.
func roleOf(lm *limit, hits int, negative, quota bool) role {
	switch {
	case lm.unlimited:
		return roleUnlimited
	case negative:
		return roleRefund
	case hits == 0:
		return roleLook
	case quota:
		return roleQuota
	case lm.shadow:
		return roleShadow
	}
	return roleEnforce
}

// match finds the limit of one request descriptor and its keys.
func (s *Service) match(root *node, domain string, d *ratelimitpb.RateLimitDescriptor, out *dstatus, sc *scratch) error {
	ents := sc.ents[:0]
	for _, e := range d.GetEntries() {
		ents = append(ents, entry{e.GetKey(), e.GetValue()})
	}
	defer func() { sc.ents = ents[:0] }()
	if o := d.GetLimit(); o != nil {
		lm, err := s.override(domain, o.GetRequestsPerUnit(), o.GetUnit().String(), o.GetUnitMultiplier().GetValue(), ents)
		if err != nil {
			return err
		}
		out.lm, out.key, out.stats = lm, s.storeKey(domain, ents, nil), lm.statsKey
		return nil
	}
	path := sc.path(len(ents))
	if n := lookup(root, ents, path); n != nil {
		out.lm = n.limit
		out.key, out.stats = s.keys(domain, ents, path, n.limit)
	}
	return nil
}

// failMarks reads the counters of the store's failure-policy events
// (ObserveStore): open, closed, local.
func (s *Service) failMarks() [3]uint64 {
	return [3]uint64{s.failN[0].Load(), s.failN[1].Load(), s.failN[2].Load()}
}

// storeFailure reports whether the store's blanket FailOpen or FailClosed
// answered during the call (an event since marks, or the lead decision's
// Fallback mark without a limit), and which.
func (s *Service) storeFailure(lead *floodgate.Check, marks [3]uint64) (admit.FailMode, bool) {
	blanket := lead != nil && lead.Decision.Fallback && lead.Decision.Limit == 0
	switch {
	case s.failN[1].Load() != marks[1] || (blanket && !lead.Decision.Allowed):
		return admit.FailClosed, true
	case s.failN[0].Load() != marks[0] || (blanket && lead.Decision.Allowed):
		return admit.FailOpen, true
	}
	return 0, false
}

// failCore is the admission core's fail mode of m, the answer of a call
// the store could not decide; false for FailError, which answers none (the
// call fails, and Envoy's failure_mode_deny decides).
func failCore(m middleware.FailMode) (admit.FailMode, bool) {
	switch m {
	case middleware.FailOpen:
		return admit.FailOpen, true
	case middleware.FailClosed:
		return admit.FailClosed, true
	}
	return 0, false
}

// failName names a fail mode in metrics and logs: error, open, closed.
func failName(m middleware.FailMode) string {
	switch m {
	case middleware.FailOpen:
		return "open"
	case middleware.FailClosed:
		return "closed"
	}
	return "error"
}

// modeName names a core's fail mode in metrics and logs: open, closed.
func modeName(m admit.FailMode) string { return failName(m) }

// answerError answers a call the store could not decide by the failure
// mode: FailError fails the call with Unavailable (Envoy decides, by
// default, failure_mode_deny false, letting the request through).
func (s *Service) answerError(c *call, err error, start int64) (*rlspb.RateLimitResponse, error) {
	var resp *rlspb.RateLimitResponse
	mode, ok := failCore(s.opts.failure)
	if ok {
		resp = s.failAnswer(c.ds, mode)
	}
	c.reportFailure(ok && mode == admit.FailClosed, err, start)
	if s.opts.metrics != nil {
		s.opts.metrics.storeError()
	}
	s.storeFailed(failName(s.opts.failure), err)
	if resp == nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return resp, nil
}

// failAnswer is the answer of a call the store could not decide, by
// mode (FailOpen or FailClosed).
func (s *Service) failAnswer(ds []dstatus, mode admit.FailMode) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(ds))}
	for i := range ds {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if d := &ds[i]; mode == admit.FailClosed && d.role > roleUnlimited && !d.lm.shadow {
			st.Code, st.CurrentLimit = rlspb.RateLimitResponse_OVER_LIMIT, d.lm.lims[0].pb
			if !s.opts.shadow {
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
		resp.Statuses[i] = st
	}
	return resp
}
