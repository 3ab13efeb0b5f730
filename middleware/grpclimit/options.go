package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Option configures the server interceptors built by [New] and [NewShedder].
// Options are applied in order; an option given a value it cannot use makes
// the constructor return an error wrapping [floodgate.ErrInvalidConfig].
type Option func(*config) error

// FailMode says what happens to a call when the limiter cannot decide: it
// returns an error, or panics.
type FailMode uint8

const (
	// FailOpen lets the call through (reported as
	// floodgate.OutcomeErrorOpen). It is the default: a broken limiter should
	// not take the service down with it.
	FailOpen FailMode = iota
	// FailClosed refuses the call with codes.Unavailable, a RetryInfo of one
	// second and the matching pushback trailer (reported as
	// floodgate.OutcomeErrorClosed). Unavailable and not ResourceExhausted:
	// the client did nothing wrong, the server could not check.
	FailClosed
)

// KeyFunc derives a rate-limit key from a call. fullMethod is the gRPC
// method name, "/package.Service/Method". Returning "" means "no key": the
// interceptor falls back to the peer address, so that a missing credential
// never disables limiting.
type KeyFunc func(ctx context.Context, fullMethod string) string

// CostFunc returns the cost of a call in the limiter's units. A cost below 1
// or above the limiter's burst makes the limiter fail (see [FailMode]).
type CostFunc func(ctx context.Context, fullMethod string) int

type keyKind uint8

const (
	keyPeer keyKind = iota
	keyMetadata
	keyCustom
)

type config struct {
	name, tier string
	route      func(fullMethod string) string
	observer   floodgate.Observer
	timed      bool // an observer was given: measure decision latency
	filter     func(ctx context.Context, fullMethod string) bool

	keyKind  keyKind
	keySet   bool
	prefix   string
	keys     *keyCache
	mdName   string
	keyFunc  KeyFunc
	cost     CostFunc
	v4Bits   int
	v6Bits   int
	failMode FailMode
	dryRun   bool

	shedRetry time.Duration
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: grpclimit: "+format, append([]any{floodgate.ErrInvalidConfig}, args...)...)
}

func buildConfig(opts []Option) (config, error) {
	c := config{
		name:      "grpc",
		observer:  floodgate.NopObserver,
		v4Bits:    32,
		v6Bits:    64,
		shedRetry: time.Second,
		keys:      new(keyCache),
	}
	for _, o := range opts {
		if o == nil {
			return config{}, invalid("nil option")
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// setKey records the key source, refusing a second one: with two key
// options only one could count, and which one would be a guess.
func (c *config) setKey(k keyKind) error {
	if c.keySet {
		return invalid("more than one key option (WithMetadataKey, WithKeyFunc)")
	}
	c.keySet, c.keyKind = true, k
	return nil
}

// WithName sets the limiter name reported to the observer (Event.Limiter).
// The default is "grpc".
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return invalid("empty name")
		}
		c.name = name
		return nil
	}
}

// WithTier sets the tier label reported to the observer (Event.Tier), for
// example "edge" or "global". The default is empty.
func WithTier(tier string) Option {
	return func(c *config) error { c.tier = tier; return nil }
}

// WithRoute sets how a full method name maps to the route class reported to
// the observer (Event.Route). The default reports the full method name,
// "/package.Service/Method", whose set is bounded by the services the server
// registers; map it to fewer classes to keep metric cardinality down. A
// route function that panics reports the class "unknown".
func WithRoute(route func(fullMethod string) string) Option {
	return func(c *config) error {
		if route == nil {
			return invalid("nil route func")
		}
		c.route = route
		return nil
	}
}

// WithObserver sends every decision to o. The default discards them. o is
// called on the call's goroutine and must not block or panic (see
// [floodgate.Observer]).
func WithObserver(o floodgate.Observer) Option {
	return func(c *config) error {
		if o == nil {
			return invalid("nil observer")
		}
		c.observer, c.timed = o, true
		return nil
	}
}

