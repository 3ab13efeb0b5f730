package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func TestStatusCodesAndHeaders(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerMinute(10), 5) // one token per 6 s
	obs := &counter{}
	h := &okHandler{}
	mw := mustMW(t, l, WithPolicy(floodgate.Description{Name: "per-ip", Window: time.Minute}), WithObserver(obs),
		WithName("api"), WithTier("edge"), WithRoute("/x"))
	srv := serve(t, mw(h))
	c := clientFrom(t, "127.0.0.1")

	for i := 1; i <= 7; i++ {
		res := do(t, c, "GET", srv.URL, nil)
		pol := parseRL(t, res.header, "RateLimit-Policy")
		if len(pol) != 1 || pol[0].name != "per-ip" || pol[0].q != 10 || !pol[0].hasW || pol[0].w != 60 {
			t.Fatalf("request %d: RateLimit-Policy %+v", i, pol)
		}
		cur := parseRL(t, res.header, "RateLimit")
		if len(cur) != 1 || cur[0].name != "per-ip" || !cur[0].hasT {
			t.Fatalf("request %d: RateLimit %+v", i, cur)
		}
		limit := atoi(t, res.header.Get("X-RateLimit-Limit"))
		remaining := atoi(t, res.header.Get("X-RateLimit-Remaining"))
		reset := atoi(t, res.header.Get("X-RateLimit-Reset"))
		if limit != 5 || remaining != cur[0].r {
			t.Fatalf("request %d: legacy limit %d remaining %d, RateLimit r=%d", i, limit, remaining, cur[0].r)
		}
		if i <= 5 {
			if res.status != http.StatusOK || res.body != "ok" {
				t.Fatalf("request %d: status %d body %q", i, res.status, res.body)
			}
			if want := int64(5 - i); cur[0].r != want {
				t.Fatalf("request %d: r=%d, want %d", i, cur[0].r, want)
			}
			// Allowed: t and X-RateLimit-Reset are the seconds until full.
			if want := int64(6 * i); reset != want || cur[0].t != want {
				t.Fatalf("request %d: reset %d t %d, want %d", i, reset, cur[0].t, want)
			}
			if res.header.Get("Retry-After") != "" || res.header.Get("Cache-Control") != "" {
				t.Fatalf("request %d: refusal headers on an admitted request", i)
			}
			continue
		}
		if res.status != http.StatusTooManyRequests {
			t.Fatalf("request %d: status %d, want 429", i, res.status)
		}
		ra := atoi(t, res.header.Get("Retry-After"))
		if ra < 1 || ra < cur[0].t || cur[0].r != 0 || cur[0].t != 6 {
			t.Fatalf("request %d: Retry-After %d, RateLimit %+v", i, ra, cur[0])
		}
		if reset != 30 {
			t.Fatalf("request %d: reset %d, want 30", i, reset)
		}
		if res.header.Get("Cache-Control") != "no-store" || !strings.HasPrefix(res.header.Get("Content-Type"), "text/plain") {
			t.Fatalf("request %d: headers %v", i, res.header)
		}
		if !strings.HasPrefix(res.body, "429 Too Many Requests") {
			t.Fatalf("request %d: body %q", i, res.body)
		}
	}
	if h.calls.Load() != 5 || obs.get(floodgate.OutcomeAllowed) != 5 || obs.get(floodgate.OutcomeDenied) != 2 {
		t.Fatalf("handler calls %d, observed %v", h.calls.Load(), obs.counts)
	}
	for _, e := range obs.events {
		if e.Policy != "api" || e.Tier != "edge" || e.Route != "/x" || e.Latency < 0 || e.Decision.Limit != 5 {
			t.Fatalf("event %+v", e)
		}
	}
}

