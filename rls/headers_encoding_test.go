package rls_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
)

type sfMember struct {
	name       string
	q, w, r, t int64
}

// parseSF parses a RateLimit or RateLimit-Policy value with httpsfv (not
// the service's formatter): String members with Integer parameters.
func parseSF(t *testing.T, field, v string) []sfMember {
	t.Helper()
	l, err := httpsfv.UnmarshalList([]string{v})
	if err != nil {
		t.Fatalf("%s %q: %v", field, v, err)
	}
	var out []sfMember
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		name, isStr := it.Value.(string)
		if !ok || !isStr {
			t.Fatalf("%s %q: member %v is not a String item", field, v, m)
		}
		x := sfMember{name: name}
		for _, k := range it.Params.Names() {
			pv, _ := it.Params.Get(k)
			n, isInt := pv.(int64)
			if !isInt || n < 0 {
				t.Fatalf("%s %q: %s is not a non-negative Integer", field, v, k)
			}
			switch k {
			case "q":
				x.q = n
			case "w":
				x.w = n
			case "r":
				x.r = n
			case "t":
				x.t = n
			default:
				t.Fatalf("%s %q: unexpected parameter %s", field, v, k)
			}
		}
		out = append(out, x)
	}
	return out
}

// checkRLSEncoding checks one response: r <= q for every member, q/w the
// rate of the limit of that name, and on OVER_LIMIT every t at most the
// longest duration_until_reset of the descriptors over their limit (and
// X-RateLimit-Reset), the largest t being that duration.
func checkRLSEncoding(t *testing.T, label string, resp *rlspb.RateLimitResponse, rates map[string]floodgate.Rate) {
	t.Helper()
	h := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	pols := map[string]sfMember{}
	for _, p := range parseSF(t, "RateLimit-Policy", h["RateLimit-Policy"]) {
		rate, ok := rates[p.name]
		if !ok {
			t.Fatalf("%s: policy %q not configured", label, p.name)
		}
		if p.w <= 0 || p.q*int64(rate.Per) != p.w*rate.N*int64(time.Second) {
			t.Errorf("%s: %q;q=%d;w=%d: q/w is not the rate %d per %v", label, p.name, p.q, p.w, rate.N, rate.Per)
		}
		pols[p.name] = p
	}
	cur := parseSF(t, "RateLimit", h["RateLimit"])
	maxT := int64(-1)
	for _, m := range cur {
		p, ok := pols[m.name]
		if !ok {
			t.Fatalf("%s: RateLimit member %q has no policy", label, m.name)
		}
		if m.r > p.q {
			t.Errorf("%s: %q: r=%d > q=%d", label, m.name, m.r, p.q)
		}
		maxT = max(maxT, m.t)
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		if len(cur) != len(pols) {
			t.Errorf("%s: OK with %d RateLimit members for %d policies", label, len(cur), len(pols))
		}
		return
	}
	bound := int64(0)
	for _, st := range resp.Statuses {
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			bound = max(bound, st.GetDurationUntilReset().GetSeconds())
		}
	}
	if reset, ok := h["X-RateLimit-Reset"]; ok && reset != strconv.FormatInt(bound, 10) {
		t.Errorf("%s: X-RateLimit-Reset %s, want the longest wait %d", label, reset, bound)
	}
	for _, m := range cur {
		if m.t > bound {
			t.Errorf("%s: wait %d s < %q;r=%d;t=%d", label, bound, m.name, m.r, m.t)
		}
	}
	if maxT != bound {
		t.Errorf("%s: wait %d s, largest t %d: want them equal", label, bound, maxT)
	}
}

// The IETF fields through the service's real gRPC API, for many limits,
// until each is refused.
func TestEncodingThroughRLS(t *testing.T) {
	sec, minute, hour := time.Second, time.Minute, time.Hour
	cases := []struct {
		name  string
		yaml  string
		ds    []string // descriptor keys sent, each with value "v"
		rates map[string]floodgate.Rate
	}{
		{"burst above N", `  - key: a
    rate_limit: {name: a, algorithm: token-bucket, unit: second, requests_per_unit: 10, burst: 20}`,
			[]string{"a"}, map[string]floodgate.Rate{"a": {N: 10, Per: sec}}},
		{"burst below N", `  - key: a
    rate_limit: {name: a, algorithm: token-bucket, unit: second, requests_per_unit: 10, burst: 5}`,
			[]string{"a"}, map[string]floodgate.Rate{"a": {N: 10, Per: sec}}},
		{"slow bucket", `  - key: a
    rate_limit: {name: a, algorithm: token-bucket, unit: minute, requests_per_unit: 3, burst: 7}`,
			[]string{"a"}, map[string]floodgate.Rate{"a": {N: 3, Per: minute}}},
		{"fixed window", `  - key: a
    rate_limit: {name: a, unit: minute, requests_per_unit: 5}`,
			[]string{"a"}, map[string]floodgate.Rate{"a": {N: 5, Per: minute}}},
		{"leaky", `  - key: a
    rate_limit: {name: a, algorithm: leaky-bucket, unit: second, requests_per_unit: 2, burst: 4}`,
			[]string{"a"}, map[string]floodgate.Rate{"a": {N: 2, Per: sec}}},
		{"one of two refuses", `  - key: tight
    rate_limit: {name: tight, algorithm: token-bucket, unit: minute, requests_per_unit: 1, burst: 1}
  - key: search
    rate_limit: {name: search, algorithm: token-bucket, unit: hour, requests_per_unit: 1, burst: 2}`,
			[]string{"tight", "search"}, map[string]floodgate.Rate{"tight": {N: 1, Per: minute}, "search": {N: 1, Per: hour}}},
		{"one of three refuses", `  - key: hourly
    rate_limit: {name: hourly, unit: hour, requests_per_unit: 100}
  - key: search
    rate_limit: {name: search, algorithm: token-bucket, unit: second, requests_per_unit: 2, burst: 3}
  - key: burst
    rate_limit: {name: burst, algorithm: token-bucket, unit: minute, requests_per_unit: 10, burst: 30}`,
			[]string{"hourly", "search", "burst"}, map[string]floodgate.Rate{"hourly": {N: 100, Per: hour}, "search": {N: 2, Per: sec}, "burst": {N: 10, Per: minute}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := floodgate.ClockFunc(func() time.Time { return time.Unix(1_800_000_000, 0) })
			srv := serve(t, stores[0].make(t, clock), map[string]string{"d.yaml": "domain: d\ndescriptors:\n" + tc.yaml + "\n"},
				rls.WithHeaders(middleware.HeadersIETF|middleware.HeadersLegacy))
			var ds []*ratelimitpb.RateLimitDescriptor
			for _, k := range tc.ds {
				ds = append(ds, desc(k, "v"))
			}
			for i := 0; ; i++ {
				resp := srv.call(t, "d", 0, ds...)
				checkRLSEncoding(t, tc.name+" call "+strconv.Itoa(i), resp, tc.rates)
				if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
					break
				}
				if i > 200 {
					t.Fatal("never refused")
				}
			}
		})
	}
}
