// Command nullrls is a rate limit service that decides nothing: it answers
// every ShouldRateLimit OK, with one OK status per descriptor, through the
// same grpc-go server floodgate-rls runs on. cmd/compare measures it beside
// the real services as the ceiling of the transport: no service behind a
// grpc-go server on this machine answers faster than this one.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type null struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (null) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
	}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	return resp, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the gRPC address")
	flag.Parse()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullrls:", err)
		os.Exit(1)
	}
	g := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(g, null{})
	if err := g.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "nullrls:", err)
		os.Exit(1)
	}
}