func TestProblemDetailsNeverEchoesKey(t *testing.T) {
	const token = "secret-token-123"
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Limit: 1, RetryAfter: 1500 * time.Millisecond, ResetAfter: 3 * time.Second}, nil
	})
	srv := serve(t, mustMW(t, l, WithHeaderKey("X-Service-Token"), WithProblemDetails(true))(&okHandler{}))
	res := do(t, clientFrom(t, "127.0.0.1"), "GET", srv.URL+"/private/path", map[string]string{"X-Service-Token": token})
	if res.status != 429 || res.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, content type %q", res.status, res.header.Get("Content-Type"))
	}
	var p struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Status     int    `json:"status"`
		Detail     string `json:"detail"`
		RetryAfter int64  `json:"retry_after"`
	}
	if err := json.Unmarshal([]byte(res.body), &p); err != nil {
		t.Fatalf("body %q: %v", res.body, err)
	}
	if p.Status != 429 || p.Title != "Too Many Requests" || p.Type != "about:blank" || p.RetryAfter != 2 {
		t.Fatalf("problem %+v", p)
	}
	if res.header.Get("Retry-After") != "2" {
		t.Fatalf("Retry-After %q, want 2 (1.5 s rounded up)", res.header.Get("Retry-After"))
	}
	for _, leak := range []string{token, "127.0.0.1", "/private/path"} {
		if strings.Contains(res.body, leak) {
			t.Fatalf("body %q leaks %q", res.body, leak)
		}
	}
}

// TestDryRunCountsLikeEnforced runs the same traffic through an enforcing
// and a dry-run middleware: dry-run lets everything through and reports
// exactly the denials enforcement made.
func TestDryRunCountsLikeEnforced(t *testing.T) {
	run := func(dry bool) (status map[int]int, obs *counter, calls int64) {
		l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 4)
		obs = &counter{}
		h := &okHandler{}
		srv := serve(t, mustMW(t, l, WithObserver(obs), WithDryRun(dry))(h))
		status = map[int]int{}
		for i := 0; i < 25; i++ {
			from := "127.0.0.1"
			if i%5 == 0 {
				from = "127.0.0.2"
			}
			res := do(t, clientFrom(t, from), "GET", srv.URL, nil)
			status[res.status]++
			if dry && (res.header.Get("RateLimit") != "" || res.header.Get("X-RateLimit-Remaining") != "") {
				t.Fatalf("dry run sent rate-limit headers: %v", res.header)
			}
		}
		return status, obs, h.calls.Load()
	}
	enforced, eobs, ecalls := run(false)
	dry, dobs, dcalls := run(true)
	denied := enforced[http.StatusTooManyRequests]
	// 127.0.0.1 sends 20 (4 pass), 127.0.0.2 sends 5 (4 pass).
	if denied != 17 || eobs.get(floodgate.OutcomeDenied) != 17 || ecalls != 8 {
		t.Fatalf("enforced: statuses %v, observed %v, calls %d", enforced, eobs.counts, ecalls)
	}
	if dry[http.StatusOK] != 25 || dcalls != 25 {
		t.Fatalf("dry run: statuses %v, calls %d", dry, dcalls)
	}
	if dobs.get(floodgate.OutcomeWouldDeny) != denied || dobs.get(floodgate.OutcomeAllowed) != eobs.get(floodgate.OutcomeAllowed) {
		t.Fatalf("dry run observed %v, enforced %v", dobs.counts, eobs.counts)
	}
}

