package benchmarks

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/didip/tollbooth/v8"
	tblimiter "github.com/didip/tollbooth/v8/limiter"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/go-chi/httprate"
	"github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
)

// Middleware overhead: each library's net/http middleware, limiting per
// client IP, in front of a handler that writes 200 and nothing else, driven
// in-process with an httptest recorder (no network), from 1,024 client
// addresses. The budget is large (1,000,000 per second) so that every request
// takes the admitted path, which is the one every request pays for. The
// "bare" row is the handler alone: overhead = ns/op - bare.
const mwClients = 1024

type mwPeer struct {
	name string
	mk   func(tb testing.TB, next http.Handler) (http.Handler, func())
}

func middlewarePeers() []mwPeer {
	return []mwPeer{
		{"bare", func(tb testing.TB, next http.Handler) (http.Handler, func()) { return next, func() {} }},
		// The row the ratios use: the same three X-RateLimit-* fields the
		// peers send, so that both sides do the same work.
		{"floodgate", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			return floodgateMW(tb, next, httplimit.WithHeaders(middleware.HeadersLegacy))
		}},
		// The default: the IETF RateLimit-Policy and RateLimit fields too
		// (five header fields; the recorder's header copy grows with them).
		{"floodgate-ietf+legacy-headers", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			return floodgateMW(tb, next)
		}},
		// No header at all: what the decision and the key cost, without
		// the header fields (and the recorder's copy of them).
		{"floodgate-no-headers", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			return floodgateMW(tb, next, httplimit.WithHeaders(middleware.HeadersNone))
		}},
		// Not a limiter: the least any middleware that sends the three
		// X-RateLimit-* fields does (the limit a constant, remaining and
		// reset formatted per request into one block), deciding nothing.
		{"floor-three-fields", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			return threeFields(next), func() {}
		}},
		{"ulule", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			l := limiter.New(ululemem.NewStore(), limiter.Rate{Period: time.Second, Limit: 1_000_000})
			return ululestdlib.NewMiddleware(l).Handler(next), func() {}
		}},
		{"tollbooth", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			lmt := tollbooth.NewLimiter(1_000_000, nil)
			lmt.SetBurst(1_000_000)
			lmt.SetIPLookup(tblimiter.IPLookup{Name: "RemoteAddr"})
			return tollbooth.LimitHandler(lmt, next), func() {}
		}},
		{"httprate", func(tb testing.TB, next http.Handler) (http.Handler, func()) {
			return httprate.LimitByRealIP(1_000_000, time.Second)(next), func() {}
		}},
	}
}

func BenchmarkMiddleware(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	reqs := make([]*http.Request, mwClients)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		reqs[i].RemoteAddr = "10.1." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":40000"
	}
	for _, p := range middlewarePeers() {
		b.Run("per-ip/"+p.name, func(b *testing.B) {
			h, closeFn := p.mk(b, ok)
			defer closeFn()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, reqs[i%mwClients])
				if w.Code != http.StatusOK {
					b.Fatalf("%s: status %d", p.name, w.Code)
				}
				i++
			}
		})
	}
	// The same with a ResponseWriter that, as net/http's server does,
	// gives each request a new, empty header map and copies nothing: the
	// recorder's copy of the header map (a map and a slice per response,
	// growing with the fields) is gone, so what is left above bare is the
	// middleware's own work, allocations included.
	for _, p := range middlewarePeers() {
		b.Run("per-ip-writer/"+p.name, func(b *testing.B) {
			h, closeFn := p.mk(b, ok)
			defer closeFn()
			b.ReportAllocs()
			w := &mapWriter{}
			i := 0
			for b.Loop() {
				w.h, w.code = http.Header{}, 0
				h.ServeHTTP(w, reqs[i%mwClients])
				if w.code != http.StatusOK {
					b.Fatalf("%s: status %d", p.name, w.code)
				}
				i++
			}
		})
	}
}

// mapWriter is a ResponseWriter that keeps the header map it is given and
// the status, and discards the body.
type mapWriter struct {
	h    http.Header
	code int
}

func (w *mapWriter) Header() http.Header         { return w.h }
func (w *mapWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *mapWriter) WriteHeader(code int)        { w.code = code }

func floodgateMW(tb testing.TB, next http.Handler, opts ...httplimit.Option) (http.Handler, func()) {
	s, err := memstore.New()
	if err != nil {
		tb.Fatal(err)
	}
	l, err := bucket.NewKeyed(s, bucket.Config{Name: "per-ip", Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		tb.Fatal(err)
	}
	mw, err := httplimit.Middleware(l, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return mw(next), func() { _ = s.Close() }
}

// threeFields is the floor-three-fields row: X-RateLimit-Limit,
// -Remaining and -Reset written as floodgate writes them (one allocated
// block holds the values and their digits; canonical keys written
// directly), with remaining counting down per request.
func threeFields(next http.Handler) http.Handler {
	limit := []string{"1000000"}
	var n int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		blk := new(struct {
			vals   [2]string
			digits [24]byte
		})
		d := strconv.AppendInt(blk.digits[:0], 1_000_000-n%1_000_000, 10)
		cut := len(d)
		d = strconv.AppendInt(d, 1, 10)
		blk.vals[0], blk.vals[1] = unsafe.String(&d[0], cut), unsafe.String(&d[cut], len(d)-cut)
		h := w.Header()
		h["X-Ratelimit-Limit"] = limit
		h["X-Ratelimit-Remaining"] = blk.vals[0:1:1]
		h["X-Ratelimit-Reset"] = blk.vals[1:2:2]
		next.ServeHTTP(w, r)
	})
}
