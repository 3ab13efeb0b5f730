package httplimit

import (
	"context"
	"errors"
	"github.com/floodgate-go/floodgate/middleware"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
)

// TestTransportHonoursRetryAfterOverRealServer is the one test that sleeps
// for real: the client's Transport against a server limited by this
// package's middleware to one request per second.
func TestTransportHonoursRetryAfterOverRealServer(t *testing.T) {
	var hits atomic.Int64
	// The server's clock moves one second when the retry arrives, so that
	// the decisions do not depend on how busy the machine is; the client's
	// wait is real.
	t0 := time.Unix(1_800_000_000, 0)
	clock := func() time.Time {
		if hits.Load() >= 3 {
			return t0.Add(time.Second)
		}
		return t0
	}
	limited := mustMW(t, newMemBucket(t, clock, floodgate.PerSecond(1), 1))(&okHandler{})
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		limited.ServeHTTP(w, r)
	}))
	tr, err := NewTransport(clientFrom(t, "127.0.0.1").Transport, WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	get := func() (*http.Response, string) {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	if resp, _ := get(); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	start := time.Now()
	resp, body := get() // refused with Retry-After: 1, then retried
	if elapsed := time.Since(start); resp.StatusCode != 200 || body != "ok" || elapsed < time.Second || hits.Load() != 3 {
		t.Fatalf("status %d body %q after %v, %d hits", resp.StatusCode, body, elapsed, hits.Load())
	}

	// A POST is not retried: the caller gets the 429 and its headers.
	resp, err = c.Post(srv.URL, "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || hits.Load() != 4 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("POST: status %d, %d hits, Retry-After %q", resp.StatusCode, hits.Load(), resp.Header.Get("Retry-After"))
	}
}

// fakeServer is an in-memory RoundTripper answering from a script.
type fakeServer struct {
	mu     sync.Mutex
	calls  []time.Time
	bodies []string
	answer func(n int, req *http.Request) *http.Response
}

func (f *fakeServer) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.calls = append(f.calls, time.Now())
	n := len(f.calls)
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body.Close()
		f.bodies = append(f.bodies, string(b))
	}
	f.mu.Unlock()
	return f.answer(n, req), nil
}

func reply(status int, hdr ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("x"))}
}

// refuseFirst answers the first call with status and headers, then 200.
func refuseFirst(status int, hdr ...string) func(int, *http.Request) *http.Response {
	return func(n int, _ *http.Request) *http.Response {
		if n == 1 {
			return reply(status, hdr...)
		}
		return reply(200)
	}
}

func roundTrip(t *testing.T, tr http.RoundTripper, ctx context.Context, method, body string, hdr ...string) (*http.Response, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://api.example/x", rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return tr.RoundTrip(req)
}

func TestTransportRetryHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  func(now time.Time) []string
		want time.Duration
	}{
		{"delta-seconds", func(time.Time) []string { return []string{"Retry-After", "2"} }, 2 * time.Second},
		{"http-date", func(now time.Time) []string {
			return []string{"Retry-After", now.Add(3 * time.Second).UTC().Format(http.TimeFormat)}
		}, 3 * time.Second},
		{"ratelimit t", func(time.Time) []string {
			return []string{"RateLimit", `"burst";r=0;t=5, "daily";r=10;t=9000`}
		}, 5 * time.Second},
		{"longest hint wins", func(time.Time) []string {
			return []string{"Retry-After", "4", "RateLimit", `"a";r=0;t=1`}
		}, 4 * time.Second},
		{"malformed hints ignored", func(time.Time) []string {
			return []string{"Retry-After", "soon", "RateLimit", `"a";r=0;t=1,`}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{answer: refuseFirst(429, tc.hdr(time.Now())...)}
				tr, _ := NewTransport(f, WithBackoff(time.Millisecond, time.Millisecond))
				resp, err := roundTrip(t, tr, context.Background(), "GET", "")
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%v %v", resp, err)
				}
				gap := f.calls[1].Sub(f.calls[0])
				if gap < tc.want || gap > tc.want+time.Millisecond {
					t.Fatalf("waited %v, want %v (+ at most 1 ms of jitter)", gap, tc.want)
				}
			})
		})
	}
}

func TestTransportBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Bounded attempts: the last refusal is handed back.
		f := &fakeServer{answer: func(int, *http.Request) *http.Response { return reply(503) }}
		tr, _ := NewTransport(f, WithMaxAttempts(4), WithBackoff(100*time.Millisecond, 300*time.Millisecond))
		start := time.Now()
		resp, err := roundTrip(t, tr, context.Background(), "GET", "")
		if err != nil || resp.StatusCode != 503 || len(f.calls) != 4 || time.Since(start) > 600*time.Millisecond {
			t.Fatalf("%v %v, %d calls in %v", resp, err, len(f.calls), time.Since(start))
		}

		// The wait would pass the deadline: no sleep, the 429 comes back.
		f = &fakeServer{answer: refuseFirst(429, "Retry-After", "5")}
		tr, _ = NewTransport(f)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start = time.Now()
		resp, err = roundTrip(t, tr, ctx, "GET", "")
		cancel()
		if err != nil || resp.StatusCode != 429 || len(f.calls) != 1 || time.Since(start) != 0 {
			t.Fatalf("deadline: %v %v, %d calls, %v", resp, err, len(f.calls), time.Since(start))
		}

		// The server asks for more than the transport accepts.
		f = &fakeServer{answer: refuseFirst(429, "Retry-After", "3600")}
		tr, _ = NewTransport(f, WithMaxRetryWait(time.Minute))
		resp, err = roundTrip(t, tr, context.Background(), "GET", "")
		if err != nil || resp.StatusCode != 429 || len(f.calls) != 1 {
			t.Fatalf("max wait: %v %v, %d calls", resp, err, len(f.calls))
		}

		// Cancelled while waiting.
		f = &fakeServer{answer: refuseFirst(429, "Retry-After", "10")}
		tr, _ = NewTransport(f)
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		_, err = roundTrip(t, tr, ctx, "GET", "")
		if !errors.Is(err, context.Canceled) || len(f.calls) != 1 {
			t.Fatalf("cancel: %v, %d calls", err, len(f.calls))
		}

		// Other statuses are not retried.
		f = &fakeServer{answer: refuseFirst(500)}
		tr, _ = NewTransport(f)
		resp, _ = roundTrip(t, tr, context.Background(), "GET", "")
		if resp.StatusCode != 500 || len(f.calls) != 1 {
			t.Fatalf("500 retried: %d calls", len(f.calls))
		}
	})
}

func TestTransportReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// PUT with a replayable body: the same body is sent again.
		f := &fakeServer{answer: refuseFirst(503)}
		tr, _ := NewTransport(f, WithBackoff(time.Millisecond, time.Millisecond))
		resp, err := roundTrip(t, tr, context.Background(), "PUT", "v1")
		if err != nil || resp.StatusCode != 200 || len(f.bodies) != 2 || f.bodies[0] != "v1" || f.bodies[1] != "v1" {
			t.Fatalf("PUT: %v %v, bodies %q", resp, err, f.bodies)
		}
		// POST: not retried, unless it carries an Idempotency-Key.
		f = &fakeServer{answer: refuseFirst(429)}
		tr, _ = NewTransport(f, WithBackoff(time.Millisecond, time.Millisecond))
		if resp, _ := roundTrip(t, tr, context.Background(), "POST", "p"); resp.StatusCode != 429 || len(f.calls) != 1 {
			t.Fatalf("POST retried: %d calls", len(f.calls))
		}
		f = &fakeServer{answer: refuseFirst(429)}
		tr, _ = NewTransport(f, WithBackoff(time.Millisecond, time.Millisecond))
		if resp, _ := roundTrip(t, tr, context.Background(), "POST", "p", "Idempotency-Key", "k1"); resp.StatusCode != 200 || len(f.calls) != 2 {
			t.Fatalf("POST with Idempotency-Key: %d calls", len(f.calls))
		}
		// A body that cannot be replayed (no GetBody) is not retried.
		f = &fakeServer{answer: refuseFirst(429)}
		tr, _ = NewTransport(f)
		req, _ := http.NewRequest("PUT", "http://api.example/x", io.NopCloser(strings.NewReader("once")))
		req.GetBody = nil
		if resp, _ := tr.RoundTrip(req); resp.StatusCode != 429 || len(f.calls) != 1 {
			t.Fatalf("one-shot body retried: %d calls", len(f.calls))
		}
	})
}

type countingWaiter struct {
	n   int
	err error
}