func TestFailModes(t *testing.T) {
	boom := errors.New("store down")
	failing := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{}, boom
	})
	panicking := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		panic("limiter bug")
	})
	for _, tc := range []struct {
		name    string
		l       floodgate.Limiter
		mode    middleware.FailMode
		dry     bool
		status  int
		outcome floodgate.Outcome
		wantErr error
	}{
		{"error/open", failing, middleware.FailOpen, false, 200, floodgate.OutcomeErrorOpen, boom},
		{"error/closed", failing, middleware.FailClosed, false, 503, floodgate.OutcomeErrorClosed, boom},
		{"panic/open", panicking, middleware.FailOpen, false, 200, floodgate.OutcomeErrorOpen, middleware.ErrLimiterPanic},
		{"panic/closed", panicking, middleware.FailClosed, false, 503, floodgate.OutcomeErrorClosed, middleware.ErrLimiterPanic},
		{"panic/closed/dry-run", panicking, middleware.FailClosed, true, 200, floodgate.OutcomeErrorOpen, middleware.ErrLimiterPanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &counter{}
			h := &okHandler{}
			srv := serve(t, mustMW(t, tc.l, WithFailMode(tc.mode), WithObserver(obs), WithDryRun(tc.dry))(h))
			c := clientFrom(t, "127.0.0.1")
			for i := 0; i < 3; i++ { // the server survives and keeps answering
				res := do(t, c, "GET", srv.URL, nil)
				if res.status != tc.status {
					t.Fatalf("status %d, want %d", res.status, tc.status)
				}
				if tc.status == 503 && (res.header.Get("Retry-After") != "1" || res.header.Get("Cache-Control") != "no-store") {
					t.Fatalf("503 headers %v", res.header)
				}
			}
			if obs.get(tc.outcome) != 3 {
				t.Fatalf("observed %v", obs.counts)
			}
			if !errors.Is(obs.events[0].Err, tc.wantErr) {
				t.Fatalf("event error %v, want %v", obs.events[0].Err, tc.wantErr)
			}
		})
	}
}

func TestHeaderGroups(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 1)
	srv := serve(t, mustMW(t, l, WithHeaders(middleware.HeadersNone))(&okHandler{}))
	c := clientFrom(t, "127.0.0.1")
	for i, want := range []int{200, 429} {
		res := do(t, c, "GET", srv.URL, nil)
		if res.status != want {
			t.Fatalf("request %d: status %d", i, res.status)
		}
		for k := range res.header {
			if strings.Contains(strings.ToLower(k), "ratelimit") {
				t.Fatalf("request %d: header %s sent with middleware.HeadersNone", i, k)
			}
		}
		if want == 429 && (res.header.Get("Retry-After") != "1" || res.header.Get("Cache-Control") != "no-store") {
			t.Fatalf("429 without its contract headers: %v", res.header)
		}
	}

	l = newBucket(t, newTestStore(frozen()), floodgate.PerSecond(1), 1)
	srv = serve(t, mustMW(t, l, WithHeaders(middleware.HeadersDiagnostic|middleware.HeadersLegacy), WithTier("global"),
		WithHeaderKey("X-Service-Token"))(&okHandler{}))
	res := do(t, c, "GET", srv.URL, map[string]string{"X-Service-Token": "svc-a"})
	if res.header.Get("X-RateLimit-Tier") != "global" || res.header.Get("X-RateLimit-Scope") != "header" ||
		res.header.Get("X-RateLimit-Reason") != "" || res.header.Get("RateLimit") != "" || res.header.Get("X-RateLimit-Limit") != "1" {
		t.Fatalf("admitted: %v", res.header)
	}
	res = do(t, c, "GET", srv.URL, nil) // no token: falls back to the IP
	if res.status != 200 || res.header.Get("X-RateLimit-Scope") != "ip" {
		t.Fatalf("fallback: %d %v", res.status, res.header)
	}
	res = do(t, c, "GET", srv.URL, map[string]string{"X-Service-Token": "svc-a"})
	if res.status != 429 || res.header.Get("X-RateLimit-Reason") != "rate_limited" || res.header.Get("X-RateLimit-Scope") != "header" {
		t.Fatalf("refused: %d %v", res.status, res.header)
	}
}

func TestRetryJitter(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Limit: 1, RetryAfter: 2 * time.Second, ResetAfter: 2 * time.Second}, nil
	})
	mw := mustMW(t, l, WithRetryJitter(3*time.Second))
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		w := httptest.NewRecorder()
		mw(&okHandler{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		ra := w.Header().Get("Retry-After")
		n := atoi(t, ra)
		if n < 2 || n > 5 {
			t.Fatalf("Retry-After %d outside [2, 5]", n)
		}
		seen[ra] = true
	}
	if len(seen) < 3 {
		t.Fatalf("jitter produced only %v", seen)
	}
}