// WithFilter limits only the calls for which f returns true; the others pass
// untouched and are not reported. f runs on every call, before anything
// else: keep it cheap, and it must not panic (a panic there is the server's
// to handle, like a handler's). Use it to exempt health checks, or with
// [Methods] to give an expensive method a tighter limit of its own.
func WithFilter(f func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) error {
		if f == nil {
			return invalid("nil filter")
		}
		c.filter = f
		return nil
	}
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

// WithMetadataKey keys calls by the first value of the incoming metadata
// entry name (for example "x-service-token"; names are case-insensitive). A
// call without the entry, or with an empty value, is keyed by its peer
// address instead. Metadata keys live in their own namespace ("md:" + value):
// a value can never share a budget with an IP address. Values longer than
// 128 bytes or holding bytes outside printable ASCII are replaced by a
// SHA-256 digest, so that hostile values cannot bloat a store.
func WithMetadataKey(name string) Option {
	return func(c *config) error {
		name = strings.ToLower(name)
		if !validMetadataName(name) {
			return invalid("bad metadata name %q", name)
		}
		if err := c.setKey(keyMetadata); err != nil {
			return err
		}
		c.mdName = name
		return nil
	}
}

// WithKeyFunc keys calls by f. The key f returns is used as it is (keep it
// apart from peer keys, which are canonical addresses or prefixes such as
// "192.0.2.1" and "2001:db8::/64"); "" falls back to the peer address.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return invalid("nil key func")
		}
		if err := c.setKey(keyCustom); err != nil {
			return err
		}
		c.keyFunc = f
		return nil
	}
}

// WithKeyPrefix puts prefix in front of every key (peer, metadata or
// custom). Policies whose limiters share a store and have the same
// configuration share their state for equal keys; a prefix per policy (for
// example "search ") keeps them apart.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error { c.prefix = prefix; return nil }
}

// WithIPPrefix sets the prefix lengths peer addresses are aggregated to
// before they become keys: v4 bits for IPv4 (default 32, the address
// itself) and v6 bits for IPv6 (default 64: one budget per /64, the block a
// single host usually holds).
func WithIPPrefix(v4, v6 int) Option {
	return func(c *config) error {
		if v4 < 1 || v4 > 32 || v6 < 1 || v6 > 128 {
			return invalid("IP prefix lengths %d/%d out of range 1..32/1..128", v4, v6)
		}
		c.v4Bits, c.v6Bits = v4, v6
		return nil
	}
}

// WithCost sets the cost of each call; the default is 1. Streams are charged
// once, when they open.
func WithCost(f CostFunc) Option {
	return func(c *config) error {
		if f == nil {
			return invalid("nil cost func")
		}
		c.cost = f
		return nil
	}
}

// WithFailMode sets what happens when the limiter errors or panics; the
// default is [FailOpen].
func WithFailMode(m FailMode) Option {
	return func(c *config) error {
		if m != FailOpen && m != FailClosed {
			return invalid("unknown fail mode %d", m)
		}
		c.failMode = m
		return nil
	}
}

// WithDryRun turns on shadow mode when on is true: every call is decided and
// reported, calls that would be refused are reported as
// floodgate.OutcomeWouldDeny and let through, and a limiter error lets the
// call through whatever the fail mode (reported as error_open). Delays are
// reported (floodgate.OutcomeDelayed) but not applied.
func WithDryRun(on bool) Option {
	return func(c *config) error { c.dryRun = on; return nil }
}

// WithShedRetryAfter sets the retry delay sent with a shed call (RetryInfo
// and pushback trailer) when the Acquirer does not say; the default is one
// second. It applies to [NewShedder] only.
func WithShedRetryAfter(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return invalid("shed retry-after %v < 1ms", d)
		}
		c.shedRetry = d
		return nil
	}
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
