package httplimit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/internal/ratehdr"
	"github.com/floodgate-go/floodgate/middleware"
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

// reasonOverloaded is the X-RateLimit-Reason of Shed's refusals; the
// others come from the admission core (admit.Reason*).
const reasonOverloaded = "overloaded"

// maxSF is the largest structured-field Integer (15 digits).
const maxSF = 999_999_999_999_999

// limitHdr is what one limit writes in the IETF fields.
type limitHdr struct {
	static  string // the whole RateLimit-Policy member when q is known
	qPrefix string // `"name";q=`, followed by Decision.Limit, when it is not
	w       string // `;w=N` or ""
	rl      string // `"name";r=`
	q       int64  // the advertised q when static, else 0 (Decision.Limit)
	// capacity is the limit's described capacity (clamped to maxSF) and
	// capacityField its X-RateLimit-Limit value, "" when unknown: a
	// decision whose Limit is the capacity writes it unformatted.
	capacity      int64
	capacityField string
}

type limiterMW struct {
	cfg  config
	core *admit.Core
	keys []KeyFunc // per limit after the first: nil means the main key
	hdrs []limitHdr
	// static is the whole RateLimit-Policy value when every member is
	// static.
	static   string
	scopeIP  string
	scopeKey string
	checks   sync.Pool // *[]floodgate.Check
}

// Middleware returns a wrapper that rate-limits requests with l: each
// request is mapped to a key (the client IP by default) and a cost (1 by
// default) and admitted only when l (and every limit added with
// [WithLimit], all or nothing) admits it. See the package documentation for
// the response contract.
//
// It returns an error wrapping [floodgate.ErrInvalidConfig] when l is nil
// (or a typed nil), an option is nil or invalid,
// or a restated policy ([WithPolicy]) contradicts what the limiter describes. The
// wrapper and the handlers it returns are safe for concurrent use. A nil
// handler given to the wrapper means [http.DefaultServeMux].
func Middleware(l floodgate.Limiter, opts ...Option) (func(http.Handler) http.Handler, error) {
	if nilcheck.Is(l) {
		return nil, invalid("nil limiter")
	}
	cfg, err := buildConfig(opts, Option.applyMiddleware)
	if err != nil {
		return nil, err
	}
	limiters := []floodgate.Limiter{l}
	m := &limiterMW{cfg: cfg}
	for _, e := range cfg.extra {
		limiters = append(limiters, e.l)
		m.keys = append(m.keys, e.key)
	}
	if cfg.keyKind == keyHeader && cfg.secret == nil && credkey.Shared(limiters...) {
		return nil, invalid("a header key on a store shared by several processes needs WithKeySecret, the same secret on every node (a random one per process would give each node its own budget per credential)")
	}
	m.core, err = admit.New(admit.Config{
		Name:      cfg.name,
		Tier:      cfg.tier,
		Observer:  cfg.observer,
		FailMode:  cfg.failMode,
		DelayMode: cfg.delayMode,
		DryRun:    cfg.dryRun,
	}, limiters...)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := m.buildHeaders(); err != nil {
		return nil, err
	}
	n := len(limiters)
	m.checks.New = func() any { s := make([]floodgate.Check, n); return &s }
	kind := [...]string{keyIP: "ip", keyHeader: "header", keyCustom: "key"}[cfg.keyKind]
	m.scopeIP, m.scopeKey = "ip", kind
	if cfg.keyPrefix != "" {
		m.scopeIP, m.scopeKey = "route+ip", "route+"+kind
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.DefaultServeMux
		}
		return &limitHandler{m: m, next: next}
	}, nil
}

// buildHeaders derives each limit's RateLimit-Policy member from what the
// limiter describes, checked against a restated WithPolicy.
func (m *limiterMW) buildHeaders() error {
	c := &m.cfg
	seen := map[string]bool{}
	all := true
	var members []string
	for i, lim := range m.core.Limits() {
		p := lim.Policy
		if i == 0 {
			var err error
			if p, err = restated(p, c.policy); err != nil {
				return err
			}
		}
		name := p.Name
		if name == "" {
			name = "default"
			if i > 0 {
				name = "limit-" + strconv.Itoa(i+1)
			}
		}
		if !printable(name) {
			return invalid("policy name %q is not printable ASCII", name)
		}
		if seen[name] {
			return invalid("two limits are named %q; give each its own Name", name)
		}
		seen[name] = true
		sf := sfString(name)
		h := limitHdr{qPrefix: sf + ";q=", rl: sf + ";r="}
		if p.Capacity > 0 {
			h.capacity = clampSF(p.Capacity)
			h.capacityField = strconv.FormatInt(h.capacity, 10)
		}
		q, w := ratehdr.Quota(p)
		if w > 0 {
			h.w = ";w=" + strconv.FormatInt(w, 10)
		}
		if q > 0 {
			h.q = q
			h.static = h.qPrefix + strconv.FormatInt(q, 10) + h.w
			members = append(members, h.static)
		} else {
			all = false
		}
		m.hdrs = append(m.hdrs, h)
	}
	if all {
		m.static = strings.Join(members, ", ")
	}
	return nil
}

// restated is the main limiter's policy p as WithPolicy restates it (rs):
// rs's name, when set; rs's quota and window where p has none; an error
// when they contradict p's.
func restated(p floodgate.Description, rs floodgate.Description) (floodgate.Description, error) {
	if rs.Name != "" {
		p.Name = rs.Name
	}
	if rs.Quota > 0 && p.Quota > 0 && rs.Quota != p.Quota {
		return p, invalid("policy quota %d contradicts the limiter's %d", rs.Quota, p.Quota)
	}
	if rs.Window > 0 && p.Window > 0 && ceilSeconds(rs.Window) != ceilSeconds(p.Window) {
		return p, invalid("policy window %v contradicts the limiter's %v", rs.Window, p.Window)
	}
	if p.Quota == 0 {
		p.Quota, p.Window = rs.Quota, rs.Window
	}
	return p, nil
}

