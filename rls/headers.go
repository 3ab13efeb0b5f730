package rls

import (
	"math"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/internal/ratehdr"
)

// HeaderSet selects the header groups a response asks Envoy to add
// (response_headers_to_add).
type HeaderSet uint8

const (
	// HeadersIETF: RateLimit-Policy, one member per limited descriptor
	// ("name";q=requests;w=window seconds, where q per w is
	// requests_per_unit per unit scaled by the smallest whole factor that
	// makes q at least the limit's capacity: a token bucket of 100 a
	// second with a burst of 200 is q=200;w=2), and RateLimit, with r
	// (units left, never above q) and t, as
	// draft-ietf-httpapi-ratelimit-headers writes them and floodgate's
	// middleware sends them. An OK response has a RateLimit member per
	// descriptor, t the seconds until its limit is full again (a fixed
	// window's end); an OVER_LIMIT one only the members of the descriptors
	// over their limit (shadow ones aside), r 0 and t the seconds until the
	// limit would admit, so that no t exceeds the longest
	// duration_until_reset of the refusing descriptors (X-RateLimit-Reset).
	// A member's name is the rate_limit's name, else a short hash of its
	// config path, never the path itself (see WithHeaderPolicyNames).
	HeadersIETF HeaderSet = 1 << iota
	// HeadersLegacy: X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds) of the descriptor closest to its limit
	// (or the one over it), as floodgate's middleware writes them:
	// X-RateLimit-Limit is the limit's capacity (a token bucket's burst,
	// which may exceed requests_per_unit; a window's requests_per_unit), so
	// that Remaining never exceeds it, and Reset the seconds until the
	// budget is full again (on a refusal, until the request would pass).
	HeadersLegacy
	// HeadersReference: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset as the reference writes them with
	// LIMIT_RESPONSE_HEADERS_ENABLED, for clients that rely on them: of the
	// descriptor with the fewest units left (the last one over its limit,
	// quota-mode ones aside, when any is), its requests_per_unit,
	// limit_remaining and the whole seconds until its window ends
	// (duration_until_reset; for a quota-mode descriptor over its limit,
	// which has none, the end of its unit, as the reference).
	HeadersReference
)

// headers writes the header groups of a response; ld is the descriptor
// closest to (or over) its limit, refused whether the response is
// OVER_LIMIT.
func (s *Service) headers(ds []dstatus, resp *rlspb.RateLimitResponse, ld leader, refused bool, now time.Time) []*corepb.HeaderValue {
	if s.opts.headers == 0 || !ld.set {
		return nil
	}
	var out []*corepb.HeaderValue
	if s.opts.headers&HeadersIETF != 0 {
		out = s.ietf(out, ds, ld.st.GetDurationUntilReset().AsDuration(), refused, now)
	}
	if s.opts.headers&HeadersLegacy != 0 && ld.st.CurrentLimit != nil {
		var capacity int64
		if ld.check != nil {
			capacity = direct(ld.check.Limiter).Capacity()
		}
		out = append(out,
			&corepb.HeaderValue{Key: "X-RateLimit-Limit", Value: strconv.FormatInt(limitHeader(ld.st, capacity), 10)},
			&corepb.HeaderValue{Key: "X-RateLimit-Remaining", Value: strconv.FormatUint(uint64(ld.st.LimitRemaining), 10)},
			&corepb.HeaderValue{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(ld.st.GetDurationUntilReset().GetSeconds(), 10)})
	}
	if s.opts.headers&HeadersReference != 0 {
		out = referenceHeaders(out, resp.Statuses, now)
	}
	return out
}

// ietf appends RateLimit-Policy and RateLimit: a member per limit of
// every limited descriptor (a descriptor with a token bucket and a window
// advertises both, each under its own name), the first descriptor naming
// a limit advertising it. leadReset is the lead's duration_until_reset.
func (s *Service) ietf(out []*corepb.HeaderValue, ds []dstatus, leadReset time.Duration, refused bool, now time.Time) []*corepb.HeaderValue {
	var pol, rl strings.Builder
	seen := map[string]bool{}
	for i := range ds {
		d := &ds[i]
		if d.checks == nil {
			continue
		}
		for j := range d.lm.lims {
			l := &d.lm.lims[j]
			if seen[l.header] {
				continue
			}
			seen[l.header] = true
			name := l.header
			if s.opts.noHeaderNames {
				name = positional(len(seen))
			}
			appendMember(&pol, name, ";q=", l.q, ";w=", l.w)
			if r, t, send := s.member(d, j, leadReset, refused, now); send {
				appendMember(&rl, name, ";r=", r, ";t=", t)
			}
		}
	}
	if pol.Len() > 0 {
		out = append(out, &corepb.HeaderValue{Key: "RateLimit-Policy", Value: pol.String()})
	}
	if rl.Len() > 0 {
		out = append(out, &corepb.HeaderValue{Key: "RateLimit", Value: rl.String()})
	}
	return out
}

// positional is the name of the n-th member when members are named by
// position: "default", then "limit-2", "limit-3".
func positional(n int) string {
	if n == 1 {
		return "default"
	}
	return "limit-" + strconv.Itoa(n)
}

// appendMember appends `"name";k1=v1;k2=v2` to a list of members.
func appendMember(b *strings.Builder, name, k1 string, v1 int64, k2 string, v2 int64) {
	if b.Len() > 0 {
		b.WriteString(", ")
	}
	b.WriteByte('"')
	b.WriteString(name)
	b.WriteByte('"')
	b.WriteString(k1)
	b.WriteString(strconv.FormatInt(v1, 10))
	b.WriteString(k2)
	b.WriteString(strconv.FormatInt(v2, 10))
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
// RateLimit-Remaining and RateLimit-Reset (see HeadersReference), chosen
// among the statuses as the reference chooses.
func referenceHeaders(out []*corepb.HeaderValue, sts []*rlspb.RateLimitResponse_DescriptorStatus, now time.Time) []*corepb.HeaderValue {
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
		return out
	}
	reset := lead.GetDurationUntilReset().GetSeconds()
	if lead.DurationUntilReset == nil {
		unit := unitSeconds(lead.CurrentLimit.Unit)
		reset = unit - now.Unix()%unit
	}
	return append(out,
		&corepb.HeaderValue{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(lead.CurrentLimit.RequestsPerUnit), 10)},
		&corepb.HeaderValue{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(lead.LimitRemaining), 10)},
		&corepb.HeaderValue{Key: "RateLimit-Reset", Value: strconv.FormatInt(reset, 10)})
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
