package rls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/rls"
)

// BenchmarkShouldRateLimitRedis: one hot descriptor under a token bucket
// on Redis, decided by a Redis call per request (direct) or on leased
// tokens (leased), without gRPC. The bucket is never drained.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	const yaml = `domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 1000000, burst: 100000000LEASED}
`
	for _, mode := range []struct{ name, field string }{{"direct", ""}, {"leased", ", leased: true"}} {
		b.Run(mode.name, func(b *testing.B) {
			d, err := rls.ParseDomain("edge.yaml", []byte(strings.Replace(yaml, "LEASED", mode.field, 1)))
			if err != nil {
				b.Fatal(err)
			}
			svc, err := rls.New(stores[1].make(b, nil), rls.Config{Domains: []rls.Domain{d}})
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Close(context.Background())
			req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{
				{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "destination_cluster", Value: "image-origin.prod"}}}}}
			ctx := context.Background()
			for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
				svc.ShouldRateLimit(ctx, req) // hot: leased from here on
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := svc.ShouldRateLimit(ctx, req)
					if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
						b.Fatal(resp, err)
					}
				}
			})
		})
	}
}
