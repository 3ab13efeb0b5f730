//go:build !race

package rls_test

import (
	"context"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
)

// TestHeadersAllocations guards what response_headers_to_add costs (the
// race detector adds allocations of its own, hence the build tag): every
// header group of a call with three limits, in three allocations (the
// buffer's one string, the HeaderValues, the slice), counted as the
// difference with the same calls without headers.
func TestHeadersAllocations(t *testing.T) {
	d, err := rls.ParseDomain("edge.yaml", []byte(edgeYAML))
	if err != nil {
		t.Fatal(err)
	}
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		desc("destination_cluster", "image-origin.prod"),
		desc("destination_cluster", "image-origin.prod", "source_service", "purge-orchestrator"),
		desc("tenant", "t"),
	}}
	measure := func(set middleware.HeaderSet) float64 {
		svc, err := rls.New(stores[0].make(t, nil), rls.Config{Domains: []rls.Domain{d}}, rls.WithHeaders(set))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		return testing.AllocsPerRun(100, func() {
			if resp, err := svc.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatal(resp, err)
			}
		})
	}
	none := measure(0)
	for _, set := range []middleware.HeaderSet{middleware.HeadersIETF, middleware.HeadersIETF | middleware.HeadersLegacy, middleware.HeadersIETF | middleware.HeadersLegacy | middleware.HeadersReference} {
		if got := measure(set); got-none > 3 {
			t.Errorf("header set %d: %v allocations per call, %v without headers: want at most 3 more", set, got, none)
		}
	}
}