func TestCostAndRouteKey(t *testing.T) {
	st := newTestStore(frozen())
	l := newBucket(t, st, floodgate.PerSecond(1), 5)
	search := mustMW(t, l, WithKeyPrefix("/search"), WithCost(func(*http.Request) int { return 2 }))
	home := mustMW(t, l, WithKeyPrefix("/home"))
	mux := http.NewServeMux()
	mux.Handle("/search", search(&okHandler{}))
	mux.Handle("/home", home(&okHandler{}))
	srv := serve(t, mux)
	c := clientFrom(t, "127.0.0.1")
	var got []int
	for i := 0; i < 3; i++ {
		got = append(got, do(t, c, "GET", srv.URL+"/search", nil).status)
	}
	// The /home budget is untouched by /search.
	got = append(got, do(t, c, "GET", srv.URL+"/home", nil).status)
	want := []int{200, 200, 429, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	keys := strings.Join(st.keys(), ",")
	if !strings.Contains(keys, "/search 127.0.0.1") || !strings.Contains(keys, "/home 127.0.0.1") {
		t.Fatalf("keys %q", keys)
	}
}

// refundable is a shaping limiter for the delay tests: it admits with a
// delay and counts refunds.
type refundable struct {
	delay   time.Duration
	refunds int
}

func (r *refundable) Take(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9, Delay: r.delay, ResetAfter: r.delay}, nil
}

func (r *refundable) Refund(context.Context, string, int) error { r.refunds++; return nil }

func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &refundable{delay: 2 * time.Second}
		obs := &counter{}
		h := &okHandler{}
		mw := mustMW(t, lim, WithObserver(obs))(h)

		start := time.Now()
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 || time.Since(start) != 2*time.Second || obs.get(floodgate.OutcomeDelayed) != 1 {
			t.Fatalf("honoured: code %d after %v, observed %v", w.Code, time.Since(start), obs.counts)
		}

		// A delay past the deadline is refused at once, and refunded.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		w = httptest.NewRecorder()
		mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if w.Code != 429 || time.Since(start) != 0 || w.Header().Get("Retry-After") != "2" || lim.refunds != 1 {
			t.Fatalf("deadline: code %d after %v, Retry-After %q, refunds %d", w.Code, time.Since(start), w.Header().Get("Retry-After"), lim.refunds)
		}

		// Cancelled while waiting: refused and refunded.
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		w = httptest.NewRecorder()
		mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if w.Code != 429 || lim.refunds != 2 {
			t.Fatalf("cancelled: code %d, refunds %d", w.Code, lim.refunds)
		}

		refuse := mustMW(t, lim, WithDelayMode(middleware.DelayRefuse))(h)
		w = httptest.NewRecorder()
		refuse.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 429 || lim.refunds != 3 || h.calls.Load() != 1 {
			t.Fatalf("refuse mode: code %d, refunds %d, calls %d", w.Code, lim.refunds, h.calls.Load())
		}

		// Dry run never delays.
		dry := mustMW(t, lim, WithDryRun(true))(h)
		start = time.Now()
		w = httptest.NewRecorder()
		dry.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 || time.Since(start) != 0 {
			t.Fatalf("dry run: code %d after %v", w.Code, time.Since(start))
		}
	})
}