func (w *countingWaiter) WaitN(_ context.Context, n int) error { w.n += n; return w.err }

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestTransportThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &countingWaiter{}
		f := &fakeServer{answer: refuseFirst(429)}
		tr, _ := NewTransport(f, WithThrottle(w), WithBackoff(time.Millisecond, time.Millisecond))
		if resp, err := roundTrip(t, tr, context.Background(), "GET", ""); err != nil || resp.StatusCode != 200 || w.n != 2 {
			t.Fatalf("waiter called %d times: %v %v", w.n, resp, err)
		}

		w = &countingWaiter{err: floodgate.ErrWouldExceedDeadline}
		f = &fakeServer{answer: refuseFirst(200)}
		tr, _ = NewTransport(f, WithThrottle(w))
		body := &closeTracker{Reader: strings.NewReader("b")}
		req, _ := http.NewRequest("PUT", "http://api.example/x", body)
		if _, err := tr.RoundTrip(req); !errors.Is(err, floodgate.ErrWouldExceedDeadline) || len(f.calls) != 0 || !body.closed {
			t.Fatalf("waiter error: %v, %d calls, body closed %v", err, len(f.calls), body.closed)
		}

		// A keyed limiter: 2 per second per host.
		l := newBucket(t, newTestStore(time.Now), floodgate.PerSecond(2), 1)
		f = &fakeServer{answer: func(int, *http.Request) *http.Response { return reply(200) }}
		tr, _ = NewTransport(f, WithThrottleLimiter(l, nil))
		start := time.Now()
		for i := 0; i < 5; i++ {
			if _, err := roundTrip(t, tr, context.Background(), "GET", ""); err != nil {
				t.Fatal(err)
			}
		}
		if elapsed := time.Since(start); elapsed != 2*time.Second {
			t.Fatalf("5 requests at 2/s (burst 1) took %v, want 2s", elapsed)
		}
	})
}

func TestBackoffIsCappedFullJitter(t *testing.T) {
	tr, _ := NewTransport(nil, WithBackoff(100*time.Millisecond, time.Second))
	resp := reply(503)
	for attempt := 1; attempt <= 8; attempt++ {
		bound := min(time.Second, 100*time.Millisecond<<(attempt-1))
		var top time.Duration
		for i := 0; i < 500; i++ {
			d, ok := tr.retryWait(resp, attempt)
			if !ok || d < 0 || d > bound {
				t.Fatalf("attempt %d: wait %v outside [0, %v]", attempt, d, bound)
			}
			top = max(top, d)
		}
		if top < bound*8/10 {
			t.Fatalf("attempt %d: largest of 500 waits %v, want near %v (full jitter)", attempt, top, bound)
		}
	}
	if d, _ := tr.retryWait(resp, 1000); d > time.Second {
		t.Fatalf("huge attempt number: %v", d)
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"0":                             0,
		"7":                             7 * time.Second,
		" 7 ":                           7 * time.Second,
		"-3":                            0,
		"1.5":                           0,
		"99999999999999999999":          0,
		"Fri, 02 Jan 2026 03:04:15 GMT": 10 * time.Second,
		"Fri, 02 Jan 2026 03:00:00 GMT": 0,
		"tomorrow":                      0,
	} {
		if got := retryAfter(http.Header{"Retry-After": {v}}, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
}

// The keyless token bucket is a middleware.Waiter.
var _ middleware.Waiter = (*bucket.Limiter)(nil)

// TestTransportWithKeylessBucket: two requests fit the burst; the third
// would have to wait past its deadline and fails at once, before the
// network.
func TestTransportWithKeylessBucket(t *testing.T) {
	f := &fakeServer{answer: func(int, *http.Request) *http.Response { return reply(200) }}
	tr, err := NewTransport(f, WithThrottle(bucket.NewLimiter(bucket.Limit(1), 2)))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := roundTrip(t, tr, context.Background(), "GET", ""); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// ErrWouldExceedDeadline (not a plain DeadlineExceeded) shows the
	// transport did not sleep into the deadline.
	_, err = roundTrip(t, tr, ctx, "GET", "")
	if !errors.Is(err, floodgate.ErrWouldExceedDeadline) || len(f.calls) != 2 {
		t.Fatalf("third request: %v, %d calls", err, len(f.calls))
	}
}
