package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/policy"
)

// Source is one entry of a request descriptor: a key (as the policy set's
// rules name it) and where its value comes from. Build one with
// [ClientIPEntry], [HeaderEntry], [RouteEntry], [MethodEntry] or
// [ValueEntry].
type Source struct {
	key        string
	credential bool
	value      func(c *config, r *http.Request) string
}

// ClientIPEntry is the entry key = the client IP (trusted proxies and IP
// prefixes applied), envoy's "remote_address".
func ClientIPEntry(key string) Source {
	return Source{key: key, value: func(c *config, r *http.Request) string { return c.clientKey(r) }}
}

// HeaderEntry is the entry key = the value of header name (a service token,
// an API key). The value is a credential: matched and resolved to its plan
// in clear, stored only as a keyed hash (policy.WithKeySecret). A request
// without the header does not yield the descriptor.
func HeaderEntry(name, key string) Source {
	canon := http.CanonicalHeaderKey(name)
	return Source{key: key, credential: true, value: func(_ *config, r *http.Request) string {
		if v := r.Header[canon]; len(v) > 0 {
			return v[0]
		}
		return ""
	}}
}

// RouteEntry is the entry key = the request's route: the pattern of the
// http.ServeMux route that matched (r.Pattern), else the URL path. Put the
// middleware inside the mux (around each handler) for patterns.
func RouteEntry(key string) Source {
	return Source{key: key, value: func(_ *config, r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		return r.URL.Path
	}}
}

// MethodEntry is the entry key = the request's method.
func MethodEntry(key string) Source {
	return Source{key: key, value: func(_ *config, r *http.Request) string { return r.Method }}
}

// ValueEntry is the entry key = f(r); "" means the request does not yield
// the descriptor. Mark values that are credentials with credential: they
// are then stored only as a keyed hash.
func ValueEntry(key string, credential bool, f func(*http.Request) string) Source {
	return Source{key: key, credential: credential, value: func(_ *config, r *http.Request) string { return f(r) }}
}

// WithDescriptor adds a descriptor that every request yields to
// [Policies]: its entries, in order (for example the service token, then
// the route). A request for which an entry has no value does not yield that
// descriptor. It applies to Policies.
func WithDescriptor(entries ...Source) Option {
	return option("WithDescriptor", forPolicies, func(c *config) error {
		if len(entries) == 0 {
			return invalid("WithDescriptor without entries")
		}
		for i, e := range entries {
			if e.value == nil || e.key == "" {
				return invalid("WithDescriptor: entry %d is the zero Source or has no key", i)
			}
		}
		c.descriptors = append(c.descriptors, append([]Source(nil), entries...))
		return nil
	})
}

type policiesMW struct {
	cfg  config
	live *policy.Live
	core *admit.Core
	bufs sync.Pool // *policyBufs
}

type policyBufs struct {
	descs  []policy.Descriptor
	checks []floodgate.Check
}

// Policies returns a wrapper that limits requests by the rules of a live
// policy set: every request yields the descriptors of [WithDescriptor], the
// set's rules map them to policies (plans resolved per key), and every
// matched policy is checked, all or nothing, through the admission core
// that [Middleware] uses, with the same response contract (one RateLimit
// member per enforcing policy). A request no rule matches is not limited.
// The checks of dry-run policies never refuse: they are charged when the
// request is admitted, and reported in an event of their own
// ([floodgate.SourceShadow]: allowed, or would_deny with the dry-run
// policy's name), beside the request's event, which keeps the enforcing
// verdict. A reload of the set applies to the next request.
//
// A service's rate limiting becomes a config file and one line:
//
//	live, _ := policy.NewLive(cfg, store)
//	limit, _ := httplimit.Policies(live, httplimit.WithDescriptor(httplimit.HeaderEntry("X-API-Key", "api_key")))
//
// It returns an error wrapping [floodgate.ErrInvalidConfig] when live is
// nil, no descriptor is given, or an option is invalid or does not apply.
func Policies(live *policy.Live, opts ...Option) (func(http.Handler) http.Handler, error) {
	if nilcheck.Is(live) {
		return nil, invalid("nil policy set")
	}
	cfg, err := buildConfig(opts, forPolicies)
	if err != nil {
		return nil, err
	}
	if len(cfg.descriptors) == 0 {
		return nil, invalid("Policies needs at least one WithDescriptor")
	}
	for _, d := range cfg.descriptors {
		for _, src := range d {
			if src.credential {
				if err := live.CheckCredentials(); err != nil {
					return nil, err
				}
			}
		}
	}
	ac := admit.Config{
		Name: cfg.name, Tier: cfg.tier, Observer: cfg.observer,
		FailMode: admit.FailMode(cfg.failMode), DelayMode: admit.DelayMode(cfg.delayMode), DryRun: cfg.dryRun,
	}
	m := &policiesMW{cfg: cfg, live: live, core: admit.NewDynamic(ac)}
	m.bufs.New = func() any { return &policyBufs{} }
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.DefaultServeMux
		}
		return &policiesHandler{m: m, next: next}
	}, nil
}

