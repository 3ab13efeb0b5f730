package grpclimit

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
)

// BenchmarkUnaryInterceptor measures the overhead of the unary server
// interceptor, in process: the interceptor function is called directly
// with a handler that does nothing, on the memstore token bucket. Besides
// ns/op it reports cpu-ns/op, the process CPU time per call, which a machine
// shared with other work disturbs less than wall time.
func BenchmarkUnaryInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	// A server call's context: a peer, and a transport stream for the
	// pushback trailer, as a real server gives the interceptor.
	peerCtx := grpc.NewContextWithServerTransportStream(peerCtx(b, "192.0.2.10:40000"), nopStream{})
	mdCtx := metadata.NewIncomingContext(peerCtx, metadata.Pairs("x-service-token", "svc-reporting"))
	// A bucket that never runs dry (the allowed path) and one that always
	// is (the refusal path).
	roomy := newBucket(b, floodgate.PerSecond(1_000_000), 1<<40)
	dry := newBucket(b, floodgate.PerHour(1), 1)
	_, _ = dry.Take(context.Background(), "192.0.2.10", 1)

	run := func(b *testing.B, ctx context.Context, unary grpc.UnaryServerInterceptor) {
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			_, _ = unary(ctx, nil, info, handler)
		}
		if cpu := cpuTime() - cpu0; cpu > 0 {
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		}
	}
	mustUnary := func(b *testing.B, l floodgate.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
		ic, err := New(l, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return ic.Unary()
	}
	b.Run("bare-handler", func(b *testing.B) {
		run(b, peerCtx, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		})
	})
	b.Run("peer-allowed", func(b *testing.B) {
		run(b, peerCtx, mustUnary(b, roomy, WithObserver(floodgate.ObserverFunc(func(floodgate.Event) {}))))
	})
	b.Run("metadata-allowed", func(b *testing.B) {
		run(b, mdCtx, mustUnary(b, roomy, WithHeaderKey("x-service-token")))
	})
	b.Run("header-and-peer-limits-allowed", func(b *testing.B) {
		run(b, mdCtx, mustUnary(b, roomy, WithHeaderKey("x-service-token"), WithLimit(roomy, PeerKey)))
	})
	b.Run("peer-denied", func(b *testing.B) {
		run(b, peerCtx, mustUnary(b, dry))
	})
	b.Run("peer-dry-run-would-deny", func(b *testing.B) {
		run(b, peerCtx, mustUnary(b, dry, WithDryRun(true)))
	})
}

// nopStream is a grpc.ServerTransportStream that accepts and drops
// headers and trailers.
type nopStream struct{}

func (nopStream) Method() string                  { return checkMethod }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }
