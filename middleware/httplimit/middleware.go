package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
)

// Canonical header names, written straight into the header map.
const (
	hRateLimitPolicy = "Ratelimit-Policy"
	hRateLimit       = "Ratelimit"
	hLimit           = "X-Ratelimit-Limit"
	hRemaining       = "X-Ratelimit-Remaining"
	hReset           = "X-Ratelimit-Reset"
	hTier            = "X-Ratelimit-Tier"
	hScope           = "X-Ratelimit-Scope"
	hReason          = "X-Ratelimit-Reason"
	hRetryAfter      = "Retry-After"
	hCacheControl    = "Cache-Control"
	hContentType     = "Content-Type"
	hNoSniff         = "X-Content-Type-Options"
	hXFF             = "X-Forwarded-For"
	hForwarded       = "Forwarded"
)

// Reasons sent in X-RateLimit-Reason (diagnostic headers).
const (
	reasonRateLimited = "rate_limited"
	reasonDelay       = "delay_refused"
	reasonOverloaded  = "overloaded"
	reasonUnavailable = "limiter_unavailable"
	reasonCost        = "cost_exceeds_limit"
	reasonKey         = "invalid_key"
)

// maxSF is the largest structured-field Integer (15 digits).
const maxSF = 999_999_999_999_999

// ErrLimiterPanic is wrapped by the error reported to the observer when a
// limiter (or an Acquirer) panics. The panic is recovered and the request
// follows the fail mode.
var ErrLimiterPanic = errors.New("httplimit: limiter panicked")

type limiterMW struct {
	cfg      config
	l        floodgate.Limiter
	refunder floodgate.Refunder

	policyStatic string // whole RateLimit-Policy value when the quota is fixed
	policyQ      string // `"name";q=`, followed by Decision.Limit
	policyW      string // `;w=N` or ""
	rlPrefix     string // `"name";r=`
	scopeIP      string
	scopeKey     string
}

// Middleware returns a wrapper that rate-limits requests with l: each
// request is mapped to a key (the client IP by default) and a cost (1 by
// default) and admitted only when l admits it. See the package
// documentation for the response contract.
//
// It returns an error wrapping [floodgate.ErrInvalidConfig] when l is nil
// or an option is invalid. The wrapper and the handlers it returns are safe
// for concurrent use. A nil handler given to the wrapper means
// [http.DefaultServeMux].
func Middleware(l floodgate.Limiter, opts ...Option) (func(http.Handler) http.Handler, error) {
	if l == nil {
		return nil, invalid("nil limiter")
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	m := &limiterMW{cfg: cfg, l: l}
	m.refunder, _ = l.(floodgate.Refunder)
	name := sfString(cfg.policy.Name)
	if cfg.policy.Window > 0 {
		m.policyW = ";w=" + strconv.FormatInt(ceilSeconds(cfg.policy.Window), 10)
	}
	m.policyQ = name + ";q="
	if cfg.policy.Quota > 0 {
		m.policyStatic = m.policyQ + strconv.FormatInt(min(cfg.policy.Quota, maxSF), 10) + m.policyW
	}
	m.rlPrefix = name + ";r="
	kind := [...]string{keyIP: "ip", keyHeader: "header", keyCustom: "key"}[cfg.keyKind]
	m.scopeIP, m.scopeKey = "ip", kind
	if cfg.routeKey != "" {
		m.scopeIP, m.scopeKey = "route+ip", "route+"+kind
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.DefaultServeMux
		}
		return &limitHandler{m: m, next: next}
	}, nil
}

