package rls_test

import (
	"context"
	"fmt"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// The image origin takes 15000 requests a second, the purge orchestrator
// 500 of them: Envoy sends both descriptors with each purge request.
func Example() {
	d, err := rls.ParseDomain("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {unit: hour, requests_per_unit: 15000}
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit: {unit: hour, requests_per_unit: 500}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	svc, err := rls.New(st, rls.Config{Domains: []rls.Domain{d}})
	if err != nil {
		fmt.Println(err)
		return
	}
	entry := func(k, v string) *ratelimitpb.RateLimitDescriptor_Entry {
		return &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	req := &rlspb.RateLimitRequest{Domain: "edge", HitsAddend: 300, Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("destination_cluster", "image-origin.prod")}},
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{entry("destination_cluster", "image-origin.prod"), entry("source_service", "purge-orchestrator")}},
	}}
	for range 2 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining, resp.Statuses[1].Code, resp.Statuses[1].LimitRemaining)
	}
	// Output:
	// OK 14700 OK 200
	// OVER_LIMIT 14700 OVER_LIMIT 0
}
