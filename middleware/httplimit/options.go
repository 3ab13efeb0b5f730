package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/describe"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/middleware"
)

// Option configures [Middleware]. Each constructor takes its own option
// type, so that the compiler refuses an option given to a constructor it
// does not apply to: Middleware takes Option, [Policies] PoliciesOption,
// [Shed] ShedOption, [NewTransport] TransportOption. A [CommonOption]
// (names, observer, fail mode, dry run, headers) fits Middleware, Policies
// and Shed; a [LimitOption] (cost, client IP, delays) fits Middleware and
// Policies. Options are applied in order; an option given a value it
// cannot use, or a nil option, makes the constructor return an error
// wrapping [floodgate.ErrInvalidConfig].
type Option interface {
	applyMiddleware(*config) error
}

// PoliciesOption configures [Policies]: [WithDescriptor], a
// [LimitOption] or a [CommonOption].
type PoliciesOption interface {
	applyPolicies(*config) error
}

// ShedOption configures [Shed]: [WithShedRetryAfter] or a [CommonOption].
type ShedOption interface {
	applyShed(*config) error
}

// CommonOption configures [Middleware], [Policies] and [Shed] alike.
type CommonOption interface {
	Option
	PoliciesOption
	ShedOption
}

// LimitOption configures [Middleware] and [Policies] alike.
type LimitOption interface {
	Option
	PoliciesOption
}

// TransportOption configures [NewTransport].
type TransportOption interface {
	applyTransport(*config) error
}

// The implementations: one function type per set of constructors.
type (
	commonOpt    func(*config) error
	limitOpt     func(*config) error
	mwOpt        func(*config) error
	policiesOpt  func(*config) error
	shedOpt      func(*config) error
	transportOpt func(*config) error
)

func (f commonOpt) applyMiddleware(c *config) error   { return f(c) }
func (f commonOpt) applyPolicies(c *config) error     { return f(c) }
func (f commonOpt) applyShed(c *config) error         { return f(c) }
func (f limitOpt) applyMiddleware(c *config) error    { return f(c) }
func (f limitOpt) applyPolicies(c *config) error      { return f(c) }
func (f mwOpt) applyMiddleware(c *config) error       { return f(c) }
func (f policiesOpt) applyPolicies(c *config) error   { return f(c) }
func (f shedOpt) applyShed(c *config) error           { return f(c) }
func (f transportOpt) applyTransport(c *config) error { return f(c) }

// KeyFunc derives a rate-limit key from a request. Returning "" means "no
// key": the middleware falls back to the client IP, so that a missing header
// never disables limiting. A key the store refuses (an error wrapping
// floodgate.ErrInvalidKey) is answered 429 whatever the fail mode, with the
// reason "invalid_key", so that a crafted key cannot buy a fail-open pass.
type KeyFunc func(r *http.Request) string

// CostFunc returns the cost of a request in the limiter's units. A cost the
// limiter refuses (below 1, or above its burst: an error wrapping
// floodgate.ErrInvalidCost) is answered 429 whatever the fail mode, with the
// reason "cost_exceeds_limit": such a request could never be admitted, and
// failing open would exempt exactly the most expensive requests.
type CostFunc func(r *http.Request) int

// extraLimit is a limit added with WithLimit.
type extraLimit struct {
	l   floodgate.Limiter
	key KeyFunc
}

type keyKind uint8

const (
	keyIP keyKind = iota
	keyHeader
	keyCustom
)

type config struct {
	name, tier, route string
	observer          floodgate.Observer

	keyKind     keyKind
	header      string // canonical header name for keyHeader
	keyFunc     KeyFunc
	keyPrefix   string // prefix + " " when non-empty
	secret      []byte // WithKeySecret, or nil: a random one
	hasher      *credkey.Hasher
	extra       []extraLimit
	descriptors [][]describe.Entry[request] // Policies' descriptors
	cost        CostFunc
	trusted     []netip.Prefix
	fwdHeader   string // "X-Forwarded-For" or "Forwarded"
	v4Bits      int
	v6Bits      int
	headers     middleware.HeaderSet
	policy      floodgate.Description
	problem     bool
	jitter      time.Duration
	failMode    middleware.FailMode
	delayMode   middleware.DelayMode
	dryRun      bool
	shedRetry   time.Duration
	transport   Transport // NewTransport's settings
}