func TestBadOptions(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true}, nil
	})
	bad := map[string]Option{
		"nil option":        nil,
		"nil observer":      WithObserver(nil),
		"header name":       WithHeaderKey("X Bad"),
		"empty header":      WithHeaderKey(""),
		"nil key func":      WithKeyFunc(nil),
		"empty route":       WithKeyPrefix(""),
		"nil cost":          WithCost(nil),
		"bad prefix":        WithTrustedProxies(netip.Prefix{}),
		"v4 bits":           WithIPPrefix(33, 64),
		"v6 bits":           WithIPPrefix(32, 0),
		"header set":        WithHeaders(middleware.HeaderSet(0x80)),
		"envoy's headers":   WithHeaders(middleware.HeadersIETF | middleware.HeadersReference),
		"policy name":       WithPolicy(floodgate.Description{Name: "a\nb"}),
		"policy quota":      WithPolicy(floodgate.Description{Quota: -1}),
		"policy capacity":   WithPolicy(floodgate.Description{Capacity: 5}),
		"jitter":            WithRetryJitter(-time.Second),
		"fail mode":         WithFailMode(middleware.FailMode(9)),
		"envoy's fail mode": WithFailMode(middleware.FailError),
		"delay mode":        WithDelayMode(middleware.DelayMode(9)),
		"tier":              WithTier("é"),
	}
	for name, o := range bad {
		if _, err := Middleware(l, o); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: Middleware error %v, want ErrInvalidConfig", name, err)
		}
	}
	acq := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { return nil, true, nil })
	for name, o := range map[string]ShedOption{
		"nil option":   nil,
		"nil observer": WithObserver(nil),
		"header set":   WithHeaders(middleware.HeaderSet(0x80)),
		"jitter":       WithRetryJitter(-time.Second),
		"fail mode":    WithFailMode(middleware.FailMode(9)),
		"tier":         WithTier("é"),
		"shed retry":   WithShedRetryAfter(0),
	} {
		if _, err := Shed(acq, o); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: Shed error %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := Middleware(nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("nil limiter: %v", err)
	}
	if _, err := Shed(nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("nil acquirer: %v", err)
	}
	for name, o := range map[string]TransportOption{
		"nil":      nil,
		"waiter":   WithThrottle(nil),
		"limiter":  WithThrottleLimiter(nil, nil),
		"attempts": WithMaxAttempts(0),
		"backoff":  WithBackoff(time.Second, time.Millisecond),
		"max wait": WithMaxRetryWait(0),
	} {
		if _, err := NewTransport(nil, o); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("transport %s: %v", name, err)
		}
	}
}