type limitHandler struct {
	m    *limiterMW
	next http.Handler
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	c := &m.cfg
	key, fromIP := c.key(r)
	cost := 1
	if c.cost != nil {
		cost = c.cost(r)
	}
	start := c.start()
	d, err := m.take(r.Context(), key, cost)
	ev := c.event(start, d)
	scope := m.scopeKey
	if fromIP {
		scope = m.scopeIP
	}
	switch {
	case err != nil && (errors.Is(err, floodgate.ErrInvalidCost) || errors.Is(err, floodgate.ErrInvalidKey)):
		// A cost or a key the limiter refuses could never be admitted.
		// Failing open here would exempt exactly the most expensive
		// requests, or anyone who crafts a key the store rejects.
		ev.Err = err
		if c.dryRun {
			ev.Outcome = floodgate.OutcomeWouldDeny
			c.observe(ev)
			break
		}
		ev.Outcome = floodgate.OutcomeDenied
		c.observe(ev)
		reason := reasonCost
		if errors.Is(err, floodgate.ErrInvalidKey) {
			reason = reasonKey
		}
		c.refuse(w, http.StatusTooManyRequests, time.Second, reason, scope)
		return
	case err != nil:
		if !c.failed(w, ev, err, scope) {
			return
		}
	case c.dryRun:
		ev.Outcome = floodgate.OutcomeAllowed
		if !d.Allowed {
			ev.Outcome = floodgate.OutcomeWouldDeny
		}
		c.observe(ev)
	case !d.Allowed:
		ev.Outcome = floodgate.OutcomeDenied
		c.observe(ev)
		retry := d.RetryAfter
		if retry <= 0 {
			// A denial without a retry time breaks the Decision contract;
			// the time until full is certainly enough.
			retry = max(d.ResetAfter, time.Second)
		}
		m.setHeaders(w.Header(), d, scope, retry)
		c.refuse(w, http.StatusTooManyRequests, retry, reasonRateLimited, scope)
		return
	case d.Delay > 0:
		if !m.delay(r.Context(), d.Delay) {
			m.refund(r.Context(), key, cost)
			ev.Outcome = floodgate.OutcomeDenied
			c.observe(ev)
			d.Allowed, d.RetryAfter = false, d.Delay
			m.setHeaders(w.Header(), d, scope, d.Delay)
			c.refuse(w, http.StatusTooManyRequests, d.Delay, reasonDelay, scope)
			return
		}
		ev.Outcome = floodgate.OutcomeDelayed
		c.observe(ev)
		m.setHeaders(w.Header(), d, scope, 0)
	default:
		ev.Outcome = floodgate.OutcomeAllowed
		c.observe(ev)
		m.setHeaders(w.Header(), d, scope, 0)
	}
	h.next.ServeHTTP(w, r)
}

// start reads the clock before a decision, when there is an observer to
// report its latency to.
func (c *config) start() int64 {
	if c.observer == nil {
		return 0
	}
	return floodgate.Nanotime()
}

// event starts the observer's event of a decision that began at start.
func (c *config) event(start int64, d floodgate.Decision) floodgate.Event {
	ev := floodgate.Event{Policy: c.name, Tier: c.tier, Route: c.route, Decision: d}
	if c.observer != nil {
		ev.Latency = time.Duration(floodgate.Nanotime() - start)
	}
	return ev
}

// observe reports ev to the observer, if any.
func (c *config) observe(ev floodgate.Event) {
	if c.observer != nil {
		c.observer.Observe(ev)
	}
}

// failed applies the fail mode to a request whose limiter could not decide.
// It reports true when the request goes on (fail open, or dry run) and
// false when it was refused with 503.
func (c *config) failed(w http.ResponseWriter, ev floodgate.Event, err error, scope string) bool {
	ev.Err = err
	if c.failMode == FailClosed && !c.dryRun {
		ev.Outcome = floodgate.OutcomeErrorClosed
		c.observe(ev)
		c.refuse(w, http.StatusServiceUnavailable, time.Second, reasonUnavailable, scope)
		return false
	}
	ev.Outcome = floodgate.OutcomeErrorOpen
	c.observe(ev)
	return true
}

// take calls the limiter, turning a panic into an error.
func (m *limiterMW) take(ctx context.Context, key string, n int) (d floodgate.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = floodgate.Decision{}, fmt.Errorf("%w: %v", ErrLimiterPanic, p)
		}
	}()
	return m.l.Take(ctx, key, n)
}

