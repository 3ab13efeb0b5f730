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
	"github.com/floodgate-go/floodgate/middleware"
)

// scopeConcurrency is the X-RateLimit-Scope of Shed's refusals.
const scopeConcurrency = "concurrency"

type shedMW struct {
	cfg config
	a   middleware.Acquirer
}

// Shed returns a wrapper that sheds load with a concurrency limiter (a
// [middleware.Acquirer], for example middleware.AcquirerFunc(lim.Slot) for an
// adaptive.Gate lim): a request the Acquirer refuses gets 503 Service Unavailable with Retry-After
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
// The options about keys, cost, policy and delays are not ShedOptions: the
// compiler refuses them. WithDryRun, WithFailMode, WithProblemDetails, WithHeaders
// (only middleware.HeadersDiagnostic matters), WithRetryJitter, WithShedRetryAfter and
// the observer labels apply. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when a is nil (or a typed nil), or an option
// is nil or invalid.
func Shed(a middleware.Acquirer, opts ...ShedOption) (func(http.Handler) http.Handler, error) {
	if nilcheck.Is(a) {
		return nil, invalid("nil acquirer")
	}
	cfg, err := buildConfig(opts, ShedOption.applyShed)
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
		if c.failMode == middleware.FailClosed && !c.dryRun {
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
			release, ok, err = nil, false, fmt.Errorf("%w: %v", middleware.ErrLimiterPanic, p)
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
