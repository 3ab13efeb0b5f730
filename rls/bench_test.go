package rls_test

import (
	"context"
	"strconv"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/rls"
)

// BenchmarkShouldRateLimit: one call with the origin, purge-orchestrator
// and tenant descriptors, on memstore, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	d, err := rls.ParseDomain("edge.yaml", []byte(`domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {unit: second, requests_per_unit: 1000000000}
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit: {unit: second, requests_per_unit: 500000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := rls.New(stores[0].make(b, nil), rls.Config{Domains: []rls.Domain{d}})
	if err != nil {
		b.Fatal(err)
	}
	e := func(k, v string) *ratelimitpb.RateLimitDescriptor_Entry {
		return &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	reqs := make([]*rlspb.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{e("destination_cluster", "image-origin.prod")}},
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{e("destination_cluster", "image-origin.prod"), e("source_service", "purge-orchestrator")}},
			{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{e("tenant", "t"+strconv.Itoa(i))}},
		}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
			i++
		}
	})
}
