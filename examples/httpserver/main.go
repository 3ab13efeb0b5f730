// Command httpserver is a small HTTP API protected by floodgate on the
// embedded memory store:
//
//   - every route: 10 requests per second per client IP, bursts of 20;
//   - /search, an expensive route: in addition, 6 per minute per client IP,
//     bursts of 2;
//   - /internal/: 3 per minute per service token (X-Service-Token header,
//     keyed by a keyed hash of it), bursts of 3; a caller without a token is
//     limited by its IP instead. One budget per token: to give a service
//     one budget whatever token it uses, verify the token and limit by the
//     service's name (examples/servicetokens).
//
// Every refusal is logged to stderr through the log/slog observer.
//
// Run it with -addr to serve, or with -demo to start it on a free loopback
// port, send a few requests and print what the client saw:
//
//	go run ./examples/httpserver -demo
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
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/observer/slogobserver"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("httpserver", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	demo := fs.Bool("demo", false, "serve on a free loopback port, send a few requests, print the answers and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}

	s, err := memstore.New()
	if err != nil {
		return err
	}
	defer s.Close()
	obs, err := slogobserver.New(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		return err
	}
	handler, err := newHandler(s, obs)
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
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	if *demo {
		err = runDemo(out, "http://"+ln.Addr().String())
	} else {
		fmt.Fprintf(out, "listening on http://%s\n", ln.Addr())
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		select {
		case <-ctx.Done():
		case err = <-served:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(ctx); serr != nil && err == nil {
		err = serr
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// newHandler builds the routes and their limits, all on store s, all
// reporting to obs. Every route is limited per client IP; /search is also
// limited per IP on its own, tighter budget, and /internal per service
// token. Where two limits apply, one middleware checks both, all or nothing:
// a search the tighter limit refuses costs nothing of the per-IP budget.
func newHandler(s *memstore.Store, obs floodgate.Observer) (http.Handler, error) {
	perIP, err := bucket.NewKeyed(s, bucket.Config{Name: "per-ip", Rate: floodgate.PerSecond(10), Burst: 20})
	if err != nil {
		return nil, err
	}
	searchPerIP, err := bucket.NewKeyed(s, bucket.Config{Name: "search", Rate: floodgate.PerMinute(6), Burst: 2})
	if err != nil {
		return nil, err
	}
	perService, err := bucket.NewKeyed(s, bucket.Config{Name: "per-service", Rate: floodgate.PerMinute(3), Burst: 3})
	if err != nil {
		return nil, err
	}
	home, err := httplimit.Middleware(perIP, httplimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	search, err := httplimit.Middleware(perIP, httplimit.WithLimit(searchPerIP, nil),
		httplimit.WithProblemDetails(true), httplimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	internal, err := httplimit.Middleware(perService,
		httplimit.WithHeaderKey("X-Service-Token"), httplimit.WithKeyPrefix("/internal"),
		httplimit.WithLimit(perIP, httplimit.ClientIPKey),
		httplimit.WithHeaders(middleware.HeadersIETF|middleware.HeadersDiagnostic),
		httplimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /{$}", home(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "home\n")
	})))
	mux.Handle("GET /search", search(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})))
	mux.Handle("GET /internal/report", internal(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "report\n")
	})))
	return mux, nil
}

// runDemo sends a short script of requests to base and prints, for each,
// the status and the rate-limit fields the client received.
func runDemo(out io.Writer, base string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	steps := []struct{ path, token string }{
		{"/", ""},
		{"/search?q=a", ""},
		{"/search?q=b", ""},
		{"/search?q=c", ""},
		{"/internal/report", "svc-a"},
		{"/internal/report", "svc-a"},
		{"/internal/report", "svc-a"},
		{"/internal/report", "svc-a"},
		{"/internal/report", "svc-b"},
	}
	for _, st := range steps {
		req, err := http.NewRequest("GET", base+st.path, nil)
		if err != nil {
			return err
		}
		who := "ip"
		if st.token != "" {
			req.Header.Set("X-Service-Token", st.token)
			who = st.token
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Fprintf(out, "GET %-17s %-5s -> %d", st.path, who, resp.StatusCode)
		for _, h := range []string{"RateLimit", "Retry-After", "X-RateLimit-Scope"} {
			if v := resp.Header.Values(h); len(v) > 0 {
				fmt.Fprintf(out, " | %s: %s", h, joinComma(v))
			}
		}
		fmt.Fprintln(out)
	}
	return nil
}

func joinComma(v []string) string {
	s := v[0]
	for _, x := range v[1:] {
		s += ", " + x
	}
	return s
}
