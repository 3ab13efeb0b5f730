package httplimit

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/middleware"
)

// Transport is an [http.RoundTripper] for the calling side: it throttles
// outgoing requests with a local limiter before they reach the network, and
// retries requests the server refused with 429 or 503.
//
// A retry waits for the longest of: the response's Retry-After
// (delta-seconds or HTTP-date), the largest t of the exhausted (r=0)
// members of its RateLimit field, and a capped exponential backoff with full
// jitter (uniform in [0, min(cap, base x 2^(attempt-1))]). It retries only
// requests that are safe to send twice: idempotent methods (GET, HEAD,
// OPTIONS, TRACE, PUT, DELETE) or requests carrying an Idempotency-Key
// header, and only when their body can be replayed (no body, or GetBody
// set). It gives the last response back to the caller, unchanged, when the
// attempts are spent, when the server asks for a longer wait than the
// transport's maximum, or when the wait would end past the request
// context's deadline: it never sleeps into a deadline.
//
// Create it with [NewTransport]. It is safe for concurrent use.
type Transport struct {
	base        http.RoundTripper
	waiter      middleware.Waiter
	limiter     floodgate.Limiter
	key         func(*http.Request) string
	maxAttempts int
	baseDelay   time.Duration
	capDelay    time.Duration
	maxWait     time.Duration
}

// NewTransport returns a Transport sending requests through base
// (http.DefaultTransport when nil). Without options it does not throttle and
// makes at most 3 attempts, with a backoff from 100 ms capped at 10 s, and
// honours server waits up to 30 s. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when an option is invalid.
func NewTransport(base http.RoundTripper, opts ...TransportOption) (*Transport, error) {
	if nilcheck.Is(base) {
		base = http.DefaultTransport
	}
	c, err := buildConfig(opts, TransportOption.applyTransport)
	if err != nil {
		return nil, err
	}
	t := c.transport
	t.base = base
	return &t, nil
}

// WithThrottle throttles every attempt (retries included) through w (one
// unit each; a keyless bucket.Limiter is one) before it is sent. It applies to NewTransport.
func WithThrottle(w middleware.Waiter) TransportOption {
	return transportOpt(func(c *config) error {
		t := &c.transport
		if nilcheck.Is(w) {
			return invalid("nil waiter")
		}
		t.waiter = w
		return nil
	})
}

// WithThrottleLimiter throttles every attempt through the keyed limiter l,
// with the key key(req) (the request's host when key is nil), waiting with
// [floodgate.Wait]. It applies to NewTransport.
func WithThrottleLimiter(l floodgate.Limiter, key func(*http.Request) string) TransportOption {
	return transportOpt(func(c *config) error {
		t := &c.transport
		if nilcheck.Is(l) {
			return invalid("nil limiter")
		}
		if key == nil {
			key = func(r *http.Request) string { return r.URL.Host }
		}
		t.limiter, t.key = l, key
		return nil
	})
}

// WithMaxAttempts bounds the attempts per request, the first one included
// (n >= 1; 1 disables retries). The default is 3.
func WithMaxAttempts(n int) TransportOption {
	return transportOpt(func(c *config) error {
		t := &c.transport
		if n < 1 {
			return invalid("max attempts %d < 1", n)
		}
		t.maxAttempts = n
		return nil
	})
}

// WithBackoff sets the exponential backoff: the bound of the first retry's
// random wait, doubled at each retry, and its cap (0 < base <= cap).
func WithBackoff(base, cap time.Duration) TransportOption {
	return transportOpt(func(c *config) error {
		t := &c.transport
		if base <= 0 || cap < base || cap > maxBackoff {
			return invalid("backoff base %v, cap %v: want 0 < base <= cap <= %v", base, cap, maxBackoff)
		}
		t.baseDelay, t.capDelay = base, cap
		return nil
	})
}

// WithMaxRetryWait sets the longest wait the transport accepts before a
// retry (default 30 s). When a server asks for more, the refusal is given
// back to the caller at once.
func WithMaxRetryWait(d time.Duration) TransportOption {
	return transportOpt(func(c *config) error {
		t := &c.transport
		if d <= 0 || d > maxRetryWait {
			return invalid("max retry wait %v outside (0, %v]", d, maxRetryWait)
		}
		t.maxWait = d
		return nil
	})
}

// Bounds of the transport's duration options.
const (
	maxBackoff   = time.Hour
	maxRetryWait = 24 * time.Hour
)

