package httplimit

import (
	"context"
	"errors"
	"github.com/floodgate-go/floodgate/middleware"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

func TestTypedNilIsRefused(t *testing.T) {
	var nilLimiter *store.Limiter
	if _, err := Middleware(nilLimiter); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("typed-nil limiter: %v", err)
	}
	l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 1)
	if _, err := Middleware(l, WithLimit(nilLimiter, nil)); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("typed-nil extra limit: %v", err)
	}
	var nilObs *counter
	if _, err := Middleware(l, WithObserver(nilObs)); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("typed-nil observer: %v", err)
	}
	var nilAcq middleware.AcquirerFunc
	if _, err := Shed(nilAcq); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("nil acquirer func: %v", err)
	}
}

// Every duration option is range-checked at construction; the request path
// never panics on an extreme value (WithRetryJitter(math.MaxInt64) used to
// overflow rand.Int64N in the refusal).
func TestDurationOptionsAreRangeChecked(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 1)
	for _, o := range []Option{WithRetryJitter(math.MaxInt64), WithRetryJitter(-1), WithRetryJitter(maxJitter + 1)} {
		if _, err := Middleware(l, o); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Fatalf("jitter accepted: %v", err)
		}
	}
	acq := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { return nil, false, nil })
	for _, d := range []time.Duration{0, -1, math.MaxInt64} {
		if _, err := Shed(acq, WithShedRetryAfter(d)); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Fatalf("shed retry %v accepted: %v", d, err)
		}
	}
	mw := mustMW(t, l, WithRetryJitter(maxJitter))
	for range 3 {
		w := httptest.NewRecorder()
		mw(&okHandler{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code == 429 {
			if s, _ := strconv.Atoi(w.Header().Get("Retry-After")); s < 1 || s > int(maxJitter/time.Second)+2 {
				t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
			}
		}
	}
}

func FuzzDurationOptions(f *testing.F) {
	f.Add(int64(0), int64(time.Second))
	f.Add(int64(math.MaxInt64), int64(math.MinInt64))
	f.Add(int64(-1), int64(0))
	acq := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { return nil, false, nil })
	f.Fuzz(func(t *testing.T, jitter, shed int64) {
		l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 1)
		mw, err := Middleware(l, WithRetryJitter(time.Duration(jitter)))
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		} else {
			for range 2 {
				mw(&okHandler{}).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}
		}
		s, err := Shed(acq, WithShedRetryAfter(time.Duration(shed)), WithRetryJitter(time.Duration(jitter)))
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		w := httptest.NewRecorder()
		s(&okHandler{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Fatalf("shed: %d %v", w.Code, w.Header())
		}
	})
}

