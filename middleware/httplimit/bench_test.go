package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// The middleware's overhead is the difference between a sub-benchmark and
// "bare" (the same handler, unwrapped), in-process with an httptest
// recorder, on the embedded memstore token bucket.

func benchLimiter(b *testing.B, rate floodgate.Rate, burst int64) floodgate.Limiter {
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: rate, Burst: burst})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// bareHandler sets one header, as nearly every real handler does, so that
// the header map exists before the middleware adds its fields.
var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = plainText
	w.WriteHeader(http.StatusNoContent)
})

var plainText = []string{"text/plain"}

// runBench also reports cpu-ns/op, the process CPU time per request: on a
// shared machine wall time (ns/op) includes waiting for a CPU, CPU time
// does not.
func runBench(b *testing.B, h http.Handler, reqs []*http.Request) {
	b.ReportAllocs()
	i := 0
	cpu0 := cpuTime()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		i++
	}
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	}
}

func benchRequests(n int, remote func(i int) string, hdr map[string]string) []*http.Request {
	out := make([]*http.Request, n)
	for i := range out {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote(i)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		out[i] = r
	}
	return out
}

func BenchmarkOverhead(b *testing.B) {
	v4 := func(i int) string { return fmt.Sprintf("10.0.%d.%d:4000", i>>8&255, i&255) }
	v6 := func(i int) string { return fmt.Sprintf("[2001:db8:%x::1]:4000", i) }
	lots := floodgate.PerSecond(1_000_000)
	mw := func(l floodgate.Limiter, opts ...Option) http.Handler {
		m, err := Middleware(l, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return m(bareHandler)
	}
	b.Run("bare", func(b *testing.B) {
		runBench(b, bareHandler, benchRequests(1024, v4, nil))
	})
	// The limiter alone, for the same keys: what the middleware adds of its
	// own is (ipv4/1024keys - bare) - limiter-only.
	b.Run("limiter-only/1024keys", func(b *testing.B) {
		l := benchLimiter(b, lots, 1<<30)
		keys := make([]string, 1024)
		for i := range keys {
			keys[i], _, _ = strings.Cut(v4(i), ":")
		}
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		cpu0 := cpuTime()
		for b.Loop() {
			if _, err := l.Take(ctx, keys[i%len(keys)], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	})
	// Writing the default header fields alone, into a cleared map: the
	// path a one-limit Middleware takes, and the general one (several
	// limits, stacked middlewares, policy sets) on the same verdict.
	for _, path := range []string{"one-limit", "general"} {
		b.Run("headers-only/"+path, func(b *testing.B) {
			m, err := Middleware(benchLimiter(b, lots, 1<<30))
			if err != nil {
				b.Fatal(err)
			}
			lm := m(bareHandler).(*limitHandler).m
			d := floodgate.Decision{Allowed: true, Limit: 1 << 30, Remaining: 999_993, ResetAfter: 3 * time.Second}
			checks := []floodgate.Check{{Decision: d}}
			v := admit.Verdict{Kind: admit.Admit, Decision: d, Headers: true}
			h := http.Header{}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				clear(h)
				if path == "general" {
					lm.cfg.writeHeaders(lm, h, checks, &v, "ip")
				} else {
					lm.writeHeaders(h, checks, &v, "ip")
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Run("ipv4/1key", func(b *testing.B) {
		runBench(b, mw(benchLimiter(b, lots, 1<<30)), benchRequests(1, v4, nil))
	})
	b.Run("ipv4/1024keys", func(b *testing.B) {
		runBench(b, mw(benchLimiter(b, lots, 1<<30)), benchRequests(1024, v4, nil))
	})
	b.Run("ipv4/1024keys/policy", func(b *testing.B) {
		l := benchLimiter(b, lots, 1<<30)
		runBench(b, mw(l, WithPolicy(floodgate.Description{Name: "api"})), benchRequests(1024, v4, nil))
	})
	b.Run("ipv4/1024keys/noheaders", func(b *testing.B) {
		runBench(b, mw(benchLimiter(b, lots, 1<<30), WithHeaders(middleware.HeadersNone)), benchRequests(1024, v4, nil))
	})
	b.Run("ipv6/1024keys", func(b *testing.B) {
		runBench(b, mw(benchLimiter(b, lots, 1<<30)), benchRequests(1024, v6, nil))
	})
	b.Run("header/1key", func(b *testing.B) {
		l := benchLimiter(b, lots, 1<<30)
		runBench(b, mw(l, WithHeaderKey("X-Service-Token")), benchRequests(1, v4, map[string]string{"X-Service-Token": "svc-a"}))
	})
	b.Run("denied/1key", func(b *testing.B) {
		runBench(b, mw(benchLimiter(b, floodgate.PerHour(1), 1)), benchRequests(1, v4, nil))
	})
}

// BenchmarkOverheadPaired measures the overhead on a busy machine: it runs
// batches of the bare handler and of the wrapped one (IPv4, 1024 keys,
// default headers) back to back and reports the median of the per-request
// differences, which preemption by other processes hardly moves.
func BenchmarkOverheadPaired(b *testing.B) {
	m, err := Middleware(benchLimiter(b, floodgate.PerSecond(1_000_000), 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	wrapped := m(bareHandler)
	reqs := benchRequests(1024, func(i int) string { return fmt.Sprintf("10.0.%d.%d:4000", i>>8&255, i&255) }, nil)
	const batch = 128
	run := func(h http.Handler, i int) time.Duration {
		start := time.Now()
		for j := range batch {
			h.ServeHTTP(httptest.NewRecorder(), reqs[(i+j)%len(reqs)])
		}
		return time.Since(start)
	}
	var diffs, bares []float64
	i := 0
	for b.Loop() {
		bare := run(bareHandler, i)
		wrap := run(wrapped, i)
		diffs = append(diffs, float64(wrap-bare)/batch)
		bares = append(bares, float64(bare)/batch)
		i += batch
	}
	slices.Sort(diffs)
	slices.Sort(bares)
	b.ReportMetric(diffs[len(diffs)/2], "overhead-ns/req")
	b.ReportMetric(bares[len(bares)/2], "bare-ns/req")
	b.ReportMetric(0, "ns/op")
}

// fastYAML is a policy set whose budgets never run out: a DELETE from
// purge-orchestrator matches purge, per-route (nested) and the dry-run
// policy shadow.
const fastYAML = `domain: fast
policies:
  - {name: purge, rate: 1000000/s}
  - {name: per-route, rate: 1000000/s}
  - {name: shadow, rate: 1000000/s, dry_run: true}
rules:
  - {key: service, value: purge-orchestrator, policy: purge, rules: [{key: route, policy: per-route}]}
  - {key: method, value: DELETE, policy: shadow}
`

// BenchmarkPolicies: a policy set's wrapper, for a request matching two
// enforcing policies (purge and, nested, per-route) and one dry-run policy,
// with the default headers; "unmatched" is a request no rule matches.
func BenchmarkPolicies(b *testing.B) {
	s, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	_, h, _ := newPolicies(b, s, fastYAML)
	v4 := func(i int) string { return fmt.Sprintf("10.0.%d.%d:4000", i>>8&255, i&255) }
	b.Run("two+dry-run", func(b *testing.B) {
		reqs := benchRequests(1, v4, map[string]string{"X-Service": "purge-orchestrator"})
		reqs[0].Method = "DELETE"
		runBench(b, h, reqs)
	})
	b.Run("unmatched", func(b *testing.B) {
		runBench(b, h, benchRequests(1, v4, nil))
	})
}