func TestPolicyStaticQuotaAndEscaping(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Limit: 100, Remaining: 120, ResetAfter: time.Millisecond}, nil
	})
	mw := mustMW(t, l, WithPolicy(floodgate.Description{Name: `a"b\c`, Quota: 100, Window: 90 * time.Second}))
	w := httptest.NewRecorder()
	mw(&okHandler{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	pol := parseRL(t, w.Header(), "RateLimit-Policy")
	cur := parseRL(t, w.Header(), "RateLimit")
	if pol[0].name != `a"b\c` || pol[0].q != 100 || pol[0].w != 90 || cur[0].r != 100 || cur[0].t != 1 {
		t.Fatalf("policy %+v, current %+v (remaining must be clamped to the limit)", pol, cur)
	}
}

// TestStackedMiddlewares: a per-IP limit around a tighter per-route limit.
// RateLimit lists both policies, or on a refusal only the refusing inner
// one's; the legacy fields describe the tighter.
func TestStackedMiddlewares(t *testing.T) {
	outer := mustMW(t, newMemBucket(t, frozen(), floodgate.PerSecond(10), 20), WithPolicy(floodgate.Description{Name: "per-ip"}))
	inner := mustMW(t, newMemBucket(t, frozen(), floodgate.PerMinute(1), 2), WithPolicy(floodgate.Description{Name: "search"}), WithKeyPrefix("/search"))
	srv := serve(t, outer(inner(&okHandler{})))
	c := clientFrom(t, "127.0.0.1")
	for i, want := range []int{200, 200, 429} {
		res := do(t, c, "GET", srv.URL, nil)
		if res.status != want {
			t.Fatalf("request %d: %d", i, res.status)
		}
		cur := parseRL(t, res.header, "RateLimit")
		pol := parseRL(t, res.header, "RateLimit-Policy")
		if want == 429 {
			cur = append([]rl{{name: "per-ip"}}, cur...) // the outer member is dropped
		}
		if len(cur) != 2 || cur[0].name != "per-ip" || cur[1].name != "search" || len(pol) != 2 || pol[1].q != 2 || pol[1].w != 120 {
			t.Fatalf("request %d: RateLimit %+v, policy %+v", i, cur, pol)
		}
		if got := atoi(t, res.header.Get("X-RateLimit-Remaining")); got != cur[1].r || res.header.Get("X-RateLimit-Limit") != "2" {
			t.Fatalf("request %d: legacy remaining %d, want the tighter policy's %d", i, got, cur[1].r)
		}
		if want == 429 && atoi(t, res.header.Get("Retry-After")) < cur[1].t {
			t.Fatalf("Retry-After %s < t %d", res.header.Get("Retry-After"), cur[1].t)
		}
	}
}

// TestDenialWithoutRetryAfter: a limiter breaking the Decision contract
// (denied, RetryAfter 0) still gets a Retry-After that covers t.
func TestDenialWithoutRetryAfter(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Limit: 3, ResetAfter: 4500 * time.Millisecond}, nil
	})
	w := httptest.NewRecorder()
	mustMW(t, l)(&okHandler{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	cur := parseRL(t, w.Header(), "RateLimit")
	if w.Code != 429 || w.Header().Get("Retry-After") != "5" || cur[0].t != 5 || cur[0].r != 0 {
		t.Fatalf("code %d, Retry-After %q, RateLimit %+v", w.Code, w.Header().Get("Retry-After"), cur)
	}
}

// FuzzHeaders: whatever the Decision and the policy, the fields written
// parse strictly and say what the Decision says (clamped to what a
// structured-field Integer can hold).
func FuzzHeaders(f *testing.F) {
	f.Add("default", int64(10), int64(5), int64(time.Second), int64(0), int64(0), false)
	f.Add(`we"ird\name`, int64(-1), int64(1<<62), int64(-5), int64(1<<62), int64(90*time.Second), true)
	f.Fuzz(func(t *testing.T, name string, limit, remaining, reset, retry, window int64, denied bool) {
		mw, err := Middleware(floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
			d := floodgate.Decision{Allowed: !denied, Limit: limit, Remaining: remaining, ResetAfter: time.Duration(reset)}
			if denied {
				d.RetryAfter = time.Duration(retry)
			}
			return d, nil
		}), WithPolicy(floodgate.Description{Name: name, Window: time.Duration(max(window, 0))}), WithRetryJitter(time.Duration(max(window, 0))))
		if err != nil {
			if !printable(name) {
				return
			}
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		mw(&okHandler{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		pol := parseRL(t, w.Header(), "RateLimit-Policy")
		cur := parseRL(t, w.Header(), "RateLimit")
		wantName := name
		if wantName == "" {
			wantName = "default"
		}
		if pol[0].name != wantName || cur[0].name != wantName {
			t.Fatalf("names %q %q, want %q", pol[0].name, cur[0].name, wantName)
		}
		if lim := atoi(t, w.Header().Get("X-RateLimit-Limit")); lim != pol[0].q || lim != clampSF(limit) {
			t.Fatalf("limit %d, q %d, input %d", lim, pol[0].q, limit)
		}
		if rem := atoi(t, w.Header().Get("X-RateLimit-Remaining")); rem != cur[0].r || rem > pol[0].q {
			t.Fatalf("remaining %d, r %d, q %d", rem, cur[0].r, pol[0].q)
		}
		atoi(t, w.Header().Get("X-RateLimit-Reset"))
		if denied {
			ra := atoi(t, w.Header().Get("Retry-After"))
			if w.Code != 429 || ra < 1 || ra < cur[0].t {
				t.Fatalf("code %d, Retry-After %d, t %d", w.Code, ra, cur[0].t)
			}
		}
	})
}

// TestLeakyBucketDelays runs the nginx-style leaky bucket (rate 1/s, burst
// 3, delaying) behind the middleware: five simultaneous requests are served
// at 0, 1, 2 and 3 s and the fifth is refused; in middleware.DelayRefuse mode only the
// undelayed one passes, and the refused ones are refunded.
func TestLeakyBucketDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(time.Now)), memstore.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerSecond(1), Burst: 3})
		if err != nil {
			t.Fatal(err)
		}
		obs := &counter{}
		start := time.Now()
		var mu sync.Mutex
		var served []time.Duration
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			served = append(served, time.Since(start))
			mu.Unlock()
		})
		mw := mustMW(t, l, WithObserver(obs))(h)
		codes := make(chan int, 5)
		for range 5 {
			go func() {
				w := httptest.NewRecorder()
				mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				codes <- w.Code
			}()
		}
		synctest.Wait()
		time.Sleep(10 * time.Second)
		got := map[int]int{}
		for range 5 {
			got[<-codes]++
		}
		slices.Sort(served)
		if got[200] != 4 || got[429] != 1 || !slices.Equal(served, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}) {
			t.Fatalf("codes %v, served at %v", got, served)
		}
		if obs.get(floodgate.OutcomeDelayed) != 3 || obs.get(floodgate.OutcomeAllowed) != 1 || obs.get(floodgate.OutcomeDenied) != 1 {
			t.Fatalf("observed %v", obs.counts)
		}

		// Idle again, then refuse delays: only the first passes, and since
		// refused requests are refunded, each of the others sees the same
		// 1 s delay and is told to retry in 1 s.
		time.Sleep(time.Minute)
		refuse := mustMW(t, l, WithDelayMode(middleware.DelayRefuse))(h)
		for i := range 4 {
			w := httptest.NewRecorder()
			refuse.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if want := []int{200, 429, 429, 429}[i]; w.Code != want || (want == 429 && w.Header().Get("Retry-After") != "1") {
				t.Fatalf("request %d: %d, Retry-After %q", i, w.Code, w.Header().Get("Retry-After"))
			}
		}
	})
}