// Several policies in one middleware are all or nothing: per IP AND per
// API key, where a refusal by the key's budget charges nothing to the IP's.
func TestSeveralLimitsAreAllOrNothing(t *testing.T) {
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	perIP, err := bucket.NewKeyed(s, bucket.Config{Name: "per-ip", Rate: floodgate.PerMinute(1), Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	perKey, err := bucket.NewKeyed(s, bucket.Config{Name: "per-key", Rate: floodgate.PerMinute(1), Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	apiKey := func(r *http.Request) string { return "key " + r.URL.Query().Get("k") }
	srv := serve(t, mustMW(t, perIP, WithLimit(perKey, apiKey))(&okHandler{}))
	c := clientFrom(t, "127.0.0.1")
	admitted := 0
	for i := range 12 {
		res := do(t, c, "GET", srv.URL+"/?k=a", nil)
		if res.status == 200 {
			admitted++
		}
		cur := parseRL(t, res.header, "RateLimit")
		pol := parseRL(t, res.header, "RateLimit-Policy")
		// A refusal's RateLimit holds only the refusing limit's member.
		admittedOK := res.status == 200 && len(cur) == 2 && cur[0].name == "per-ip" && cur[1].name == "per-key"
		refusedOK := res.status == 429 && len(cur) == 1 && cur[0].name == "per-key"
		if !(admittedOK || refusedOK) || len(pol) != 2 {
			t.Fatalf("request %d: RateLimit %+v, policy %+v", i, cur, pol)
		}
	}
	if admitted != 3 {
		t.Fatalf("key a admitted %d, want its burst 3", admitted)
	}
	d, err := perIP.Peek(context.Background(), "127.0.0.1")
	if err != nil || d.Remaining != 7 {
		t.Fatalf("the IP budget was charged for refusals: remaining %d (%v), want 7", d.Remaining, err)
	}
	for range 7 {
		if res := do(t, c, "GET", srv.URL+"/?k=other"+strconv.Itoa(admitted), nil); res.status == 200 {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d, want the IP's burst 10", admitted)
	}
}

// Two middlewares built from one Config on one store keep apart states:
// stacked, they admit the burst, not half of it.
func TestStackedTwinsDoNotShareState(t *testing.T) {
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cfg := bucket.Config{Rate: floodgate.PerMinute(1), Burst: 10}
	a, err := bucket.NewKeyed(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bucket.NewKeyed(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &okHandler{}
	srv := serve(t, mustMW(t, a)(mustMW(t, b)(h)))
	c := clientFrom(t, "127.0.0.1")
	for range 10 {
		do(t, c, "GET", srv.URL, nil)
	}
	if h.calls.Load() != 10 {
		t.Fatalf("admitted %d of 10", h.calls.Load())
	}
}

// With middleware.DelayRefuse, the headers count only what passes without a delay: a
// leaky bucket that delays every excess request says Remaining 0 and the
// next request is indeed refused.
func TestDelayRefuseHeadersTellTheTruth(t *testing.T) {
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, tc := range []struct {
		cfg  leaky.Config
		pass int
	}{
		{leaky.Config{Name: "shape", Rate: floodgate.PerSecond(1), Burst: 5}, 1},
		{leaky.Config{Name: "part", Rate: floodgate.PerSecond(1), Burst: 5, Delay: 2}, 3},
	} {
		l, err := leaky.NewKeyed(s, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		mw := mustMW(t, l, WithDelayMode(middleware.DelayRefuse))(&okHandler{})
		for i := 0; ; i++ {
			w := httptest.NewRecorder()
			mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			rem := atoi(t, w.Header().Get("X-RateLimit-Remaining"))
			if i < tc.pass {
				if w.Code != 200 || rem != int64(tc.pass-1-i) {
					t.Fatalf("%s request %d: %d, remaining %d, want %d", tc.cfg.Name, i, w.Code, rem, tc.pass-1-i)
				}
				continue
			}
			if w.Code != 429 || rem != 0 {
				t.Fatalf("%s request %d: %d remaining %d, want a refusal", tc.cfg.Name, i, w.Code, rem)
			}
			break
		}
	}
}

// One event per request, with its true outcome: a store's fallback decision
// is reported as a fallback, not as allowed.
func TestFallbackIsReportedAsFallback(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Fallback: true, Limit: 5, Remaining: 4}, nil
	})
	obs := &counter{}
	mw := mustMW(t, l, WithObserver(obs), WithName("api"))(&okHandler{})
	w := httptest.NewRecorder()
	mw.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 200 || len(obs.events) != 1 || obs.events[0].Outcome != floodgate.OutcomeFallback ||
		obs.events[0].Source != floodgate.SourceRequest || obs.events[0].Policy != "api" {
		t.Fatalf("code %d, events %+v", w.Code, obs.events)
	}
}

// redisAddr returns the Redis the tests use (see redistest.Addr).
func redisAddr(t *testing.T) string { return redistest.Addr(t) }

// A credential used as a key never reaches the store in clear: scan a real
// Redis for it.
func TestCredentialsNeverReachTheStore(t *testing.T) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	prefix := "fg-cred-test-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	// A generous timeout: a decision that times out fails open, which would
	// read as a budget not enforced on a loaded machine.
	rs, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := bucket.NewKeyed(rs, bucket.Config{Name: "per-token", Rate: floodgate.PerMinute(1), Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	secretKey := []byte("0123456789abcdef0123456789abcdef")
	if _, err := Middleware(l, WithHeaderKey("X-Service-Token")); !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithKeySecret") {
		t.Fatalf("a header key on Redis without the fleet's secret: %v", err)
	}
	srv := serve(t, mustMW(t, l, WithHeaderKey("X-Service-Token"), WithKeySecret(secretKey))(&okHandler{}))
	c := clientFrom(t, "127.0.0.1")
	statuses := map[int]int{}
	for range 3 {
		statuses[do(t, c, "GET", srv.URL, map[string]string{"X-Service-Token": secret}).status]++
	}
	if statuses[200] != 2 || statuses[429] != 1 {
		t.Fatalf("statuses %v: the token's budget is not enforced", statuses)
	}
	keys, err := client.Do(context.Background(), client.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no key written: the scan proves nothing")
	}
	for _, k := range keys {
		if strings.Contains(k, secret) || strings.Contains(k, "sk_live") || strings.Contains(k, "4eC39HqLyjWDarjt") {
			t.Fatalf("credential in clear in Redis key %q", k)
		}
	}
	// The same secret on another node gives the same key (a fleet shares
	// the budget); another secret gives another.
	c1, _ := buildConfig([]Option{WithHeaderKey("Authorization"), WithKeySecret(secretKey)}, Option.applyMiddleware)
	c2, _ := buildConfig([]Option{WithHeaderKey("Authorization"), WithKeySecret(secretKey)}, Option.applyMiddleware)
	c3, _ := buildConfig([]Option{WithHeaderKey("Authorization")}, Option.applyMiddleware)
	if c1.credentialKey(secret) != c2.credentialKey(secret) || c1.credentialKey(secret) == c3.credentialKey(secret) {
		t.Fatal("keyed hash does not depend on the secret alone")
	}
}

// With middleware.DelayRefuse, a request that would be delayed is refused without
// being charged: the leaky bucket's state stays exactly what the admitted
// requests alone made it (take-then-refund would move it).
func TestDelayRefuseChargesNothing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(clock)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cfg := leaky.Config{Name: "shape", Rate: floodgate.PerMinute(30), Burst: 5}
	l, err := leaky.NewKeyed(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "twin"
	twin, err := leaky.NewKeyed(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mw := mustMW(t, l, WithDelayMode(middleware.DelayRefuse))(&okHandler{})
	ctx := context.Background()
	refused := 0
	for i := range 400 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		mw.ServeHTTP(w, r)
		if w.Code == 200 {
			if d, err := twin.Take(ctx, "192.0.2.1", 1); err != nil || !d.Allowed {
				t.Fatalf("request %d: the twin refused an admitted request: %+v %v", i, d, err)
			}
		} else {
			refused++
		}
		got, _ := l.Peek(ctx, "192.0.2.1")
		want, _ := twin.Peek(ctx, "192.0.2.1")
		if got != want {
			t.Fatalf("request %d: state %+v, the twin's %+v", i, got, want)
		}
		now = now.Add(7 * time.Millisecond)
	}
	if refused < 100 {
		t.Fatalf("only %d refusals: the test proves nothing", refused)
	}
}

// Two key options are refused: only one could count.
func TestTwoKeyOptionsAreRefused(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerSecond(1), 1)
	if _, err := Middleware(l, WithHeaderKey("X-A"), WithKeyFunc(func(*http.Request) string { return "k" })); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("two key options: %v", err)
	}
}