func defaultConfig() config {
	return config{
		fwdHeader: hXFF,
		v4Bits:    32,
		v6Bits:    64,
		headers:   middleware.HeadersIETF | middleware.HeadersLegacy,
		shedRetry: time.Second,
		transport: Transport{
			maxAttempts: 3,
			baseDelay:   100 * time.Millisecond,
			capDelay:    10 * time.Second,
			maxWait:     30 * time.Second,
		},
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: httplimit: "+format, append([]any{floodgate.ErrInvalidConfig}, args...)...)
}

// WithName sets the policy name reported to the observer (Event.Policy);
// by default the limiter's own Name. It names Middleware's main limiter
// (limits added with [WithLimit] keep their names) and Shed's events. It
// applies to Middleware and Shed.
func WithName(name string) CommonOption {
	return commonOpt(func(c *config) error { c.name = name; return nil })
}

// WithTier sets the tier label reported to the observer and sent in
// X-RateLimit-Tier when diagnostic headers are on. It must be printable
// ASCII.
func WithTier(tier string) CommonOption {
	return commonOpt(func(c *config) error {
		if !printable(tier) {
			return invalid("tier %q is not printable ASCII", tier)
		}
		c.tier = tier
		return nil
	})
}

// WithRoute sets the route class reported to the observer (Event.Route), for
// example "/search". Build one middleware per route to give routes their own
// labels, dry-run flag and fail mode.
func WithRoute(route string) CommonOption {
	return commonOpt(func(c *config) error { c.route = route; return nil })
}

// WithObserver sends every decision to o. Without an observer the
// middleware does not even read the clock to time decisions.
func WithObserver(o floodgate.Observer) CommonOption {
	return commonOpt(func(c *config) error {
		if nilcheck.Is(o) {
			return invalid("nil observer")
		}
		c.observer = o
		return nil
	})
}

// WithHeaderKey keys requests by the value of header name (for example
// "X-Service-Token" or "Authorization"). A request without the header, or
// with an empty value, is keyed by its client IP instead. The value is
// treated as a credential: the key is a keyed hash of it (see
// [WithKeySecret]), so that neither a store nor an observer ever sees it in
// clear, and header keys live in their own namespace: a header value can
// never share a budget with an IP address. It applies to Middleware.
func WithHeaderKey(name string) Option {
	return mwOpt(func(c *config) error {
		if name == "" || !validHeaderName(name) {
			return invalid("bad header name %q", name)
		}
		if c.keyKind != keyIP {
			return invalid("more than one key option (WithHeaderKey, WithKeyFunc)")
		}
		c.keyKind = keyHeader
		c.header = http.CanonicalHeaderKey(name)
		return nil
	})
}

// WithKeyFunc keys requests by f. The key f returns is used as it is (keep it
// apart from IP keys, which are canonical addresses or prefixes such as
// "192.0.2.1" and "2001:db8::/64"); "" falls back to the client IP.
//
// Keys derived from credentials should be hashed by f (WithHeaderKey does
// it for a header). It applies to Middleware.
func WithKeyFunc(f KeyFunc) Option {
	return mwOpt(func(c *config) error {
		if f == nil {
			return invalid("nil key func")
		}
		if c.keyKind != keyIP {
			return invalid("more than one key option (WithHeaderKey, WithKeyFunc)")
		}
		c.keyKind = keyCustom
		c.keyFunc = f
		return nil
	})
}

// WithKeyPrefix scopes every key to prefix (for example a route): the key
// becomes prefix + " " + key, so that one limiter (and one store) can hold
// separate budgets per route. It applies to Middleware.
func WithKeyPrefix(prefix string) Option {
	return mwOpt(func(c *config) error {
		if prefix == "" {
			return invalid("empty key prefix")
		}
		c.keyPrefix = prefix + " "
		return nil
	})
}

// WithKeySecret sets the secret of the keyed hash (HMAC-SHA256) that turns
// a credential (the value of [WithHeaderKey]'s header) into a key: no store
// and no observer ever sees the credential itself. secret must be at least
// 16 bytes. It applies to Middleware.
//
// Without it each process draws a random secret at start: safe, but two
// processes then derive different keys from one credential. Every node
// that shares a store (Redis) must be given the same secret, or each node
// would keep its own budget per credential and the fleet admit N times the
// limit: Middleware refuses a header key without this option when a
// limiter runs on a shared store ([github.com/floodgate-go/floodgate/store.IsShared]).
func WithKeySecret(secret []byte) Option {
	return mwOpt(func(c *config) error {
		if len(secret) < 16 {
			return invalid("key secret of %d bytes: want at least 16", len(secret))
		}
		c.secret = append([]byte(nil), secret...)
		return nil
	})
}

// WithLimit adds a limit that every request is also checked against, with
// its own key: key(r). A nil key means the middleware's key (see
// [WithHeaderKey] and [WithKeyFunc]); a key that returns "" means the
// client IP, as for every KeyFunc ([ClientIPKey] is that KeyFunc). The middleware's limiter and every
// added limit decide together, all or nothing, with [floodgate.TakeAll]: a
// request one of them refuses charges none of them ("per IP AND per API
// key"), and its Retry-After is the longest among the refusing limits. Each
// limit gets its own member in RateLimit-Policy and RateLimit, named by the
// limiter's Name. It applies to Middleware.
func WithLimit(l floodgate.Limiter, key KeyFunc) Option {
	return mwOpt(func(c *config) error {
		if nilcheck.Is(l) {
			return invalid("WithLimit: nil limiter")
		}
		c.extra = append(c.extra, extraLimit{l: l, key: key})
		return nil
	})
}

// WithCost sets the cost of each request. The default is 1.
func WithCost(f CostFunc) LimitOption {
	return limitOpt(func(c *config) error {
		if f == nil {
			return invalid("nil cost func")
		}
		c.cost = f
		return nil
	})
}

// WithTrustedProxies lists the proxies whose forwarding header
// (X-Forwarded-For, or Forwarded with [WithForwardedHeader]) is believed.
// Only when the direct peer is inside one of prefixes is the client IP taken
// from that header: the rightmost address that is not itself a trusted
// proxy. With no trusted proxies (the default) the
// headers are ignored and the client IP is the peer's address.
func WithTrustedProxies(prefixes ...netip.Prefix) LimitOption {
	return limitOpt(func(c *config) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return invalid("invalid trusted proxy prefix %v", p)
			}
			c.trusted = append(c.trusted, p.Masked())
		}
		return nil
	})
}

