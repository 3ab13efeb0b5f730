package httplimit

import (
	"net/http"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/describe"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/middleware"
)

// Source is one entry of a request descriptor: a key (as the policy set's
// rules name it) and where its value comes from. Build one with
// [ClientIPEntry], [HeaderEntry], [RouteEntry], [MethodEntry] or
// [ValueEntry].
type Source struct {
	e describe.Entry[request]
}

// request is what a Source reads: the request, and the config of the
// wrapper it runs in (trusted proxies, IP prefixes).
type request struct {
	c *config
	r *http.Request
}

// ClientIPEntry is the entry key = the client IP (trusted proxies and IP
// prefixes applied), envoy's "remote_address".
func ClientIPEntry(key string) Source {
	return Source{describe.Entry[request]{Key: key, Value: func(q request) string { return q.c.clientKey(q.r) }}}
}

// HeaderEntry is the entry key = the value of header name (a service token,
// an API key). The value is a credential: matched and resolved to its plan
// in clear, stored only as a keyed hash (policy.WithKeySecret). A request
// without the header does not yield the descriptor.
func HeaderEntry(name, key string) Source {
	canon := http.CanonicalHeaderKey(name)
	return Source{describe.Entry[request]{Key: key, Credential: true, Value: func(q request) string {
		if v := q.r.Header[canon]; len(v) > 0 {
			return v[0]
		}
		return ""
	}}}
}

// RouteEntry is the entry key = the request's route: the pattern of the
// http.ServeMux route that matched (r.Pattern), else the URL path. Put the
// middleware inside the mux (around each handler) for patterns.
func RouteEntry(key string) Source {
	return Source{describe.Entry[request]{Key: key, Value: func(q request) string {
		if q.r.Pattern != "" {
			return q.r.Pattern
		}
		return q.r.URL.Path
	}}}
}

// MethodEntry is the entry key = the request's method.
func MethodEntry(key string) Source {
	return Source{describe.Entry[request]{Key: key, Value: func(q request) string { return q.r.Method }}}
}

// ValueEntry is the entry key = f(r); "" means the request does not yield
// the descriptor. Mark values that are credentials with credential: they
// are then stored only as a keyed hash. A nil f is refused by
// [WithDescriptor].
func ValueEntry(key string, credential bool, f func(*http.Request) string) Source {
	e := describe.Entry[request]{Key: key, Credential: credential}
	if f != nil {
		e.Value = func(q request) string { return f(q.r) }
	}
	return Source{e}
}

// WithDescriptor adds a descriptor that every request yields to
// [Policies]: its entries, in order (for example the service token, then
// the route). A request for which an entry has no value does not yield that
// descriptor. It applies to Policies.
func WithDescriptor(entries ...Source) PoliciesOption {
	return policiesOpt(func(c *config) error {
		d := make([]describe.Entry[request], len(entries))
		for i, e := range entries {
			d[i] = e.e
		}
		if err := describe.Check(d); err != nil {
			return invalid("%v", err)
		}
		c.descriptors = append(c.descriptors, d)
		return nil
	})
}

type policiesMW struct {
	cfg  config
	set  *describe.Set[request]
	core *admit.Core
}

// Policies returns a wrapper that limits requests by the rules of a policy
// set (a [middleware.Matcher]; a *policy.Live is one): every request yields the descriptors of [WithDescriptor], the
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
// nil, no descriptor is given, or an option is nil or invalid.
func Policies(live middleware.Matcher, opts ...PoliciesOption) (func(http.Handler) http.Handler, error) {
	if nilcheck.Is(live) {
		return nil, invalid("nil policy set")
	}
	cfg, err := buildConfig(opts, PoliciesOption.applyPolicies)
	if err != nil {
		return nil, err
	}
	var cost func(request) int
	if cfg.cost != nil {
		cost = func(q request) int { return q.c.cost(q.r) }
	}
	if len(cfg.descriptors) == 0 {
		return nil, invalid("Policies needs at least one WithDescriptor")
	}
	set, err := describe.New(live, cfg.descriptors, cost)
	if err != nil {
		return nil, err
	}
	ac := admit.Config{
		Name: cfg.name, Tier: cfg.tier, Observer: cfg.observer,
		FailMode: cfg.failMode, DelayMode: cfg.delayMode, DryRun: cfg.dryRun,
	}
	m := &policiesMW{cfg: cfg, set: set, core: admit.NewDynamic(ac)}
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
	v, match := m.set.Decide(r.Context(), m.core, request{c, r}, floodgate.Event{Route: c.route}, start)
	scope := "descriptor"
	if c.headers&middleware.HeadersDiagnostic != 0 && len(match.Checks) > 0 {
		// The policy that decided: the refusing one, else the one with
		// the fewest units left.
		scope = m.core.Deciding(match.Checks, v)
	}
	admitted := c.answer(w, &v, scope, func() {
		if len(match.Checks) > 0 {
			c.writeHeaders(m, w.Header(), match.Checks, &v, scope)
		}
	})
	match.Release()
	if admitted {
		h.next.ServeHTTP(w, r)
	}
}
