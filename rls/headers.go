package rls

import (
	"strconv"
	"strings"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
)

// headers writes the header groups of a response; lead is the status of
// the descriptor closest to (or over) its limit, refused whether the
// response is OVER_LIMIT.
func (s *Service) headers(ds []dstatus, lead *rlspb.RateLimitResponse_DescriptorStatus, capacity int64, refused bool) []*corepb.HeaderValue {
	var out []*corepb.HeaderValue
	if s.opts.headers&HeadersIETF != 0 {
		var pol, rl strings.Builder
		seen := map[string]bool{}
		for i := range ds {
			d := &ds[i]
			if d.lm == nil || d.lm.unlimited || d.checks == nil {
				continue
			}
			j := pick(d.checks)
			l := &d.lm.lims[j]
			name := l.header
			if seen[name] {
				continue
			}
			seen[name] = true
			if s.opts.noHeaderNames {
				name = "default"
				if n := len(seen); n > 1 {
					name = "limit-" + strconv.Itoa(n)
				}
			}
			if pol.Len() > 0 {
				pol.WriteString(", ")
			}
			pol.WriteString(`"` + name + `";q=` + strconv.FormatInt(l.q, 10) + ";w=" + strconv.FormatInt(l.w, 10))
			if r, t, send := s.member(d, l, j, refused, lead); send {
				if rl.Len() > 0 {
					rl.WriteString(", ")
				}
				rl.WriteString(`"` + name + `";r=` + strconv.FormatInt(r, 10) + ";t=" + strconv.FormatInt(t, 10))
			}
		}
		if pol.Len() > 0 {
			out = append(out, &corepb.HeaderValue{Key: "RateLimit-Policy", Value: pol.String()})
		}
		if rl.Len() > 0 {
			out = append(out, &corepb.HeaderValue{Key: "RateLimit", Value: rl.String()})
		}
	}
	if s.opts.headers&HeadersLegacy != 0 && lead.CurrentLimit != nil {
		out = append(out,
			&corepb.HeaderValue{Key: "X-RateLimit-Limit", Value: strconv.FormatInt(limitHeader(lead, capacity), 10)},
			&corepb.HeaderValue{Key: "X-RateLimit-Remaining", Value: strconv.FormatUint(uint64(lead.LimitRemaining), 10)},
			&corepb.HeaderValue{Key: "X-RateLimit-Reset", Value: strconv.FormatInt(lead.GetDurationUntilReset().GetSeconds(), 10)})
	}
	return out
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

// member is the RateLimit member of descriptor d, whose check j (limit l)
// it advertises: r (never above q) and t, and whether it is sent. An OK
// response sends every member, t the seconds until full (a fixed window's
// end); an OVER_LIMIT one only the members of the descriptors over their
// limit that refuse (not shadow ones), r 0 and t the seconds until the
// limit would admit, at most the lead's duration_until_reset.
func (s *Service) member(d *dstatus, l *lim, j int, refused bool, lead *rlspb.RateLimitResponse_DescriptorStatus) (r, t int64, send bool) {
	dec := d.checks[j].Decision
	over := !dec.Allowed
	if refused && (!over || d.lm.shadow) {
		return 0, 0, false
	}
	r = min(max(dec.Remaining, 0), l.q)
	if over {
		r = 0
	}
	t = int64(resetOf(l, dec, over, s.opts.now()).Seconds())
	if refused {
		t = min(t, lead.GetDurationUntilReset().GetSeconds())
	}
	return r, t, true
}
