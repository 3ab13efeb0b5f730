package rls_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/observer/promobserver"
	"github.com/floodgate-go/floodgate/rls"
)

// BenchmarkShouldRateLimit: one call with the origin, purge-orchestrator
// and tenant descriptors, on memstore, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	benchCalls(b, nil)
}

// benchCalls calls ShouldRateLimit in parallel on the service of
// benchSetup, with opts.
func benchCalls(b *testing.B, opts []rls.Option) {
	svc, reqs := benchSetup(b, opts...)
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

// BenchmarkShouldRateLimitObserved: BenchmarkShouldRateLimit with a
// Prometheus observer (promobserver on a registry of its own), which
// receives the call's events.
func BenchmarkShouldRateLimitObserved(b *testing.B) {
	obs, err := promobserver.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	benchCalls(b, []rls.Option{rls.WithObserver(obs)})
}

// nullRLS answers every call OK with one status per descriptor and decides
// nothing: what gRPC alone costs, the ceiling of any service behind it.
type nullRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (nullRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK})
	}
	return resp, nil
}

// BenchmarkShouldRateLimitGRPC: the call of BenchmarkShouldRateLimit
// through a real grpc-go server and client on loopback, 64 callers on one
// connection, next to a server that decides nothing (null), interleaved
// with -count.
func BenchmarkShouldRateLimitGRPC(b *testing.B) {
	svc, reqs := benchSetup(b)
	for _, tc := range []struct {
		name string
		reg  func(*grpc.Server)
	}{
		{"floodgate", svc.Register},
		{"null", func(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, nullRLS{}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			g := grpc.NewServer()
			tc.reg(g)
			go g.Serve(lis)
			defer g.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := rlspb.NewRateLimitServiceClient(conn)
			ctx := context.Background()
			b.SetParallelism(32) // 64 callers on 2 cores
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					resp, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
					if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
						b.Error(resp, err)
						return
					}
					i++
				}
			})
		})
	}
}

// benchSetup is the service and the requests of the ShouldRateLimit
// benchmarks: the origin, purge-orchestrator and tenant descriptors, on
// memstore, with limits high enough that every call is admitted.
func benchSetup(b *testing.B, opts ...rls.Option) (*rls.Service, []*rlspb.RateLimitRequest) {
	b.Helper()
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
	svc, err := rls.New(stores[0].make(b, nil), rls.Config{Domains: []rls.Domain{d}}, opts...)
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
	return svc, reqs
}
