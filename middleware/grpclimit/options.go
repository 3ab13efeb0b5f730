package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/describe"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/middleware"
)

// Option configures [New]. Each constructor takes its own option type,
// so that the compiler refuses an option given to a constructor it does
// not apply to: New takes Option, [Policies] PoliciesOption, [Shed]
// ShedOption, [NewClient] ClientOption. A [CommonOption] (names, observer,
// filter, fail mode, dry run) fits New, Policies and Shed; a [LimitOption]
// (IP prefixes, delays) fits New and Policies; [WithCost] fits New,
// Policies and NewClient. Options are applied in order; an option given a
// value it cannot use, or a nil option, makes the constructor return an
// error wrapping [floodgate.ErrInvalidConfig].
type Option interface {
	applyNew(*config) error
}

// PoliciesOption configures [Policies]: [WithDescriptor], [WithCost], a
// [LimitOption] or a [CommonOption].
type PoliciesOption interface {
	applyPolicies(*config) error
}

// ShedOption configures [Shed]: [WithShedRetryAfter], [WithClassFunc] or a
// [CommonOption].
type ShedOption interface {
	applyShed(*config) error
}

// ClientOption configures [NewClient].
type ClientOption interface {
	applyClient(*config) error
}

// CommonOption configures [New], [Policies] and [Shed] alike.
type CommonOption interface {
	Option
	PoliciesOption
	ShedOption
}

// LimitOption configures [New] and [Policies] alike.
type LimitOption interface {
	Option
	PoliciesOption
}

// CostOption is [WithCost]'s: it configures [New], [Policies] and
// [NewClient].
type CostOption interface {
	LimitOption
	ClientOption
}

// The implementations: one function type per set of constructors.
type (
	commonOpt   func(*config) error
	limitOpt    func(*config) error
	costOpt     func(*config) error
	newOpt      func(*config) error
	policiesOpt func(*config) error
	shedOpt     func(*config) error
	clientOpt   func(*config) error
)

func (f commonOpt) applyNew(c *config) error        { return f(c) }
func (f commonOpt) applyPolicies(c *config) error   { return f(c) }
func (f commonOpt) applyShed(c *config) error       { return f(c) }
func (f limitOpt) applyNew(c *config) error         { return f(c) }
func (f limitOpt) applyPolicies(c *config) error    { return f(c) }
func (f costOpt) applyNew(c *config) error          { return f(c) }
func (f costOpt) applyPolicies(c *config) error     { return f(c) }
func (f costOpt) applyClient(c *config) error       { return f(c) }
func (f newOpt) applyNew(c *config) error           { return f(c) }
func (f policiesOpt) applyPolicies(c *config) error { return f(c) }
func (f shedOpt) applyShed(c *config) error         { return f(c) }
func (f clientOpt) applyClient(c *config) error     { return f(c) }

// KeyFunc derives a rate-limit key from a call. fullMethod is the gRPC
// method name, "/package.Service/Method". Returning "" means "no key": the
// interceptor falls back to the peer address, so that a missing credential
// never disables limiting. The key reaches the store and its keys as it is:
// a key derived from a credential should be hashed (as [WithHeaderKey]
// does).
type KeyFunc func(ctx context.Context, fullMethod string) string

// CostFunc returns the cost of a call in the limiter's units. A cost the
// limiter refuses (below 1, or above its capacity) can never be admitted:
// the call is refused whatever the fail mode (see the response contract in
// the package documentation).
type CostFunc func(ctx context.Context, fullMethod string) int

// ClassFunc returns the priority class of a call for a shedder (see
// [WithClassFunc]). Its results should be a small fixed set: they become
// metric labels.
type ClassFunc func(ctx context.Context, fullMethod string) string

type keyKind uint8

const (
	keyPeer keyKind = iota
	keyHeader
	keyCustom
)

// extraLimit is one WithLimit: a limiter and its key (nil: the main key).
type extraLimit struct {
	limiter floodgate.Limiter
	key     KeyFunc
}

type config struct {
	name, tier string
	route      func(fullMethod string) string
	observer   floodgate.Observer // nil: none
	filter     func(ctx context.Context, fullMethod string) bool

	keyKind keyKind
	keySet  bool
	prefix  string
	keys    *keyCache
	header  string
	hasher  *credkey.Hasher // nil: the process's
	// processSecret: the header key is hashed with the per-process random
	// secret (no WithKeySecret), which a shared store refuses.
	processSecret bool
	keyFunc       KeyFunc
	cost          CostFunc
	v4Bits        int
	v6Bits        int
	limits        []extraLimit
	failMode      middleware.FailMode
	delayMode     middleware.DelayMode
	dryRun        bool

	shedRetry time.Duration
	class     ClassFunc

	client      clientConfig             // NewClient's settings
	descriptors [][]describe.Entry[call] // Policies' descriptors
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: grpclimit: "+format, append([]any{floodgate.ErrInvalidConfig}, args...)...)
}

