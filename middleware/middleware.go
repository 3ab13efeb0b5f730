package middleware

import (
	"context"
	"errors"

	"github.com/floodgate-go/floodgate"
)

// FailMode says what happens to a request when its limits cannot decide
// (a limiter returns an error, or panics). A cost or key that can never be
// admitted is refused whatever the fail mode.
type FailMode uint8

const (
	// FailOpen lets the request through (reported as
	// floodgate.OutcomeErrorOpen). It is the default: a broken limiter
	// should not take the service down with it.
	FailOpen FailMode = iota
	// FailClosed refuses the request as unavailable (HTTP 503, gRPC
	// codes.Unavailable) with a retry time of one second (reported as
	// floodgate.OutcomeErrorClosed): the client did nothing wrong, the
	// server could not check.
	FailClosed
	// FailError passes the failure on to the caller: the Envoy rate limit
	// service (rls) fails the call with gRPC Unavailable, and Envoy's
	// failure_mode_deny decides, as envoyproxy/ratelimit does (the
	// service's default). The HTTP and gRPC middleware have no caller to
	// pass it to and refuse it.
	FailError
)

// DelayMode says what happens to a request admitted with a Delay (a shaping
// limiter such as the leaky bucket in delay mode).
type DelayMode uint8

const (
	// DelayHonour holds the request for its Delay before the handler runs
	// (reported as floodgate.OutcomeDelayed), unless the delay would pass
	// the request's deadline or the request ends first: then it is refused
	// like a denial, with the delay as retry time, and its units are given
	// back. It is the default.
	DelayHonour DelayMode = iota
	// DelayRefuse refuses every delayed request at once, like a denial with
	// the delay as retry time, and gives its units back (where the limiter
	// implements floodgate.Refunder).
	DelayRefuse
)

// Acquirer is a concurrency limiter as a shedder sees it: something that
// hands out slots for in-flight work and sheds what it cannot take. The
// adaptive and priority limiters fit it through their Slot adapters
// (adaptive.Gate.Slot, adaptive.SlotFunc):
//
//	middleware.AcquirerFunc(lim.Slot) // lim an *adaptive.Gate
//
// A request that waited for a slot until its context ended should be
// reported as shed, not as an error. Implementations must be safe for
// concurrent use.
type Acquirer interface {
	// Acquire claims a slot for one request. ok false means the request is
	// shed (overload); err non-nil means the limiter could not decide. When
	// ok is true, release must be called exactly once when the work ends,
	// with success false when the work failed in a way that signals
	// overload (a drop that an adaptive limit learns from). release may be
	// nil when there is nothing to release.
	Acquire(ctx context.Context) (release func(success bool), ok bool, err error)
}

// AcquirerFunc adapts a function to the [Acquirer] interface.
type AcquirerFunc func(ctx context.Context) (release func(success bool), ok bool, err error)

// Acquire calls f(ctx).
func (f AcquirerFunc) Acquire(ctx context.Context) (func(success bool), bool, error) {
	return f(ctx)
}

// Waiter is a local, keyless throttle for outgoing requests: WaitN blocks
// until n units are available or ctx ends, and fails fast when the wait
// would pass ctx's deadline. The keyless bucket.Limiter satisfies it.
type Waiter interface {
	WaitN(ctx context.Context, n int) error
}

// Entry is one (key, value) of a request descriptor.
type Entry struct {
	Key, Value string
	// Credential marks a value that is a credential (an API key, a service
	// token): it is matched and resolved in clear, but stored and observed
	// only as a keyed hash.
	Credential bool
}

// Descriptor is what one request says about itself, in order
// ("service token t, route /img"); a request may carry several.
type Descriptor []Entry

// Matcher is what the Policies wrappers of httplimit and grpclimit ask of a
// policy set: the limits a request's descriptors match. policy.Live
// implements it. Implementations must be safe for concurrent use.
type Matcher interface {
	// Match appends to dst one check per limit the descriptors match,
	// each charging n units, and returns them with the number of
	// enforcing checks, which come first (the others are dry-run checks,
	// which never refuse). An error means the set could not match (a
	// resolver failed): the request then follows its fail mode.
	Match(ctx context.Context, descriptors []Descriptor, n int, dst []floodgate.Check) (checks []floodgate.Check, enforcing int, err error)
	// CheckCredentials returns an error when the set cannot keep
	// credentials (descriptor values marked Credential) out of its store
	// keys: a Policies wrapper with a credential entry refuses such a set.
	CheckCredentials() error
}

// ErrLimiterPanic is wrapped by the error reported to the observer when a
// limiter, a key, cost or descriptor function, or an Acquirer panics in a
// transport: the panic is recovered and the request follows its fail mode.
var ErrLimiterPanic = errors.New("floodgate: limiter panicked")

// HeaderSet selects the groups of rate-limit header fields a transport
// sends: the HTTP middleware (httplimit.WithHeaders) on its responses, the
// Envoy rate limit service (rls.WithHeaders) in response_headers_to_add.
// Each transport's WithHeaders says what each group holds there and refuses
// a group it does not send.
type HeaderSet uint8

// The header groups.
const (
	// HeadersIETF: RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers).
	HeadersIETF HeaderSet = 1 << iota
	// HeadersLegacy: X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset.
	HeadersLegacy
	// HeadersDiagnostic: X-RateLimit-Tier, X-RateLimit-Scope and
	// X-RateLimit-Reason (the HTTP middleware).
	HeadersDiagnostic
	// HeadersReference: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, the names envoyproxy/ratelimit sends with
	// LIMIT_RESPONSE_HEADERS_ENABLED (the Envoy service).
	HeadersReference
	// HeadersNone sends none of the groups.
	HeadersNone HeaderSet = 0
)
