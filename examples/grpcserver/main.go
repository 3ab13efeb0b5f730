// Command grpcserver is a small gRPC API protected by floodgate interceptors
// on the embedded memory store:
//
//   - every method: 10 calls per second per peer IP, bursts of 20;
//   - /demo.Catalog/Search, an expensive method: in addition, 6 per minute
//     per peer IP, bursts of 2;
//   - /demo.Internal/Report: 3 per minute per service token
//     (x-service-token metadata, keyed by a keyed hash of it), bursts of 3;
//     a caller without a token is limited by its peer IP instead. One
//     budget per token: to limit by service, verify the token and key by
//     the service's name (examples/servicetokens shows it over HTTP).
//
// Refused calls get codes.ResourceExhausted with a RetryInfo detail and the
// grpc-retry-pushback-ms trailer. Decisions other than "allowed" are logged
// with log/slog.
//
// Run it with -addr to serve, or with -demo to start it on a free loopback
// port, make a few calls and print what the client saw:
//
//	go run ./examples/grpcserver -demo
//
// The services are described by hand (requests and responses are
// google.protobuf.StringValue), so the example needs no generated code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/grpclimit"
	"github.com/floodgate-go/floodgate/observer/slogobserver"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// The methods of the demo services.
const (
	methodGet    = "/demo.Catalog/Get"
	methodSearch = "/demo.Catalog/Search"
	methodReport = "/demo.Internal/Report"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("grpcserver", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", "127.0.0.1:50051", "address to listen on")
	demo := fs.Bool("demo", false, "serve on a free loopback port, make a few calls, print the answers and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}

	s, err := memstore.New()
	if err != nil {
		return err
	}
	defer s.Close()

	var obs floodgate.Observer
	tally := &tally{counts: map[string]int{}}
	if *demo {
		obs = tally
	} else {
		obs, err = slogobserver.New(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err != nil {
			return err
		}
	}
	srv, err := newServer(s, obs)
	if err != nil {
		return err
	}

	listen := *addr
	if *demo {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	if *demo {
		err = runDemo(out, ln.Addr().String())
		fmt.Fprintln(out, "server observer:", tally)
	} else {
		fmt.Fprintf(out, "listening on %s\n", ln.Addr())
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		select {
		case <-ctx.Done():
		case err = <-served:
		}
	}
	srv.GracefulStop()
	if serr := <-served; serr != nil && err == nil {
		err = serr
	}
	return err
}

// newServer builds the gRPC server, its limits (all on store s, all
// reporting to obs) and the demo services.
func newServer(s *memstore.Store, obs floodgate.Observer) (*grpc.Server, error) {
	perPeer, err := bucket.NewKeyed(s, bucket.Config{Name: "per-peer", Rate: floodgate.PerSecond(10), Burst: 20})
	if err != nil {
		return nil, err
	}
	searchLimit, err := bucket.NewKeyed(s, bucket.Config{Name: "search", Rate: floodgate.PerMinute(6), Burst: 2})
	if err != nil {
		return nil, err
	}
	perServiceLimit, err := bucket.NewKeyed(s, bucket.Config{Name: "per-service", Rate: floodgate.PerMinute(3), Burst: 3})
	if err != nil {
		return nil, err
	}
	// Each method is checked by one interceptor, against every limit that
	// applies to it, all or nothing: a search the narrow limit refuses is
	// not charged to the per-peer budget.
	search, err := grpclimit.New(searchLimit, grpclimit.WithLimit(perPeer, grpclimit.PeerKey),
		grpclimit.WithFilter(grpclimit.Methods(methodSearch)), grpclimit.WithKeyPrefix("search "),
		grpclimit.WithName("search"), grpclimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	perService, err := grpclimit.New(perServiceLimit, grpclimit.WithLimit(perPeer, grpclimit.PeerKey),
		grpclimit.WithFilter(grpclimit.Methods(methodReport)),
		grpclimit.WithHeaderKey("x-service-token"), grpclimit.WithKeyPrefix("report "),
		grpclimit.WithName("per-service"), grpclimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	others, err := grpclimit.New(perPeer, grpclimit.WithFilter(grpclimit.ExceptMethods(methodSearch, methodReport)),
		grpclimit.WithName("per-peer"), grpclimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(search.Unary(), perService.Unary(), others.Unary()),
		grpc.ChainStreamInterceptor(search.Stream(), perService.Stream(), others.Stream()))

	srv.RegisterService(service("demo.Catalog",
		unary(methodGet, func(_ context.Context, id string) string { return "item " + id }),
		unary(methodSearch, func(_ context.Context, q string) string { return "results for " + q }),
	), struct{}{})
	srv.RegisterService(service("demo.Internal",
		unary(methodReport, func(ctx context.Context, _ string) string { return "report" }),
	), struct{}{})
	return srv, nil
}

// service describes a gRPC service by hand.
func service(name string, methods ...grpc.MethodDesc) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{ServiceName: name, HandlerType: (*any)(nil), Methods: methods}
}

// unary describes a unary method taking and returning a StringValue, the
// way generated code does.
func unary(fullMethod string, f func(ctx context.Context, in string) string) grpc.MethodDesc {
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return wrapperspb.String(f(ctx, req.(*wrapperspb.StringValue).GetValue())), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, h)
		},
	}
}

// runDemo makes a short script of calls to addr and prints, for each, the
// status code and the retry information the client received.
func runDemo(out io.Writer, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	steps := []struct{ method, token string }{
		{methodGet, ""},
		{methodSearch, ""},
		{methodSearch, ""},
		{methodSearch, ""},
		{methodReport, "svc-a"},
		{methodReport, "svc-a"},
		{methodReport, "svc-a"},
		{methodReport, "svc-a"},
		{methodReport, "svc-b"},
		{methodReport, ""},
	}
	fmt.Fprintln(out, "plain client:")
	for _, st := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		who := "peer"
		if st.token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-service-token", st.token)
			who = st.token
		}
		var trailer metadata.MD
		err := conn.Invoke(ctx, st.method, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
		cancel()
		fmt.Fprintf(out, "  %-22s %-5s -> %s\n", st.method, who, describe(err, trailer))
	}

	// A client that honours pushback, per method: after a refusal of
	// Search it does not send Search again before the delay has passed, and
	// a call whose deadline comes sooner fails at once, locally. Other
	// methods are not held.
	client, err := grpclimit.NewClient(grpclimit.WithPushbackPerMethod(true))
	if err != nil {
		return err
	}
	conn2, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.Unary()), grpc.WithChainStreamInterceptor(client.Stream()))
	if err != nil {
		return err
	}
	defer conn2.Close()
	fmt.Fprintln(out, "client with grpclimit.NewClient (pushback per method):")
	for _, method := range []string{methodSearch, methodGet, methodSearch} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		err := conn2.Invoke(ctx, method, wrapperspb.String("x"), new(wrapperspb.StringValue))
		cancel()
		fmt.Fprintf(out, "  %-22s peer  -> %s", method, describe(err, nil))
		if errors.Is(err, grpclimit.ErrPushbackDeadline) {
			fmt.Fprintf(out, " (not sent: held by pushback, failed in %s)", roughly(time.Since(start)))
		}
		fmt.Fprintln(out)
	}
	return nil
}