// WithForwardedHeader chooses the header trusted proxies report the client
// in: "X-Forwarded-For" (the default) or "Forwarded" (RFC 7239). Only that
// header is read: a proxy that appends to X-Forwarded-For passes a forged
// Forwarded header through untouched, so reading both would let clients
// pick their key.
func WithForwardedHeader(name string) LimitOption {
	return limitOpt(func(c *config) error {
		switch {
		case strings.EqualFold(name, hXFF):
			c.fwdHeader = hXFF
		case strings.EqualFold(name, hForwarded):
			c.fwdHeader = hForwarded
		default:
			return invalid("forwarded header %q: want X-Forwarded-For or Forwarded", name)
		}
		return nil
	})
}

// WithIPPrefix aggregates client addresses before they become keys: IPv4
// addresses to v4Bits (1..32, default 32: one key per address) and IPv6
// addresses to v6Bits (1..128, default 64: one key per /64, the smallest
// block a single subscriber usually holds).
func WithIPPrefix(v4Bits, v6Bits int) LimitOption {
	return limitOpt(func(c *config) error {
		if v4Bits < 1 || v4Bits > 32 || v6Bits < 1 || v6Bits > 128 {
			return invalid("IP prefix lengths %d/%d outside 1..32/1..128", v4Bits, v6Bits)
		}
		c.v4Bits, c.v6Bits = v4Bits, v6Bits
		return nil
	})
}

// WithHeaders selects which header groups are sent (default
// [middleware.HeadersIETF] | [middleware.HeadersLegacy]): the IETF fields,
// the legacy X-RateLimit fields and the diagnostic ones
// ([middleware.HeadersDiagnostic]: X-RateLimit-Tier, X-RateLimit-Scope and
// X-RateLimit-Reason, the last only on refusals); [middleware.HeadersNone]
// sends none of them (Retry-After and Cache-Control on refusals are part of
// the status contract and always sent). [middleware.HeadersReference] is the
// Envoy service's and is refused here.
func WithHeaders(h middleware.HeaderSet) CommonOption {
	return commonOpt(func(c *config) error {
		if h&middleware.HeadersReference != 0 {
			return invalid("HeadersReference is for the Envoy service (response_headers_to_add), not the HTTP middleware")
		}
		if h&^(middleware.HeadersIETF|middleware.HeadersLegacy|middleware.HeadersDiagnostic) != 0 {
			return invalid("unknown header set %#x", uint8(h))
		}
		c.headers = h
		return nil
	})
}

