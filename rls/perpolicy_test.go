package rls_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/promtest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/observer/promobserver"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// perPolicyFiles: an origin with a nested purge descriptor of two limits
// (the second, of rate_limits, without a name: advertised under a hash of
// its path), a shadow-mode limit per client and a quota-mode limit per
// tenant; token buckets refilling a few a day, so that no window boundary
// falls between the calls.
var perPolicyFiles = map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {name: origin, algorithm: token-bucket, unit: day, requests_per_unit: 100}
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit: {name: purge, algorithm: token-bucket, unit: day, requests_per_unit: 3}
        rate_limits:
          - {algorithm: token-bucket, unit: day, requests_per_unit: 50}
  - key: client
    shadow_mode: true
    rate_limit: {name: per-client, algorithm: token-bucket, unit: day, requests_per_unit: 1}
  - key: tenant
    quota_mode: true
    rate_limit: {name: tenant-quota, algorithm: token-bucket, unit: day, requests_per_unit: 2}
`}

// TestPoliciesCountedPerPolicyInPrometheus: a request matching several
// descriptors (an origin, a nested purge descriptor with two limits, a
// shadow-mode and a quota-mode one) is counted under each of its limits,
// by the name RateLimit-Policy gives it, in a real Prometheus registry
// (promobserver), through a real gRPC listener on loopback and real
// Redis (single node and Cluster). A limit that admitted a request another
// refused counts it allowed; a shadow-mode limit counts only in the
// requests that were admitted (Source shadow); a quota-mode limit counts
// would_deny when over. In the global shadow mode the refusal is a
// would_deny and the response OK.
func TestPoliciesCountedPerPolicyInPrometheus(t *testing.T) {
	for _, sc := range stores[1:] { // redis, cluster
		for _, global := range []bool{false, true} {
			name := sc.name
			if global {
				name += "/global-shadow"
			}
			t.Run(name, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				obs, err := promobserver.New(reg)
				if err != nil {
					t.Fatal(err)
				}
				srv := serve(t, sc.make(t, nil), perPolicyFiles, rls.WithObserver(obs),
					rls.WithHeaders(middleware.HeadersIETF), rls.WithGlobalShadowMode(global))
				ds := []*ratelimitpb.RateLimitDescriptor{
					desc("destination_cluster", "image-origin.prod"),
					desc("destination_cluster", "image-origin.prod", "source_service", "purge-orchestrator"),
					desc("client", "c1"),
					desc("tenant", "t1"),
				}
				var codes []rlspb.RateLimitResponse_Code
				advertised := map[string]bool{}
				for range 4 {
					resp := srv.call(t, "edge", 0, ds...)
					codes = append(codes, resp.OverallCode)
					for m := range strings.SplitSeq(header(resp, "RateLimit-Policy"), ", ") {
						advertised[strings.Trim(strings.SplitN(m, ";", 2)[0], `"`)] = true
					}
				}
				wantCodes := []rlspb.RateLimitResponse_Code{ok, ok, ok, over}
				refused := "denied"
				if global {
					wantCodes[3], refused = ok, "would_deny"
				}
				if !slices.Equal(codes, wantCodes) {
					t.Fatalf("overall codes %v, want %v", codes, wantCodes)
				}
				// The purge descriptor's second limit, advertised under a
				// hash of its path.
				var daily []string
				for n := range advertised {
					if strings.HasPrefix(n, "rl-") {
						daily = append(daily, n)
					}
				}
				if len(daily) != 1 || len(advertised) != 5 {
					t.Fatalf("RateLimit-Policy names %v, want origin, purge, per-client, tenant-quota and one rl-", advertised)
				}
				got := promtest.Decisions(t, reg)
				want := map[string]float64{
					"request origin allowed":           4, // the 4th request: purge refused, origin would have admitted
					"request purge allowed":            3,
					"request purge " + refused:         1,
					"request " + daily[0] + " allowed": 4,
					"shadow per-client allowed":        1,
					"shadow per-client would_deny":     2, // the refused request charges no shadow-mode limit
					"request tenant-quota allowed":     2,
					"request tenant-quota would_deny":  2, // over its quota, never refusing
				}
				if !maps.Equal(got, want) {
					t.Fatalf("floodgate_decisions_total by source, policy and outcome:\n got %v\nwant %v", got, want)
				}
				for k := range got {
					if pol := strings.Fields(k)[1]; !advertised[pol] {
						t.Errorf("policy %q is not a name RateLimit-Policy advertises (%v)", pol, advertised)
					}
				}
			})
		}
	}
}

// TestPerLimitEventsInOutage: when a real Redis is killed, every limit of
// the enforcing and quota-mode descriptors is counted in Prometheus under
// the outcome the failure mode gave it (error_closed, error_open, or
// fallback when the store's local fallback decided); a shadow-mode limit
// counts nothing when the store failed, and fallback when the fallback
// decided an admitted request.
func TestPerLimitEventsInOutage(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	enforcing := []string{"origin", "purge", "rl-", "tenant-quota"}
	for _, tc := range []struct {
		name    string
		fp      redisstore.FailurePolicy
		mode    middleware.FailMode
		code    codes.Code
		outcome string
		shadow  string // the shadow-mode limit's count, "" for none
	}{
		{"closed", redisstore.FailError(), middleware.FailClosed, codes.OK, "request error_closed", ""},
		{"open", redisstore.FailError(), middleware.FailOpen, codes.OK, "request error_open", ""},
		{"error", redisstore.FailError(), middleware.FailError, codes.Unavailable, "request error_open", ""},
		// The local fallback decides: an admitted request charges the
		// shadow-mode limit too; a refused one (Fallback's buckets start
		// drained at the switch) charges none, and each of its limits
		// reports fallback.
		{"fallback", redisstore.FallbackWith(mem, same), middleware.FailClosed, codes.OK, "request fallback", "shadow per-client fallback"},
		{"fallback-refused", redisstore.Fallback(mem, 1), middleware.FailClosed, codes.OK, "request fallback", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, srv := killable(t, tc.fp)
			reg := prometheus.NewRegistry()
			obs, err := promobserver.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			s := serve(t, st, perPolicyFiles, rls.WithFailMode(tc.mode), rls.WithObserver(obs))
			srv.Kill()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = s.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{
				desc("destination_cluster", "image-origin.prod"),
				desc("destination_cluster", "image-origin.prod", "source_service", "purge-orchestrator"),
				desc("client", "c1"),
				desc("tenant", "t1"),
			}})
			if status.Code(err) != tc.code {
				t.Fatalf("ShouldRateLimit: %v, want code %v", err, tc.code)
			}
			got := map[string]float64{}
			for k, v := range promtest.Decisions(t, reg) {
				if f := strings.Fields(k); strings.HasPrefix(f[1], "rl-") {
					k = f[0] + " rl- " + f[2] // the unnamed limit's hash
				}
				got[k] = v
			}
			want := map[string]float64{}
			for _, p := range enforcing {
				f := strings.Fields(tc.outcome)
				want[f[0]+" "+p+" "+f[1]] = 1
			}
			if tc.shadow != "" {
				want[tc.shadow] = 1
			}
			if !maps.Equal(got, want) {
				t.Fatalf("floodgate_decisions_total by source, policy and outcome:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// same runs a Redis algorithm as it is on the local fallback.
func same(a algo.Algorithm) (algo.Algorithm, error) { return a, nil }
