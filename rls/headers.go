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
	// ("name";q=requests;w=window seconds), and RateLimit, the same members
	// with r (units left) and t (seconds until reset), as
	// draft-ietf-httpapi-ratelimit-headers writes them and floodgate's
	// middleware sends them. A member's name is the rate_limit's name, else
	// a short hash of its config path, never the path itself (see
	// WithHeaderPolicyNames).
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
// the descriptor closest to (or over) its limit.
func (s *Service) headers(ds []dstatus, lead *rlspb.RateLimitResponse_DescriptorStatus, capacity int64) []*corepb.HeaderValue {
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
				rl.WriteString(", ")
			}
			dec := d.checks[j].Decision
			over := !dec.Allowed
			w := int64((l.window + 999_999_999) / 1_000_000_000)
			pol.WriteString(`"` + name + `";q=` + strconv.FormatInt(l.limit, 10) + ";w=" + strconv.FormatInt(w, 10))
			r := max(dec.Remaining, 0)
			if over {
				r = 0
			}
			t := int64(resetOf(l, dec, over, s.opts.now()).Seconds())
			rl.WriteString(`"` + name + `";r=` + strconv.FormatInt(r, 10) + ";t=" + strconv.FormatInt(t, 10))
		}
		if pol.Len() > 0 {
			out = append(out, &corepb.HeaderValue{Key: "RateLimit-Policy", Value: pol.String()},
				&corepb.HeaderValue{Key: "RateLimit", Value: rl.String()})
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