type limitHandler struct {
	m    *limiterMW
	next http.Handler
}

func (h *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	start := m.core.Start()
	ev := floodgate.Event{Route: m.cfg.route}
	if len(m.keys) == 0 {
		// One limit: the check stays on the stack (a checks slice handed
		// to TakeAll would move to the heap); the verdict's Decision is
		// the limit's.
		var one [1]floodgate.Check
		fromIP, err := m.prepare(r, one[:])
		var v admit.Verdict
		if err != nil {
			v = m.core.Fail(r.Context(), err, ev, start)
		} else {
			v = m.core.DecideOne(r.Context(), one[0].Key, one[0].N, ev, start)
			one[0].Decision = v.Decision
		}
		h.respond(w, r, one[:], &v, fromIP)
		return
	}
	cs := m.checks.Get().(*[]floodgate.Check)
	checks := *cs
	defer func() {
		clear(checks)
		m.checks.Put(cs)
	}()
	fromIP, err := m.prepare(r, checks)
	var v admit.Verdict
	if err != nil {
		v = m.core.Fail(r.Context(), err, ev, start)
	} else {
		v = m.core.Decide(r.Context(), checks, ev, start)
	}
	h.respond(w, r, checks, &v, fromIP)
}

// respond translates verdict v into the response: a refusal, or the
// headers and the next handler.
func (h *limitHandler) respond(w http.ResponseWriter, r *http.Request, checks []floodgate.Check, v *admit.Verdict, fromIP bool) {
	m := h.m
	c := &m.cfg
	scope := m.scopeKey
	if fromIP {
		scope = m.scopeIP
	}
	if c.answer(w, v, scope, func() { m.writeHeaders(w.Header(), checks, v, scope) }) {
		h.next.ServeHTTP(w, r)
	}
}

// answer translates verdict v: it writes a refusal (and reports false), or
// the informational headers, with setHeaders, of an admission that goes on
// (and reports true). setHeaders also runs on a rate-limit refusal.
func (c *config) answer(w http.ResponseWriter, v *admit.Verdict, scope string, setHeaders func()) bool {
	switch v.Kind {
	case admit.Deny:
		setHeaders()
		c.refuse(w, http.StatusTooManyRequests, v.RetryAfter, v.Reason, scope)
		return false
	case admit.NeverFits:
		c.refuse(w, http.StatusTooManyRequests, 0, v.Reason, scope)
		return false
	case admit.Unavailable:
		c.refuse(w, http.StatusServiceUnavailable, v.RetryAfter, v.Reason, scope)
		return false
	}
	if v.Headers {
		setHeaders()
	}
	return true
}

// prepare sets every check's key and cost, turning a panicking key or cost
// function into an error.
func (m *limiterMW) prepare(r *http.Request, checks []floodgate.Check) (fromIP bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", middleware.ErrLimiterPanic, p)
		}
	}()
	c := &m.cfg
	key, fromIP := c.key(r)
	cost := 1
	if c.cost != nil {
		cost = c.cost(r)
	}
	checks[0].Key, checks[0].N = key, cost
	for i, kf := range m.keys {
		k := key
		if kf != nil {
			if k = kf(r); k == "" {
				k = c.clientKey(r)
			}
		}
		checks[i+1].Key, checks[i+1].N = k, cost
	}
	return fromIP, nil
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
// headers, if any, are already set. A zero retry is a request that can
// never be admitted: no Retry-After (a retry would fail the same way), and
// a body that says so.
func (c *config) refuse(w http.ResponseWriter, status int, retry time.Duration, reason, scope string) {
	h := w.Header()
	never := retry <= 0
	if c.jitter > 0 && !never {
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
	if never {
		delete(h, hRetryAfter)
	} else {
		h[hRetryAfter] = blk.vals[0:1:1]
	}
	h[hCacheControl] = blk.vals[1:2:2]
	h[hNoSniff] = blk.vals[2:3:3]
	h[hContentType] = blk.vals[3:4:4]
	if c.headers&middleware.HeadersDiagnostic != 0 {
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
	switch {
	case c.problem:
		body = problemBody(body, status, secs, never, reason)
	case never:
		body = strconv.AppendInt(body, int64(status), 10)
		body = append(body, ' ')
		body = append(body, http.StatusText(status)...)
		body = append(body, ": "...)
		body = append(body, neverDetail(reason)...)
		body = append(body, '\n')
	default:
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

// neverDetail says why a request can never be admitted.
func neverDetail(reason string) string {
	if reason == admit.ReasonKey {
		return "The request cannot be rate-limited (invalid key); retrying will not help."
	}
	return "The request's cost exceeds the policy's capacity; retrying will not help."
}

// problemBody appends an RFC 9457 problem details object to b. It states
// the status and the retry delay (or that retrying is useless) and nothing
// about the request (never the key).
func problemBody(b []byte, status int, secs int64, never bool, reason string) []byte {
	detail := "The request rate limit was exceeded."
	switch {
	case never:
		detail = neverDetail(reason)
	case status == http.StatusServiceUnavailable:
		detail = "The server cannot take this request now."
	}
	b = append(b, `{"type":"about:blank","title":"`...)
	b = append(b, http.StatusText(status)...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":"`...)
	b = append(b, detail...)
	if never {
		b = append(b, `","reason":"`...)
		b = append(b, reason...)
		return append(b, "\"}\n"...)
	}
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
func sfString(s string) string { return string(appendSF(make([]byte, 0, len(s)+2), s)) }

// appendSF appends s (printable ASCII) as a structured-field String.
func appendSF(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