// TestCostBeyondBurstIsRefused: a request costing more than the burst can
// never pass; even with fail-open it is refused, not exempted, and without
// a Retry-After: no retry could succeed.
func TestCostBeyondBurstIsRefused(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 5)
	obs := &counter{}
	cost := func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("cost"))
		return n
	}
	h := &okHandler{}
	mw := mustMW(t, l, WithCost(cost), WithObserver(obs), WithHeaders(middleware.HeadersDiagnostic))(h)
	for _, q := range []string{"6", "0", "-3", "1000000"} {
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, httptest.NewRequest("GET", "/?cost="+q, nil))
		if w.Code != 429 || w.Header().Get("X-RateLimit-Reason") != "cost_exceeds_limit" || w.Header()["Retry-After"] != nil ||
			!strings.Contains(w.Body.String(), "retrying will not help") {
			t.Fatalf("cost %s: %d %v %q", q, w.Code, w.Header(), w.Body.String())
		}
	}
	w := httptest.NewRecorder()
	mw.ServeHTTP(w, httptest.NewRequest("GET", "/?cost=5", nil))
	if w.Code != 200 || h.calls.Load() != 1 || obs.get(floodgate.OutcomeDenied) != 4 || !errors.Is(obs.events[0].Err, floodgate.ErrInvalidCost) {
		t.Fatalf("cost 5: %d, calls %d, observed %v", w.Code, h.calls.Load(), obs.counts)
	}
	dry := mustMW(t, l, WithCost(cost), WithObserver(obs), WithDryRun(true))(h)
	w = httptest.NewRecorder()
	dry.ServeHTTP(w, httptest.NewRequest("GET", "/?cost=9", nil))
	if w.Code != 200 || obs.get(floodgate.OutcomeWouldDeny) != 1 {
		t.Fatalf("dry run: %d, observed %v", w.Code, obs.counts)
	}
}

func TestInvalidKeyIsRefused(t *testing.T) {
	l := floodgate.LimiterFunc(func(_ context.Context, key string, _ int) (floodgate.Decision, error) {
		if strings.HasPrefix(key, "bad") {
			return floodgate.Decision{}, fmt.Errorf("%w: %q", floodgate.ErrInvalidKey, key)
		}
		return floodgate.Decision{Allowed: true, Limit: 1, Remaining: 1}, nil
	})
	mw := mustMW(t, l, WithKeyFunc(func(r *http.Request) string { return r.Header.Get("K") }),
		WithHeaders(middleware.HeadersDiagnostic), WithFailMode(middleware.FailOpen))(&okHandler{})
	for k, want := range map[string]int{"bad-key": 429, "good": 200} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("K", k)
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		if w.Code != want || (want == 429 && w.Header().Get("X-RateLimit-Reason") != "invalid_key") {
			t.Fatalf("key %q: %d %v", k, w.Code, w.Header())
		}
	}
}
