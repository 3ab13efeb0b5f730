package rls

import (
	"math"
	"slices"
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/internal/ratehdr"
	"github.com/floodgate-go/floodgate/middleware"
)

// headers writes the header groups of a response; ld is the descriptor
// closest to (or over) its limit, refused whether the response is
// OVER_LIMIT. Every value is appended into one buffer, copied once into
// one string the values share; the HeaderValues live in one array: three
// allocations, whatever the number of fields.
func (s *Service) headers(ds []dstatus, resp *rlspb.RateLimitResponse, ld leader, refused bool, now time.Time) []*corepb.HeaderValue {
	if s.opts.headers == 0 || !ld.set {
		return nil
	}
	var arr [512]byte
	buf := arr[:0]
	var fs ratehdr.Fields
	if s.opts.headers&middleware.HeadersIETF != 0 {
		buf = s.ietf(buf, &fs, ds, ld.st.GetDurationUntilReset().AsDuration(), refused, now)
	}
	if s.opts.headers&middleware.HeadersLegacy != 0 && ld.st.CurrentLimit != nil {
		var capacity int64
		if ld.check != nil {
			capacity = direct(ld.check.Limiter).Capacity()
		}
		a := len(buf)
		buf = strconv.AppendInt(buf, limitHeader(ld.st, capacity), 10)
		fs.Add("X-RateLimit-Limit", a, len(buf))
		a = len(buf)
		buf = strconv.AppendUint(buf, uint64(ld.st.LimitRemaining), 10)
		fs.Add("X-RateLimit-Remaining", a, len(buf))
		a = len(buf)
		buf = strconv.AppendInt(buf, ld.st.GetDurationUntilReset().GetSeconds(), 10)
		fs.Add("X-RateLimit-Reset", a, len(buf))
	}
	if s.opts.headers&middleware.HeadersReference != 0 {
		buf = referenceHeaders(buf, &fs, resp.Statuses, now)
	}
	return values(&fs, buf)
}

// values returns the fields fs recorded in buf as HeaderValues, their
// values substrings of one copy of buf.
func values(fs *ratehdr.Fields, buf []byte) []*corepb.HeaderValue {
	if fs.N == 0 {
		return nil
	}
	all := string(buf)
	hv := make([]corepb.HeaderValue, fs.N)
	out := make([]*corepb.HeaderValue, fs.N)
	for k := range out {
		hv[k].Key, hv[k].Value = fs.Key[k], all[fs.From[k]:fs.To[k]]
		out[k] = &hv[k]
	}
	return out
}

// member is one limit a RateLimit-Policy member advertises: limit j of
// descriptor d, the n-th member.
type member struct {
	d    *dstatus
	j, n int
}

// header is the member's limit's header name.
func (m member) header() string { return m.d.lm.lims[m.j].header }

// ietf appends RateLimit-Policy and RateLimit to buf and fs: a member per
// limit of every limited descriptor (a descriptor with a token bucket and
// a window advertises both, each under its own name), the first
// descriptor naming a limit advertising it. leadReset is the lead's
// duration_until_reset.
func (s *Service) ietf(buf []byte, fs *ratehdr.Fields, ds []dstatus, leadReset time.Duration, refused bool, now time.Time) []byte {
	var arr [16]member
	ms := members(arr[:0], ds)
	if len(ms) == 0 {
		return buf
	}
	a := len(buf)
	for k, m := range ms {
		l := &m.d.lm.lims[m.j]
		buf = s.appendMember(buf, k > 0, m, ";q=", l.q, ";w=", l.w)
	}
	fs.Add("RateLimit-Policy", a, len(buf))
	a = len(buf)
	for _, m := range ms {
		if r, t, send := s.member(m.d, m.j, leadReset, refused, now); send {
			buf = s.appendMember(buf, len(buf) > a, m, ";r=", r, ";t=", t)
		}
	}
	if len(buf) > a {
		fs.Add("RateLimit", a, len(buf))
	}
	return buf
}

// members appends to ms the limits the IETF fields advertise, in order,
// each header name once (a linear search over the few members of a
// request; a set once they are many).
func members(ms []member, ds []dstatus) []member {
	var seen map[string]bool
	for i := range ds {
		d := &ds[i]
		if d.checks == nil {
			continue
		}
		for j := range d.lm.lims {
			h := d.lm.lims[j].header
			switch {
			case seen != nil:
				if seen[h] {
					continue
				}
				seen[h] = true
			case slices.ContainsFunc(ms, func(m member) bool { return m.header() == h }):
				continue
			case len(ms) == 32:
				seen = make(map[string]bool, 64)
				for _, m := range ms {
					seen[m.header()] = true
				}
				seen[h] = true
			}
			ms = append(ms, member{d: d, j: j, n: len(ms) + 1})
		}
	}
	return ms
}

