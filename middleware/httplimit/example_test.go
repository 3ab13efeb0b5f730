package httplimit_test

import (
	"context"
	"fmt"
	"github.com/floodgate-go/floodgate/middleware"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func ExampleMiddleware() {
	s, _ := memstore.New()
	defer s.Close()
	// One request per minute per client IP, two at once. The middleware
	// advertises the limiter's own name, rate (q per w) and state.
	lim, _ := bucket.NewKeyed(s, bucket.Config{Name: "per-ip", Rate: floodgate.PerMinute(1), Burst: 2})
	limit, err := httplimit.Middleware(lim)
	if err != nil {
		fmt.Println(err)
		return
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
	srv := httptest.NewServer(limit(hello))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%d %s %s retry=%q\n", resp.StatusCode, resp.Header.Get("RateLimit-Policy"),
			resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 "per-ip";q=2;w=120 "per-ip";r=1;t=60 retry=""
	// 200 "per-ip";q=2;w=120 "per-ip";r=0;t=120 retry=""
	// 429 "per-ip";q=2;w=120 "per-ip";r=0;t=60 retry="60"
}

func ExampleWithTrustedProxies() {
	// Behind a load balancer at 10.0.0.0/8, the client is the rightmost
	// address of X-Forwarded-For that is not one of the proxies.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:41000"
	r.Header.Set("X-Forwarded-For", "203.0.113.66, 198.51.100.7, 10.0.0.9")
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	viaProxy, _ := httplimit.ClientIP(r, trusted)

	// From anyone else, forwarding headers are ignored.
	r.RemoteAddr = "192.0.2.1:5000"
	direct, _ := httplimit.ClientIP(r, trusted)
	fmt.Println(viaProxy, direct)
	// Output: 198.51.100.7 192.0.2.1
}

func ExampleShed() {
	// A concurrency limit of zero: everything is shed.
	full := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) {
		return nil, false, nil
	})
	shed, _ := httplimit.Shed(full, httplimit.WithProblemDetails(true))
	w := httptest.NewRecorder()
	shed(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Header().Get("Content-Type"))
	fmt.Print(w.Body.String())
	// Output:
	// 503 1 application/problem+json
	// {"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The server cannot take this request now.","retry_after":1}
}

func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "done")
	}))
	defer srv.Close()

	tr, _ := httplimit.NewTransport(nil, httplimit.WithMaxAttempts(3),
		httplimit.WithBackoff(10*time.Millisecond, time.Second))
	client := &http.Client{Transport: tr}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 done after 2 attempts
}