// RoundTrip implements [http.RoundTripper].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	retryable := t.maxAttempts > 1 && replayable(req)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		out, err := attemptOf(req, attempt)
		if err != nil {
			return nil, err
		}
		if err := t.throttle(ctx, out); err != nil {
			if out.Body != nil {
				_ = out.Body.Close()
			}
			return nil, err
		}
		resp, err := t.base.RoundTrip(out)
		wait, again := t.again(ctx, resp, err, retryable, attempt)
		if !again {
			return resp, err
		}
		// The refusal is dropped: drain a little so the connection can be
		// reused, then close.
		if resp.Body != nil {
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			_ = resp.Body.Close()
		}
		if err := sleep(ctx, wait, &timer); err != nil {
			return nil, err
		}
	}
}

// again reports whether the answer (resp, err) to attempt is retried, and
// after how long: a 429 or 503 to a retryable request, with attempts left,
// whose wait the transport honours and the request's deadline allows.
func (t *Transport) again(ctx context.Context, resp *http.Response, err error, retryable bool, attempt int) (time.Duration, bool) {
	if err != nil || !retryable || attempt >= t.maxAttempts ||
		(resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
		return 0, false
	}
	wait, ok := t.retryWait(resp, attempt)
	if dl, has := ctx.Deadline(); !ok || (has && time.Until(dl) < wait) {
		return 0, false
	}
	return wait, true
}

// attemptOf is the request to send for attempt: req itself first, then a
// clone with its body replayed.
func attemptOf(req *http.Request, attempt int) (*http.Request, error) {
	if attempt == 1 {
		return req, nil
	}
	out := req.Clone(req.Context())
	if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("httplimit: replay body: %w", err)
		}
		out.Body = body
	}
	return out, nil
}

func (t *Transport) throttle(ctx context.Context, req *http.Request) error {
	if t.waiter != nil {
		if err := t.waiter.WaitN(ctx, 1); err != nil {
			return fmt.Errorf("httplimit: throttle: %w", err)
		}
	}
	if t.limiter != nil {
		if _, err := floodgate.Wait(ctx, t.limiter, t.key(req), 1); err != nil {
			return fmt.Errorf("httplimit: throttle: %w", err)
		}
	}
	return nil
}

// retryWait is the wait before the next attempt, and false when the server
// asks for longer than the transport accepts.
func (t *Transport) retryWait(resp *http.Response, attempt int) (time.Duration, bool) {
	hint := max(retryAfter(resp.Header, time.Now()), resetHint(resp.Header))
	if hint > t.maxWait {
		return 0, false
	}
	bound := t.capDelay
	if shift := attempt - 1; shift < 62 && t.baseDelay<<shift > 0 && t.baseDelay<<shift < bound {
		bound = t.baseDelay << shift
	}
	backoff := time.Duration(rand.Int64N(int64(bound) + 1))
	return max(hint, backoff), true
}

// retryAfter parses the Retry-After field of h as delta-seconds or an
// HTTP-date relative to now. It returns 0 when the field is absent,
// malformed, or in the past.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		if n > int64(1<<62/time.Second) {
			n = int64(1 << 62 / time.Second)
		}
		return time.Duration(n) * time.Second
	}
	when, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return max(when.Sub(now), 0)
}

// resetHint is the largest t (seconds) among the exhausted members (r=0)
// of the RateLimit field, or 0.
func resetHint(h http.Header) time.Duration {
	vals := h.Values("RateLimit")
	if len(vals) == 0 {
		return 0
	}
	members, err := httpsfv.UnmarshalList(vals)
	if err != nil {
		return 0
	}
	var best int64
	for _, m := range members {
		item, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		r, okR := item.Params.Get("r")
		t, okT := item.Params.Get("t")
		ri, okRi := r.(int64)
		ti, okTi := t.(int64)
		if okR && okT && okRi && okTi && ri == 0 && ti > best {
			best = ti
		}
	}
	return time.Duration(min(best, int64(1<<62/time.Second))) * time.Second
}

// replayable reports whether req is safe to send again.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" && req.Header.Get("X-Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// sleep waits for d or until ctx ends (returning its error). timer, when
// not nil, holds a timer to reuse across calls; the caller stops it.
func sleep(ctx context.Context, d time.Duration, timer **time.Timer) error {
	var t *time.Timer
	switch {
	case timer == nil:
		t = time.NewTimer(d)
		defer t.Stop()
	case *timer == nil:
		t = time.NewTimer(d)
		*timer = t
	default:
		t = *timer
		t.Reset(d)
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