// WithPolicy restates the policy advertised in RateLimit-Policy and
// RateLimit: its Name (a structured-field String, printable ASCII), Quota
// and Window (q per w seconds, scaled by the smallest whole factor that
// makes q at least the limiter's capacity and w whole seconds; see the
// package documentation). It is optional, and so is each field (a zero
// one is not restated): by default they come from the limiter itself (see
// [floodgate.Describer]), and the name is "default" when the limiter has
// none. A restated Quota or Window must match what the
// limiter describes, or Middleware returns an error; a limiter that cannot
// describe itself advertises Decision.Limit as q and no w unless restated.
// Capacity and Undelayed are the limiter's own and must be zero. It applies
// to Middleware.
func WithPolicy(p floodgate.Description) Option {
	return mwOpt(func(c *config) error {
		if !printable(p.Name) {
			return invalid("policy name %q is not printable ASCII", p.Name)
		}
		if p.Quota < 0 || p.Window < 0 {
			return invalid("negative policy quota or window")
		}
		if p.Capacity != 0 || p.Undelayed != 0 {
			return invalid("WithPolicy restates Name, Quota and Window only: Capacity and Undelayed come from the limiter")
		}
		c.policy = p
		return nil
	})
}

// WithProblemDetails makes refusals carry an application/problem+json body
// (RFC 9457) instead of a one-line text/plain body. The body states the
// status and the retry delay; it never contains the key.
func WithProblemDetails(on bool) CommonOption {
	return commonOpt(func(c *config) error { c.problem = on; return nil })
}

// WithRetryJitter adds a uniformly random delay in [0, max] to Retry-After
// on refusals (before rounding up to whole seconds), so that refused
// clients do not all come back in the same second.
func WithRetryJitter(max time.Duration) CommonOption {
	return commonOpt(func(c *config) error {
		if max < 0 || max > maxJitter {
			return invalid("retry jitter %v outside 0..%v", max, maxJitter)
		}
		c.jitter = max
		return nil
	})
}

// WithFailMode sets what happens when the limiter cannot decide (see
// [middleware.FailMode]). The default is [middleware.FailOpen].
func WithFailMode(m middleware.FailMode) CommonOption {
	return commonOpt(func(c *config) error {
		if m == middleware.FailError {
			return invalid("FailError is the Envoy service's (the call fails and Envoy decides); the middleware answers itself: FailOpen or FailClosed")
		}
		if m > middleware.FailClosed {
			return invalid("unknown fail mode %d", m)
		}
		c.failMode = m
		return nil
	})
}

// WithDelayMode sets what happens to requests a shaping limiter admits with
// a delay (see [middleware.DelayMode]). The default is
// [middleware.DelayHonour].
func WithDelayMode(m middleware.DelayMode) LimitOption {
	return limitOpt(func(c *config) error {
		if m > middleware.DelayRefuse {
			return invalid("unknown delay mode %d", m)
		}
		c.delayMode = m
		return nil
	})
}

// WithDryRun turns shadow mode on: every request is decided, charged and
// reported (a refusal as floodgate.OutcomeWouldDeny) exactly as enforcement
// would, but the client sees nothing of it: no refusal, no delay, no
// rate-limit headers. Use it on a route before enforcing a new limit there.
func WithDryRun(on bool) CommonOption {
	return commonOpt(func(c *config) error { c.dryRun = on; return nil })
}

// WithShedRetryAfter sets the Retry-After sent with 503 when [Shed] sheds a
// request (default 1s; rounded up to whole seconds).
func WithShedRetryAfter(d time.Duration) ShedOption {
	return shedOpt(func(c *config) error {
		if d <= 0 || d > maxShedRetry {
			return invalid("shed Retry-After %v outside (0, %v]", d, maxShedRetry)
		}
		c.shedRetry = d
		return nil
	})
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

// Bounds of the duration options.
const (
	maxJitter    = 10 * time.Minute
	maxShedRetry = 24 * time.Hour
)

// buildConfig applies opts, in order, with apply (the constructor's
// method of its option type).
func buildConfig[O any](opts []O, apply func(O, *config) error) (config, error) {
	c := defaultConfig()
	for i, o := range opts {
		if any(o) == nil {
			return c, invalid("option %d is nil", i)
		}
		if err := apply(o, &c); err != nil {
			return c, err
		}
	}
	c.hasher = credkey.New(c.secret, "hdr#")
	return c, nil
}