// maxRetryAfter bounds the retry delays an option may set.
const maxRetryAfter = 24 * time.Hour

// buildConfig applies opts, in order, with apply (the constructor's method
// of its option type); keyed says whether the constructor keys calls (New,
// Policies).
func buildConfig[O any](keyed bool, opts []O, apply func(O, *config) error) (config, error) {
	c := config{
		v4Bits:    32,
		v6Bits:    64,
		shedRetry: time.Second,
		client: clientConfig{
			pushback: true, perMethod: true, maxPushback: time.Minute,
			retry: retryPolicy{maxAttempts: 1, baseDelay: 100 * time.Millisecond, maxDelay: 10 * time.Second},
		},
	}
	if keyed {
		c.keys = new(keyCache)
	}
	for i, o := range opts {
		if any(o) == nil {
			return config{}, invalid("option %d is nil", i)
		}
		if err := apply(o, &c); err != nil {
			return config{}, err
		}
	}
	if c.keyKind == keyHeader && c.hasher == nil {
		c.hasher, c.processSecret = processHasher(), true
	}
	return c, nil
}

// setKey records the key source, refusing a second one: with two key
// options only one could count, and which one would be a guess.
func (c *config) setKey(k keyKind) error {
	if c.keySet {
		return invalid("more than one key option (WithHeaderKey, WithKeyFunc)")
	}
	c.keySet, c.keyKind = true, k
	return nil
}

// WithName sets the policy name reported to the observer (Event.Policy)
// for the main limiter of [New] (limits added with [WithLimit] keep their
// own) and for [Shed]. The default is the limiter's own name (its
// [floodgate.Describer] policy name, its Config's Name; "" when it has
// none) for New, "" for Shed. It applies to New, Policies and Shed.
func WithName(name string) CommonOption {
	return commonOpt(func(c *config) error {
		if name == "" {
			return invalid("empty name")
		}
		c.name = name
		return nil
	})
}

// WithTier sets the tier label reported to the observer (Event.Tier), for
// example "edge" or "global". The default is empty. It applies to New,
// Policies and Shed.
func WithTier(tier string) CommonOption {
	return commonOpt(func(c *config) error { c.tier = tier; return nil })
}

// WithRouteFunc sets how a full method name maps to the route class
// reported to the observer (Event.Route). The default reports the full
// method name, "/package.Service/Method", whose set is bounded by the
// services the server registers; map it to fewer classes to keep metric
// cardinality down. A route function that panics reports the class
// "unknown". It applies to New, Policies and Shed.
func WithRouteFunc(route func(fullMethod string) string) CommonOption {
	return commonOpt(func(c *config) error {
		if route == nil {
			return invalid("nil route func")
		}
		c.route = route
		return nil
	})
}

// WithObserver sends the events of every call decided to o: one per
// (call, limit), with Source floodgate.SourceRequest (see the package
// documentation). The default sends none. o is called on
// the call's goroutine and must not block or panic (see
// [floodgate.Observer]). It applies to New, Policies and Shed.
func WithObserver(o floodgate.Observer) CommonOption {
	return commonOpt(func(c *config) error {
		if nilcheck.Is(o) {
			return invalid("nil observer")
		}
		c.observer = o
		return nil
	})
}

// WithFilter limits only the calls for which f returns true; the others pass
// untouched and are not reported. f runs on every call, before anything
// else: keep it cheap, and it must not panic (a panic there is the server's
// to handle, like a handler's). Use it to exempt health checks, or with
// [Methods] to give an expensive method a tighter limit of its own. It
// applies to New, Policies and Shed.
func WithFilter(f func(ctx context.Context, fullMethod string) bool) CommonOption {
	return commonOpt(func(c *config) error {
		if f == nil {
			return invalid("nil filter")
		}
		c.filter = f
		return nil
	})
}

// Methods returns a filter for [WithFilter] that selects exactly the given
// full method names ("/package.Service/Method").
func Methods(fullMethods ...string) func(ctx context.Context, fullMethod string) bool {
	set := make(map[string]struct{}, len(fullMethods))
	for _, m := range fullMethods {
		set[m] = struct{}{}
	}
	return func(_ context.Context, fullMethod string) bool {
		_, ok := set[fullMethod]
		return ok
	}
}