// refund gives back units of a request that was admitted and then refused
// (a delay that could not be honoured). Best effort: a failing refund only
// leaves the key charged.
func (m *limiterMW) refund(ctx context.Context, key string, n int) {
	if m.refunder == nil {
		return
	}
	defer func() { _ = recover() }()
	_ = m.refunder.Refund(context.WithoutCancel(ctx), key, n)
}

// delay holds a request for d, or reports false when it should be refused:
// the delay mode is DelayRefuse, the delay would pass the context's
// deadline, or the context ended.
func (m *limiterMW) delay(ctx context.Context, d time.Duration) bool {
	if m.cfg.delayMode == DelayRefuse {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	return sleep(ctx, d, nil) == nil
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

// headerBlock holds everything the informational headers of one response
// need: the one-element []string values the header map points to and the
// bytes of the formatted numbers. One allocation per response, whatever the
// number of fields.
type headerBlock struct {
	vals [7]string
	buf  [128]byte
}

// setHeaders writes the informational header groups. retry is the delay
// before more quota is available on a refusal, zero on admission.
func (m *limiterMW) setHeaders(h http.Header, d floodgate.Decision, scope string, retry time.Duration) {
	c := &m.cfg
	if c.headers&(HeadersIETF|HeadersLegacy|HeadersDiagnostic) == 0 {
		return
	}
	limit := clampSF(d.Limit)
	remaining := min(clampSF(d.Remaining), limit)
	reset := min(ceilSeconds(d.ResetAfter), maxSF)
	t := reset
	if retry > 0 {
		t = min(ceilSeconds(retry), maxSF)
	}

	blk := new(headerBlock)
	buf := blk.buf[:0]
	// Each field is the span buf[from[i]:to[i]] (or policyStatic). A number
	// is formatted once: the legacy fields reuse the digits of the IETF ones.
	var from, to [5]int
	var names [5]string
	n := 0
	field := func(name string, a, b int) {
		names[n], from[n], to[n] = name, a, b
		n++
	}
	digits := func(v int64) (int, int) {
		a := len(buf)
		buf = strconv.AppendInt(buf, v, 10)
		return a, len(buf)
	}
	limA, limB, remA, remB, tA, tB := -1, -1, -1, -1, -1, -1
	if c.headers&HeadersIETF != 0 {
		a := len(buf)
		if m.policyStatic == "" {
			buf = append(buf, m.policyQ...)
			limA, limB = digits(limit)
			buf = append(buf, m.policyW...)
		}
		field(hRateLimitPolicy, a, len(buf))
		a = len(buf)
		buf = append(buf, m.rlPrefix...)
		remA, remB = digits(remaining)
		buf = append(buf, ";t="...)
		tA, tB = digits(t)
		field(hRateLimit, a, len(buf))
	}
	if c.headers&HeadersLegacy != 0 {
		if limA < 0 {
			limA, limB = digits(limit)
		}
		field(hLimit, limA, limB)
		if remA < 0 {
			remA, remB = digits(remaining)
		}
		field(hRemaining, remA, remB)
		if tA < 0 || t != reset {
			tA, tB = digits(reset)
		}
		field(hReset, tA, tB)
	}
	// Stacked middlewares: an outer one already wrote its fields. The IETF
	// fields are lists and get one member per policy; the legacy fields hold
	// one policy and keep the one with the fewest units remaining.
	oldRem, stackedLegacy := h[hRemaining]
	_, stackedIETF := h[hRateLimit]
	keepLegacy := false
	if stackedLegacy && len(oldRem) > 0 {
		if v, err := strconv.ParseInt(oldRem[0], 10, 64); err == nil && v <= remaining {
			keepLegacy = true
		}
	}
	// buf is never written again: strings may point into it. (When a long
	// policy name made it outgrow blk.buf, it lives in its own heap array,
	// equally immutable from here on.)
	for i := 0; i < n; i++ {
		if from[i] == to[i] {
			blk.vals[i] = m.policyStatic // the one field that can be empty
		} else {
			blk.vals[i] = unsafe.String(&buf[from[i]], to[i]-from[i])
		}
		v := blk.vals[i : i+1 : i+1]
		switch name := names[i]; {
		case name == hRateLimitPolicy || name == hRateLimit:
			if stackedIETF {
				if old := h[name]; len(old) > 0 {
					v = append(old[:len(old):len(old)], v[0])
				}
			}
		case keepLegacy:
			continue
		}
		h[names[i]] = v
	}
	if c.headers&HeadersDiagnostic != 0 {
		if c.tier != "" {
			blk.vals[n] = c.tier
			h[hTier] = blk.vals[n : n+1 : n+1]
		}
		blk.vals[n+1] = scope
		h[hScope] = blk.vals[n+1 : n+2 : n+2]
	}
}

// refuseBlock holds the header values of one refusal, in one allocation.
type refuseBlock struct {
	vals [7]string
	buf  [20]byte
}

// Constant header values of refusals.
const (
	noStore     = "no-store"
	noSniff     = "nosniff"
	ctPlain     = "text/plain; charset=utf-8"
	ctProblem   = "application/problem+json"
	maxBodySize = 256
)

// bodyPool recycles the buffers refusal bodies are formatted in (Write
// copies them).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, maxBodySize); return &b }}

// refuse writes a refusal: status, Retry-After (whole seconds, at least 1,
// jittered), Cache-Control: no-store and a short body. The informational
// headers, if any, are already set.
func (c *config) refuse(w http.ResponseWriter, status int, retry time.Duration, reason, scope string) {
	h := w.Header()
	if c.jitter > 0 {
		j := time.Duration(rand.Int64N(int64(c.jitter) + 1))
		retry = min(retry, math.MaxInt64-j) + j // saturate, never wrap
	}
	secs := max(ceilSeconds(retry), 1)

	blk := new(refuseBlock)
	digits := strconv.AppendInt(blk.buf[:0], secs, 10)
	blk.vals[0] = unsafe.String(&digits[0], len(digits)) // digits is never written again
	blk.vals[1], blk.vals[2] = noStore, noSniff
	blk.vals[3] = ctPlain
	if c.problem {
		blk.vals[3] = ctProblem
	}
	h[hRetryAfter] = blk.vals[0:1:1]
	h[hCacheControl] = blk.vals[1:2:2]
	h[hNoSniff] = blk.vals[2:3:3]
	h[hContentType] = blk.vals[3:4:4]
	if c.headers&HeadersDiagnostic != 0 {
		blk.vals[4], blk.vals[5], blk.vals[6] = reason, c.tier, scope
		h[hReason] = blk.vals[4:5:5]
		if c.tier != "" {
			h[hTier] = blk.vals[5:6:6]
		}
		if h[hScope] == nil {
			h[hScope] = blk.vals[6:7:7]
		}
	}
	delete(h, "Content-Length")

	bp := bodyPool.Get().(*[]byte)
	body := (*bp)[:0]
	if c.problem {
		body = problemBody(body, status, secs)
	} else {
		body = strconv.AppendInt(body, int64(status), 10)
		body = append(body, ' ')
		body = append(body, http.StatusText(status)...)
		body = append(body, ": retry after "...)
		body = append(body, digits...)
		body = append(body, " s\n"...)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if cap(body) <= maxBodySize {
		*bp = body[:0]
		bodyPool.Put(bp)
	}
}

// problemBody appends an RFC 9457 problem details object to b. It states
// the status and the retry delay and nothing about the request (never the
// key).
func problemBody(b []byte, status int, secs int64) []byte {
	detail := "The request rate limit was exceeded."
	if status == http.StatusServiceUnavailable {
		detail = "The server cannot take this request now."
	}
	b = append(b, `{"type":"about:blank","title":"`...)
	b = append(b, http.StatusText(status)...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":"`...)
	b = append(b, detail...)
	b = append(b, `","retry_after":`...)
	b = strconv.AppendInt(b, secs, 10)
	return append(b, "}\n"...)
}

// ceilSeconds rounds a duration up to whole seconds (0 for d <= 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

func clampSF(v int64) int64 { return max(0, min(v, maxSF)) }

// sfString serialises s (printable ASCII, checked by the options) as a
// structured-field String.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}