// appendMember appends `"name";k1=v1;k2=v2`, after a separator when sep:
// the name is m's limit's header name or, when members are named by
// position, "default" for the first, then "limit-2", "limit-3".
func (s *Service) appendMember(buf []byte, sep bool, m member, k1 string, v1 int64, k2 string, v2 int64) []byte {
	if sep {
		buf = append(buf, ", "...)
	}
	buf = append(buf, '"')
	switch {
	case !s.opts.noHeaderNames:
		buf = append(buf, m.header()...)
	case m.n == 1:
		buf = append(buf, "default"...)
	default:
		buf = append(buf, "limit-"...)
		buf = strconv.AppendInt(buf, int64(m.n), 10)
	}
	buf = append(buf, '"')
	buf = append(buf, k1...)
	buf = strconv.AppendInt(buf, v1, 10)
	buf = append(buf, k2...)
	return strconv.AppendInt(buf, v2, 10)
}

// limitHeader is X-RateLimit-Limit: the capacity of the lead limit (a
// token bucket's burst, a window's limit), as floodgate's middleware
// advertises it, so that X-RateLimit-Remaining never exceeds it;
// requests_per_unit when the capacity is unknown (a blocked limit).
func limitHeader(lead *rlspb.RateLimitResponse_DescriptorStatus, capacity int64) int64 {
	if capacity > 0 {
		return capacity
	}
	return int64(lead.CurrentLimit.RequestsPerUnit)
}

// member is the RateLimit member of limit j of descriptor d (ratehdr's
// rule): r (never above q) and t, and whether it is sent. An OK response
// sends every member, t the seconds until full (a fixed window's end); an
// OVER_LIMIT one only the members of the limits that refuse (not shadow
// ones), r 0 and t the seconds until the limit would admit, at most the
// lead's duration_until_reset.
func (s *Service) member(d *dstatus, j int, leadReset time.Duration, refused bool, now time.Time) (r, t int64, send bool) {
	l, dec := &d.lm.lims[j], d.checks[j].Decision
	over := !dec.Allowed
	if refused && d.role == roleShadow {
		return 0, 0, false
	}
	// The status's reset (a fixed window's end, the wait of a refusal),
	// and r 0 on a refusal, as limit_remaining.
	reset := resetOf(l, dec, over, now)
	dec.ResetAfter, dec.RetryAfter = reset, reset
	if over {
		dec.Remaining = 0
	}
	if dec.Limit <= 0 {
		dec.Limit = math.MaxInt64 // unknown (a blocked limit): r is bounded by q alone
	}
	var retry time.Duration
	if refused {
		retry = max(leadReset, time.Nanosecond)
	}
	return ratehdr.Member(dec, l.q, retry, false)
}

// referenceHeaders appends the reference's RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset (see middleware.HeadersReference), chosen
// among the statuses as the reference chooses, to buf and fs.
func referenceHeaders(buf []byte, fs *ratehdr.Fields, sts []*rlspb.RateLimitResponse_DescriptorStatus, now time.Time) []byte {
	var lead *rlspb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for _, st := range sts {
		switch {
		case st.Code == rlspb.RateLimitResponse_OVER_LIMIT:
			lead, least = st, 0
		case st.CurrentLimit != nil && st.LimitRemaining < least:
			lead, least = st, st.LimitRemaining
		}
	}
	if lead == nil {
		return buf
	}
	reset := lead.GetDurationUntilReset().GetSeconds()
	if lead.DurationUntilReset == nil {
		unit := unitSeconds(lead.CurrentLimit.Unit)
		reset = unit - now.Unix()%unit
	}
	a := len(buf)
	buf = strconv.AppendUint(buf, uint64(lead.CurrentLimit.RequestsPerUnit), 10)
	fs.Add("RateLimit-Limit", a, len(buf))
	a = len(buf)
	buf = strconv.AppendUint(buf, uint64(lead.LimitRemaining), 10)
	fs.Add("RateLimit-Remaining", a, len(buf))
	a = len(buf)
	buf = strconv.AppendInt(buf, reset, 10)
	fs.Add("RateLimit-Reset", a, len(buf))
	return buf
}

// unitSeconds is the length of a unit in seconds (the reference's
// UnitToDivider).
func unitSeconds(u rlspb.RateLimitResponse_RateLimit_Unit) int64 {
	for _, x := range units {
		if x.u == u {
			return int64(x.d / time.Second)
		}
	}
	return 1
}