// ExceptMethods is a filter for [WithFilter] that selects every call but
// those to the given full method names: the complement of [Methods], for
// the broad limit of the methods that have no narrower one.
func ExceptMethods(fullMethods ...string) func(ctx context.Context, fullMethod string) bool {
	in := Methods(fullMethods...)
	return func(ctx context.Context, fullMethod string) bool { return !in(ctx, fullMethod) }
}

// WithHeaderKey keys calls by the first value of the incoming metadata
// entry name, for example "x-service-token". gRPC metadata are HTTP/2
// headers: this is the option httplimit spells the same way, and names are
// case-insensitive. A call without the entry, or with an empty value, is
// keyed by its peer address instead.
//
// The value is taken for a credential: it never reaches the store (nor a
// Redis key, nor the observer) in clear. The key is "md#" followed by the
// HMAC-SHA256 of the value, truncated to 128 bits, in unpadded base64url
// (25 bytes whatever the value), which also keeps the metadata namespace
// apart from peer addresses. The HMAC secret is a random one drawn once
// per process unless [WithKeySecret] sets one.
//
// Fleets: with the default per-process secret, two processes hash one
// token to two different keys. Every node that shares a store (a Redis
// behind several servers) must be given the same secret with
// WithKeySecret, or each node would keep its own budget per token (the
// fleet admitting a token N times its limit with N nodes) and a restart
// hand every token a fresh budget: New refuses WithHeaderKey without
// WithKeySecret when a limiter runs on a shared store ([github.com/floodgate-go/floodgate/store.IsShared]).
//
// It applies to New.
func WithHeaderKey(name string) Option {
	return newOpt(func(c *config) error {
		name = strings.ToLower(name)
		if !validMetadataName(name) {
			return invalid("bad metadata name %q", name)
		}
		if err := c.setKey(keyHeader); err != nil {
			return err
		}
		c.header = name
		return nil
	})
}

// minKeySecret is the shortest secret [WithKeySecret] accepts, in bytes.
const minKeySecret = 16

// WithKeySecret sets the secret of the keyed hash that turns [WithHeaderKey]
// values into keys (at least 16 bytes; 32 random bytes is
// right). Give the same secret to every node that shares a store, so that a
// token has one budget across the fleet; keep it secret (whoever holds it
// can test guessed tokens against the store's keys), and expect every
// token's budget to start afresh when it changes. The default is a random
// secret per process. secret is copied. It applies to New.
func WithKeySecret(secret []byte) Option {
	return newOpt(func(c *config) error {
		if len(secret) < minKeySecret {
			return invalid("key secret of %d bytes, want at least %d", len(secret), minKeySecret)
		}
		c.hasher = newKeyHasher(secret)
		return nil
	})
}

// WithKeyFunc keys calls by f. The key f returns is used as it is (keep it
// apart from peer keys, which are canonical addresses or prefixes such as
// "192.0.2.1" and "2001:db8::/64", and hash what comes from a credential);
// "" falls back to the peer address. A key function that panics is a
// limiter that could not decide (the [middleware.FailMode] applies). It applies to
// New.
func WithKeyFunc(f KeyFunc) Option {
	return newOpt(func(c *config) error {
		if f == nil {
			return invalid("nil key func")
		}
		if err := c.setKey(keyCustom); err != nil {
			return err
		}
		c.keyFunc = f
		return nil
	})
}

// WithKeyPrefix puts prefix in front of every key the interceptors charge
// (peer, header or custom, on every limit), for example "search " to keep a
// route's budgets apart from others' on one limiter. It applies to New.
func WithKeyPrefix(prefix string) Option {
	return newOpt(func(c *config) error { c.prefix = prefix; return nil })
}

// WithIPPrefix sets the prefix lengths peer addresses are aggregated to
// before they become keys: v4 bits for IPv4 (default 32, the address
// itself) and v6 bits for IPv6 (default 64: one budget per /64, the block a
// single host usually holds). It applies to New and Policies.
func WithIPPrefix(v4, v6 int) LimitOption {
	return limitOpt(func(c *config) error {
		if v4 < 1 || v4 > 32 || v6 < 1 || v6 > 128 {
			return invalid("IP prefix lengths %d/%d out of range 1..32/1..128", v4, v6)
		}
		c.v4Bits, c.v6Bits = v4, v6
		return nil
	})
}

