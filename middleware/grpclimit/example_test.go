package grpclimit_test

import (
	"context"
	"fmt"
	"github.com/floodgate-go/floodgate/middleware"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/grpclimit"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A server that allows each peer 2 calls and then one a minute, and what a
// client sees.
func Example() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, err := bucket.NewKeyed(store, bucket.Config{Rate: floodgate.PerMinute(1), Burst: 2})
	if err != nil {
		panic(err)
	}
	ic, err := grpclimit.New(lim, grpclimit.WithName("per-peer"))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ic.Unary()),
		grpc.ChainStreamInterceptor(ic.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for i := 1; i <= 3; i++ {
		var trailer metadata.MD
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Printf("call %d: %v", i, st.Code())
		if d, ok := grpclimit.RetryDelay(err); ok {
			fmt.Printf(" %q, retry in %v, pushback trailer set: %v",
				st.Message(), d.Round(time.Minute), len(trailer.Get("grpc-retry-pushback-ms")) == 1)
		}
		fmt.Println()
	}
	// Output:
	// call 1: OK
	// call 2: OK
	// call 3: ResourceExhausted "rate limit exceeded", retry in 1m0s, pushback trailer set: true
}

// A shedder admits as many calls at once as its Acquirer has slots; here a
// channel of one slot, with the interceptor called directly.
func ExampleShed() {
	slots := make(chan struct{}, 1)
	acq := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) {
		select {
		case slots <- struct{}{}:
			return func(bool) { <-slots }, true, nil
		default:
			return nil, false, nil
		}
	})
	ic, err := grpclimit.Shed(acq, grpclimit.WithShedRetryAfter(2*time.Second))
	if err != nil {
		panic(err)
	}
	unary := ic.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/demo.Search/Query"}
	slow := func(ctx context.Context, req any) (any, error) {
		// While this call holds the only slot, another one arrives.
		_, err := unary(ctx, req, info, func(context.Context, any) (any, error) { return "inner", nil })
		d, _ := grpclimit.RetryDelay(err)
		fmt.Printf("concurrent call: %v, retry in %v\n", status.Code(err), d)
		return "outer", nil
	}
	resp, err := unary(context.Background(), nil, info, slow)
	fmt.Println("first call:", resp, status.Code(err))
	// Output:
	// concurrent call: Unavailable, retry in 2s
	// first call: outer OK
}

// A client that honours the server's pushback and retries refused calls to
// an idempotent method.
func ExampleNewClient() {
	client, err := grpclimit.NewClient(
		grpclimit.WithMaxPushback(30*time.Second),
		grpclimit.WithMaxAttempts(3),
		grpclimit.WithRetryable(func(method string) bool { return method == "/grpc.health.v1.Health/Check" }))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:50051", // not dialled until the first call
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.Unary()),
		grpc.WithChainStreamInterceptor(client.Stream()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Println("pushback in force:", !client.PushbackFor(context.Background(), "/grpc.health.v1.Health/Check").IsZero())
	// Output:
	// pushback in force: false
}

// A policy per service token AND per peer, checked all or nothing: a call
// the token's limit refuses costs the peer nothing. The token is hashed
// before it becomes a key; the fleet's nodes share the secret.
func ExampleWithLimit() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	perToken, err := bucket.NewKeyed(store, bucket.Config{Name: "per-token", Rate: floodgate.PerMinute(1), Burst: 1})
	if err != nil {
		panic(err)
	}
	perPeer, err := bucket.NewKeyed(store, bucket.Config{Name: "per-peer", Rate: floodgate.PerMinute(1), Burst: 2})
	if err != nil {
		panic(err)
	}
	ic, err := grpclimit.New(perToken,
		grpclimit.WithHeaderKey("x-service-token"),
		grpclimit.WithKeySecret([]byte("the fleet's secret, 32 bytes long")),
		grpclimit.WithLimit(perPeer, grpclimit.PeerKey))
	if err != nil {
		panic(err)
	}
	unary := ic.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/demo.Reports/Get"}
	handler := func(context.Context, any) (any, error) { return "report", nil }
	from := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}}
	for _, token := range []string{"svc-a", "svc-a", "svc-b", "svc-c"} {
		ctx := metadata.NewIncomingContext(peer.NewContext(context.Background(), from),
			metadata.Pairs("x-service-token", token))
		_, err := unary(ctx, nil, info, handler)
		fmt.Printf("%s: %v\n", token, status.Code(err))
	}
	// Output:
	// svc-a: OK
	// svc-a: ResourceExhausted
	// svc-b: OK
	// svc-c: ResourceExhausted
}
