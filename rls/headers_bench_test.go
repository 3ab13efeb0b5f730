package rls_test

import (
	"context"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
)

// edgeYAML is BenchmarkShouldRateLimit's config with budgets that never
// run out, a named limit, a hashed name and a token bucket: every kind of
// member.
const edgeYAML = `domain: edge
descriptors:
  - key: tenant
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 1000000, burst: 1000000}
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {unit: second, requests_per_unit: 1000000000}
    descriptors:
      - {key: source_service, value: purge-orchestrator, rate_limit: {unit: second, requests_per_unit: 500000000, name: purge}}
`

// BenchmarkHeaders: the requests of BenchmarkShouldRateLimit (three
// descriptors, three limits, on memstore, without gRPC), serial, with the
// IETF and legacy header groups and without any: the difference is what
// response_headers_to_add costs.
func BenchmarkHeaders(b *testing.B) {
	d, err := rls.ParseDomain("edge.yaml", []byte(edgeYAML))
	if err != nil {
		b.Fatal(err)
	}
	_, reqs := benchSetup(b) // its requests: the same descriptors
	for _, tc := range []struct {
		name string
		set  middleware.HeaderSet
	}{{"ietf+legacy", middleware.HeadersIETF | middleware.HeadersLegacy}, {"all", middleware.HeadersIETF | middleware.HeadersLegacy | middleware.HeadersReference}, {"none", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			svc, err := rls.New(stores[0].make(b, nil), rls.Config{Domains: []rls.Domain{d}}, rls.WithHeaders(tc.set))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || (tc.set != 0) != (len(resp.ResponseHeadersToAdd) > 0) {
					b.Fatal(resp, err)
				}
				i++
			}
		})
	}
}
