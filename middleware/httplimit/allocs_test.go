//go:build !race

package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// headerWriter is a ResponseWriter that keeps one header map: what the
// middleware itself allocates, without a recorder's copies.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}

// TestAllocationsPerRequest guards the hot path's allocations (the race
// detector adds its own, hence the build tag): an admitted request with
// the default IETF and legacy headers costs one allocation (the block
// holding every header value), without headers none; in a new, empty
// header map per request, as net/http's server gives each response, one
// more (the map's first group, which any header written costs); a policy set's
// request matching two enforcing policies and a dry-run one writes its
// headers in that one block too.
func TestAllocationsPerRequest(t *testing.T) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	r := httptest.NewRequest("GET", "/img/a.png", nil)
	r.RemoteAddr = "10.0.0.1:4000"
	w := &headerWriter{h: http.Header{}}
	measure := func(h http.Handler, r *http.Request) float64 {
		return testing.AllocsPerRun(200, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
	}
	l := newMemBucket(t, frozen(), floodgate.PerSecond(1_000_000), 1<<30)
	if got := measure(mustMW(t, l)(next), r); got > 1 {
		t.Errorf("Middleware, default headers: %v allocations per request, want at most 1", got)
	}
	if got := measure(mustMW(t, l, WithHeaders(middleware.HeadersNone))(next), r); got > 0 {
		t.Errorf("Middleware, no headers: %v allocations per request, want 0", got)
	}
	fresh := func(h http.Handler) float64 {
		return testing.AllocsPerRun(200, func() {
			w.h = http.Header{}
			h.ServeHTTP(w, r)
		})
	}
	bare, wrapped := fresh(next), fresh(mustMW(t, l)(next))
	if wrapped-bare > 2 {
		t.Errorf("Middleware, default headers, a new header map per request: %v allocations per request (%v without the middleware), want at most 2 more", wrapped, bare)
	}
	w.h = http.Header{}

	// Policies: the headers' cost is the difference with and without them.
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, with, _ := newPolicies(t, s, fastYAML)
	_, without, _ := newPolicies(t, s, fastYAML, WithHeaders(middleware.HeadersNone))
	pr := r.Clone(r.Context())
	pr.Method = "DELETE"
	pr.Header.Set("X-Service", "purge-orchestrator")
	a, b := measure(with, pr), measure(without, pr)
	if a-b > 1 {
		t.Errorf("Policies: the headers cost %v allocations per request (%v with, %v without), want at most 1", a-b, a, b)
	}
}