// WithCost sets the cost of each call; the default is 1. Streams are charged
// once, when they open. Every limit of the call is charged the same cost. A
// cost function that panics is a limiter that could not decide (the
// [middleware.FailMode] applies). It applies to New and Policies; given to NewClient, it is the cost each call takes from the client's throttle.
func WithCost(f CostFunc) CostOption {
	return costOpt(func(c *config) error {
		if f == nil {
			return invalid("nil cost func")
		}
		c.cost = f
		return nil
	})
}

// WithLimit adds a limit every call is checked against together with the
// main one, all or nothing: a call is admitted only when every limit admits
// it, and a call one limit refuses is charged to none (per peer AND per
// token: a token's refusal costs the peer nothing). key derives the call's
// key on l ("" falls back to the peer address; the [WithKeyPrefix] prefix is
// the main key's alone, as on HTTP); nil means the main key, prefix
// included.
// [PeerKey] keys l by peer next to a main key from a header. The limits are
// decided by [floodgate.TakeAll]: atomically when every limiter is a keyed
// store limiter on one store. A refusal carries the longest retry time of
// the refusing limits, and its QuotaFailure detail names the limit that
// gave it (by l's own name, see the package documentation); the observer
// gets one event per limit, each under its limit's name ([WithName]
// renames the main limit only). It may be given several times; it applies
// to New.
func WithLimit(l floodgate.Limiter, key KeyFunc) Option {
	return newOpt(func(c *config) error {
		if nilcheck.Is(l) {
			return invalid("nil limiter in WithLimit")
		}
		c.limits = append(c.limits, extraLimit{limiter: l, key: key})
		return nil
	})
}

// WithFailMode sets what happens when the limiter errors or panics; the
// default is [middleware.FailOpen]. It applies to New, Policies and Shed.
func WithFailMode(m middleware.FailMode) CommonOption {
	return commonOpt(func(c *config) error {
		if m == middleware.FailError {
			return invalid("FailError is the Envoy service's (the call fails and Envoy decides); the interceptors answer themselves: FailOpen or FailClosed")
		}
		if m != middleware.FailOpen && m != middleware.FailClosed {
			return invalid("unknown fail mode %d", m)
		}
		c.failMode = m
		return nil
	})
}

// WithDelayMode sets what happens to a call admitted with a Delay; the
// default is [middleware.DelayHonour]. It applies to New and Policies.
func WithDelayMode(m middleware.DelayMode) LimitOption {
	return limitOpt(func(c *config) error {
		if m != middleware.DelayHonour && m != middleware.DelayRefuse {
			return invalid("unknown delay mode %d", m)
		}
		c.delayMode = m
		return nil
	})
}

// WithDryRun turns on shadow mode when on is true: every call is decided and
// reported, calls that would be refused are reported as
// floodgate.OutcomeWouldDeny and let through, and a limiter error lets the
// call through whatever the fail mode (reported as error_open). A shaping
// delay is not applied (the call is reported as allowed). It applies to New,
// Shed and Policies.
func WithDryRun(on bool) CommonOption {
	return commonOpt(func(c *config) error { c.dryRun = on; return nil })
}

// WithShedRetryAfter sets the retry delay sent with a shed call (RetryInfo
// and pushback trailer), in (0, 24h]; the default is one second. It applies
// to Shed.
func WithShedRetryAfter(d time.Duration) ShedOption {
	return shedOpt(func(c *config) error {
		if d <= 0 || d > maxRetryAfter {
			return invalid("shed retry-after %v outside (0, %v]", d, maxRetryAfter)
		}
		c.shedRetry = d
		return nil
	})
}

// WithClassFunc classifies calls for a priority shedder: f's result is
// reported as the event's Class, and handed to the [middleware.Acquirer] in its
// context (read it with [ClassFromContext]) so that the slot is claimed for
// that class. [HeaderClass] reads it from a metadata entry. A class
// function that panics gives the class "unknown". It applies to Shed.
func WithClassFunc(f ClassFunc) ShedOption {
	return shedOpt(func(c *config) error {
		if f == nil {
			return invalid("nil class func")
		}
		c.class = f
		return nil
	})
}

// validMetadataName reports whether s is a legal gRPC metadata key: lower
// case letters, digits, '-', '_' and '.', not starting with "grpc-" (those
// are reserved to gRPC itself).
func validMetadataName(s string) bool {
	if s == "" || strings.HasPrefix(s, "grpc-") {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= 'a' && b <= 'z', b >= '0' && b <= '9', b == '-', b == '_', b == '.':
		default:
			return false
		}
	}
	return true
}