// describe prints a call's outcome as the client saw it.
func describe(err error, trailer metadata.MD) string {
	st := status.Convert(err)
	if err == nil {
		return st.Code().String()
	}
	s := fmt.Sprintf("%v %q", st.Code(), st.Message())
	if d, ok := grpclimit.RetryDelay(err); ok {
		s += fmt.Sprintf(" | RetryInfo: %v", (d + time.Second - 1).Truncate(time.Second))
	}
	if v := trailer.Get("grpc-retry-pushback-ms"); len(v) == 1 {
		s += " | grpc-retry-pushback-ms set"
	}
	return s
}

// roughly prints a short duration as "< 100ms" or as it is.
func roughly(d time.Duration) string {
	if d < 100*time.Millisecond {
		return "< 100ms"
	}
	return d.Round(time.Millisecond).String()
}

// tally is the demo's observer: it counts outcomes per policy (one event
// per call and limit: a call checked against two limits counts under both).
type tally struct {
	mu     sync.Mutex
	counts map[string]int
}

// Observe counts e.
func (t *tally) Observe(e floodgate.Event) {
	t.mu.Lock()
	t.counts[e.Policy+" "+e.Outcome.String()]++
	t.mu.Unlock()
}

// String lists the counts of allowed and denied calls per policy.
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, name := range []string{"per-peer", "search", "per-service"} {
		for _, o := range []floodgate.Outcome{floodgate.OutcomeAllowed, floodgate.OutcomeDenied} {
			if n := t.counts[name+" "+o.String()]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %s=%d", name, o, n))
			}
		}
	}
	return strings.Join(parts, ", ")
}