type policiesHandler struct {
	m    *policiesMW
	next http.Handler
}

func (h *policiesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	c := &m.cfg
	start := m.core.Start()
	ev := floodgate.Event{Route: c.route}
	b := m.bufs.Get().(*policyBufs)
	defer func() {
		clear(b.checks)
		for i := range b.descs {
			clear(b.descs[i]) // no credential stays reachable from the pool
			b.descs[i] = b.descs[i][:0]
		}
		b.checks, b.descs = b.checks[:0], b.descs[:0]
		m.bufs.Put(b)
	}()
	checks, enforcing, err := m.prepare(r, b)
	var v admit.Verdict
	if err != nil {
		checks = []floodgate.Check{{Limiter: failing{err}, N: 1}}
		v = m.core.DecideChecks(r.Context(), checks, nil, ev, start)
	} else {
		shadow := checks[enforcing:]
		checks = checks[:enforcing]
		v = m.core.DecideChecks(r.Context(), checks, shadow, ev, start)
	}
	const scope = "descriptor"
	if c.answer(w, v, scope, func() {
		if len(checks) > 0 {
			setPolicyHeaders(c, w.Header(), checks, v, scope)
		}
	}) {
		h.next.ServeHTTP(w, r)
	}
}

// prepare builds the request's descriptors and matches them, turning a
// panicking source or resolver into an error.
func (m *policiesMW) prepare(r *http.Request, b *policyBufs) (checks []floodgate.Check, enforcing int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrLimiterPanic, p)
		}
	}()
	c := &m.cfg
	cost := 1
	if c.cost != nil {
		cost = c.cost(r)
	}
	for _, srcs := range c.descriptors {
		k := len(b.descs)
		if k < cap(b.descs) {
			b.descs = b.descs[:k+1]
		} else {
			b.descs = append(b.descs, nil)
		}
		d := b.descs[k][:0]
		for _, s := range srcs {
			v := s.value(c, r)
			if v == "" {
				d = nil
				break
			}
			d = append(d, policy.Entry{Key: s.key, Value: v, Credential: s.credential})
		}
		if d == nil {
			b.descs = b.descs[:k]
			continue
		}
		b.descs[k] = d
	}
	return m.live.Match(r.Context(), b.descs, cost, b.checks)
}

// failing is the limiter of a request whose checks could not be built: it
// reports err, which the core judges by the fail mode.
type failing struct{ err error }

func (f failing) Take(_ context.Context, _ string, _ int) (floodgate.Decision, error) {
	return floodgate.Decision{}, f.err
}

// setPolicyHeaders writes the informational headers of a verdict on
// dynamic checks: one RateLimit-Policy and RateLimit member per check, its
// name, quota and window from the check's limiter.
func setPolicyHeaders(c *config, h http.Header, checks []floodgate.Check, v admit.Verdict, scope string) {
	if c.headers&(HeadersIETF|HeadersLegacy|HeadersDiagnostic) == 0 {
		return
	}
	d := v.Decision
	if c.headers&HeadersIETF != 0 {
		var pol, cur strings.Builder
		for i := range checks {
			p := floodgate.Policy{}
			if ds, ok := checks[i].Limiter.(floodgate.Describer); ok {
				p = ds.Policy()
			}
			name := p.Name
			if name == "" {
				name = "default"
			}
			if i > 0 {
				pol.WriteString(", ")
				cur.WriteString(", ")
			}
			cd := checks[i].Decision
			q := p.Quota
			if q == 0 {
				q = cd.Limit
			}
			pol.WriteString(sfString(name) + ";q=" + strconv.FormatInt(clampSF(q), 10))
			if p.Window > 0 {
				pol.WriteString(";w=" + strconv.FormatInt(min(ceilSeconds(p.Window), maxSF), 10))
			}
			t := min(ceilSeconds(cd.ResetAfter), maxSF)
			if !cd.Allowed && cd.RetryAfter > 0 {
				t = min(ceilSeconds(cd.RetryAfter), maxSF)
			}
			cur.WriteString(sfString(name) + ";r=" + strconv.FormatInt(min(clampSF(cd.Remaining), clampSF(cd.Limit)), 10) + ";t=" + strconv.FormatInt(t, 10))
		}
		h[hRateLimitPolicy] = []string{pol.String()}
		h[hRateLimit] = []string{cur.String()}
	}
	if c.headers&HeadersLegacy != 0 {
		limit := clampSF(d.Limit)
		h[hLimit] = []string{strconv.FormatInt(limit, 10)}
		h[hRemaining] = []string{strconv.FormatInt(min(clampSF(d.Remaining), limit), 10)}
		h[hReset] = []string{strconv.FormatInt(min(ceilSeconds(d.ResetAfter), maxSF), 10)}
	}
	if c.headers&HeadersDiagnostic != 0 {
		if c.tier != "" {
			h[hTier] = []string{c.tier}
		}
		h[hScope] = []string{scope}
	}
}
