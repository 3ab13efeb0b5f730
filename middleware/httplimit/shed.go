package httplimit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
)

// Acquirer is a concurrency limiter as [Shed] sees it: something that hands
// out slots for in-flight work and sheds what it cannot take. The adaptive
// and priority limiters of floodgate fit it through their Slot adapters:
//
//	httplimit.AcquirerFunc(lim.Slot) // lim an *adaptive.Gate
//	httplimit.AcquirerFunc(adaptive.SlotFunc(func(ctx context.Context) (*adaptive.Token, error) {
//		return classes.Acquire(ctx, priority.BestEffort) // classes a *priority.Shedder
//	}))
//
// A request that waited for a slot until its context ended should be
// reported as shed, not as an error. Implementations must be safe for
// concurrent use.
type Acquirer interface {
	// Acquire claims a slot for one request. ok false means the request is
	// shed (overload); err non-nil means the limiter could not decide. When
	// ok is true, release must be called exactly once when the work ends,
	// with success false when the work failed or timed out (a drop that an
	// adaptive limit learns from). release may be nil when there is nothing
	// to release.
	Acquire(ctx context.Context) (release func(success bool), ok bool, err error)
}

// AcquirerFunc adapts a function to the [Acquirer] interface.
type AcquirerFunc func(ctx context.Context) (release func(success bool), ok bool, err error)

// Acquire calls f(ctx).
func (f AcquirerFunc) Acquire(ctx context.Context) (func(success bool), bool, error) {
	return f(ctx)
}

// scopeConcurrency is the X-RateLimit-Scope of Shed's refusals.
const scopeConcurrency = "concurrency"

type shedMW struct {
	cfg config
	a   Acquirer
}

// Shed returns a wrapper that sheds load with a concurrency limiter: a
// request the Acquirer refuses gets 503 Service Unavailable with Retry-After
// (WithShedRetryAfter, default 1 s, jittered by WithRetryJitter) and
// Cache-Control: no-store; it is reported as floodgate.OutcomeShed.
//
// An admitted request's slot is released when its handler returns, with
// success true unless the handler panicked, answered with a 5xx status, or
// its context ended first.
//
// When the Acquirer reports to an observer of its own, give Shed's observer
// to only one of the two, or sheds are counted twice.
//
// The options about keys, cost, policy and delays do not apply: Shed
// refuses them. WithDryRun, WithFailMode, WithProblemDetails, WithHeaders
// (only HeadersDiagnostic matters), WithRetryJitter, WithShedRetryAfter and
// the observer labels apply. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when a is nil (or a typed nil), or an option
// is invalid or does not apply to Shed.
func Shed(a Acquirer, opts ...Option) (func(http.Handler) http.Handler, error) {
	if nilcheck.Is(a) {
		return nil, invalid("nil acquirer")
	}
	cfg, err := buildConfig(opts, forShed)
	if err != nil {
		return nil, err
	}
	m := &shedMW{cfg: cfg, a: a}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.DefaultServeMux
		}
		return &shedHandler{m: m, next: next}
	}, nil
}

type shedHandler struct {
	m    *shedMW
	next http.Handler
}

func (h *shedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &h.m.cfg
	start := c.start()
	release, ok, err := h.m.acquire(r.Context())
	ev := c.event(start)
	switch {
	case err != nil:
		ev.Err = err
		if c.failMode == FailClosed && !c.dryRun {
			ev.Outcome = floodgate.OutcomeErrorClosed
			c.observe(ev)
			c.refuse(w, http.StatusServiceUnavailable, admit.UnavailableRetry, admit.ReasonUnavailable, scopeConcurrency)
			return
		}
		ev.Outcome = floodgate.OutcomeErrorOpen
		c.observe(ev)
		h.next.ServeHTTP(w, r)
		return
	case !ok && c.dryRun:
		ev.Outcome = floodgate.OutcomeWouldDeny
		c.observe(ev)
		h.next.ServeHTTP(w, r)
		return
	case !ok:
		ev.Outcome = floodgate.OutcomeShed
		c.observe(ev)
		c.refuse(w, http.StatusServiceUnavailable, c.shedRetry, reasonOverloaded, scopeConcurrency)
		return
	}
	ev.Outcome = floodgate.OutcomeAllowed
	c.observe(ev)
	if release == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	done := false
	defer func() {
		success := done && sw.status < 500 && r.Context().Err() == nil
		func() {
			defer func() { _ = recover() }()
			release(success)
		}()
	}()
	h.next.ServeHTTP(sw, r)
	done = true
}

// start reads the clock before a decision, when there is an observer to
// report its latency to.
func (c *config) start() int64 {
	if c.observer == nil {
		return 0
	}
	return monotime.Nanotime()
}

// event starts the observer's event of a shedding decision that began at
// start.
func (c *config) event(start int64) floodgate.Event {
	ev := floodgate.Event{Source: floodgate.SourceRequest, Policy: c.name, Tier: c.tier, Route: c.route}
	if c.observer != nil {
		ev.Latency = time.Duration(monotime.Nanotime() - start)
	}
	return ev
}

// observe reports ev to the observer, if any.
func (c *config) observe(ev floodgate.Event) {
	if c.observer != nil {
		c.observer.Observe(ev)
	}
}

func (m *shedMW) acquire(ctx context.Context) (release func(bool), ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			release, ok, err = nil, false, fmt.Errorf("%w: %v", ErrLimiterPanic, p)
		}
	}()
	return m.a.Acquire(ctx)
}

// statusWriter records the status a handler answered with. It passes
// Flush, Hijack and the http.ResponseController unwrapping through.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
