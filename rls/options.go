package rls

import (
	"bytes"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
)

// Option configures New.
type Option struct {
	apply func(*options) error
}

type options struct {
	observer  floodgate.Observer
	metrics   *Metrics
	headers   middleware.HeaderSet
	shadow    bool
	failure   middleware.FailMode
	nearRatio float64
	onReload  func(Reload)
	now       func() time.Time
	secret    []byte
	logger    *slog.Logger
	// noHeaderNames: RateLimit-Policy members are named by position.
	noHeaderNames bool
	quota         bool // global quota mode
	metadata      bool // dynamic metadata on every response
	overCache     int  // entries of the over-limit cache (0: none)
}

// WithGlobalQuotaMode puts every descriptor in quota mode, as the
// reference's QUOTA_MODE setting: a descriptor over its limit answers OK
// (with its current_limit and limit_remaining 0, no
// duration_until_reset) and never makes the response OVER_LIMIT; each
// descriptor is charged on its own when it admits. The dynamic metadata
// ([WithDynamicMetadata]) lists the descriptors over their limit.
func WithGlobalQuotaMode(on bool) Option {
	return Option{func(c *options) error { c.quota = on; return nil }}
}

// WithDynamicMetadata sets dynamic_metadata on every response, as the
// reference's RESPONSE_DYNAMIC_METADATA setting: a struct with domain,
// descriptors (each with entries, "key=value" strings, and its limit and
// hitsAddend when the request sets them), hitsAddend (the request's, when
// not 0), quotaModeViolations (the indexes of the quota-mode descriptors
// over their limit, when any) and quotaModeEnabled (whether a matched
// limit is in quota mode in the config; the global quota mode does not
// count, as in the reference). Envoy puts it in the request's dynamic
// metadata under envoy.filters.http.ratelimit.
func WithDynamicMetadata(on bool) Option {
	return Option{func(c *options) error { c.metadata = on; return nil }}
}

// WithOverLimitCache keeps up to n keys known to be over their limit in
// memory, until their limit would admit again (the reference's
// LOCAL_CACHE_SIZE_IN_BYTES, counted in keys): a request on such a key is
// refused without charging anything in the store, with the answer the
// store would have given (a request whose other descriptors have limits
// still reads them, in one store call that changes nothing; a request
// whose every counted key is known over makes no store call). A key is
// remembered when it was refused with nothing left: on a fixed window
// until the window's end, on the other algorithms when a single unit was
// refused, until one unit is back. Leased limits, shadow-mode and
// quota-mode descriptors are not cached. Hits given back on this process
// (is_negative_hits) and a reload forget what is remembered; hits given
// back on another process sharing the store are not seen until the
// entry expires, as in the reference. n = 0 (the default): no cache.
func WithOverLimitCache(n int) Option {
	return Option{func(c *options) error {
		if n < 0 {
			return fmt.Errorf("%w: rls: over-limit cache of %d keys", floodgate.ErrInvalidConfig, n)
		}
		c.overCache = n
		return nil
	}}
}

// WithHeaderPolicyNames says how the members of RateLimit-Policy and
// RateLimit (middleware.HeadersIETF) are named, which end clients see. On (the
// default): a limit's rate_limit name when set, else "rl-" and a short
// stable hash of its config path, which tells nothing of the config. Off:
// by position, as floodgate's middleware names unnamed limits: "default"
// for the first member, "limit-2", "limit-3" for the next.
func WithHeaderPolicyNames(on bool) Option {
	return Option{func(c *options) error { c.noHeaderNames = !on; return nil }}
}

// WithLogger logs on l when the store stops deciding (Redis away: the
// failure mode, or redisstore's local fallback, answers) and when it
// decides again, once per transition, not per request.
func WithLogger(l *slog.Logger) Option {
	return Option{func(c *options) error {
		if l == nil {
			return fmt.Errorf("%w: rls: nil logger", floodgate.ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}}
}

// WithObserver reports to o the events of every ShouldRateLimit call, one
// per (request, limit), through floodgate's admission core as its HTTP and
// gRPC middleware report theirs. Each limit of a descriptor the call
// decided (its rate_limit and each of its rate_limits) gets an event whose
// Policy is the name RateLimit-Policy advertises the limit under (the
// rate_limit's name, else "rl-" and a hash of its config path, whatever
// [WithHeaderPolicyNames] says; never a request's values), whose Decision
// is that limit's own, and whose Outcome is:
//
//   - for the enforcing descriptors (and those checking without counting,
//     hits_addend 0, neither shadow nor quota mode): allowed, or denied for
//     a limit that refused the request; a limit that would have admitted a
//     request another refused reports allowed (all or nothing, it charged
//     nothing). In the global shadow mode ([WithGlobalShadowMode]) a
//     refusing limit reports would_deny.
//   - for a quota-mode descriptor, on its own: allowed, or would_deny when
//     over its limit (it never refuses the request).
//   - for the shadow-mode descriptors, with Source floodgate.SourceShadow:
//     allowed or would_deny, only when the request was admitted (the
//     requests that charge them), as floodgate's dry-run policies.
//   - fallback, in place of the above, when the Redis store's local
//     fallback decided (floodgate.Decision.Fallback).
//   - when the store could not decide, or its blanket FailOpen or
//     FailClosed answered: error_closed for each limit of the enforcing
//     and quota-mode descriptors under FailClosed (answered OVER_LIMIT),
//     else error_open (FailOpen; FailError, where the call fails and
//     Envoy's failure_mode_deny decides; the global shadow mode), with the
//     store's error in Err; shadow-mode descriptors report none.
//
// Descriptors that give hits back (is_negative_hits), unlimited ones and
// those without a limit report nothing; a call that reports no limit gets
// one event under Policy "rls" (allowed, or its failure outcome). Latency
// runs from the call's start to the event.
func WithObserver(o floodgate.Observer) Option {
	return Option{func(c *options) error {
		if o == nil {
			return fmt.Errorf("%w: rls: nil observer", floodgate.ErrInvalidConfig)
		}
		c.observer = o
		return nil
	}}
}

// WithMetrics counts every decision in m (see NewMetrics).
func WithMetrics(m *Metrics) Option {
	return Option{func(c *options) error {
		if m == nil {
			return fmt.Errorf("%w: rls: nil metrics", floodgate.ErrInvalidConfig)
		}
		c.metrics = m
		return nil
	}}
}

// WithHeaders adds the header groups of h to response_headers_to_add
// (default none, as the reference):
//
//   - [middleware.HeadersIETF]: RateLimit-Policy, one member per limited
//     descriptor ("name";q=requests;w=window seconds, where q per w is
//     requests_per_unit per unit scaled by the smallest whole factor that
//     makes q at least the limit's capacity: a token bucket of 100 a second
//     with a burst of 200 is q=200;w=2), and RateLimit, with r (units left,
//     never above q) and t, as draft-ietf-httpapi-ratelimit-headers writes
//     them and floodgate's middleware sends them. An OK response has a
//     RateLimit member per descriptor, t the seconds until its limit is full
//     again (a fixed window's end); an OVER_LIMIT one only the members of the
//     descriptors over their limit (shadow ones aside), r 0 and t the seconds
//     until the limit would admit, so that no t exceeds the longest
//     duration_until_reset of the refusing descriptors (X-RateLimit-Reset).
//     A member's name is the rate_limit's name, else a short hash of its
//     config path, never the path itself (see WithHeaderPolicyNames).
//   - [middleware.HeadersLegacy]: X-RateLimit-Limit, X-RateLimit-Remaining
//     and X-RateLimit-Reset (seconds) of the descriptor closest to its limit
//     (or the one over it), as floodgate's middleware writes them:
//     X-RateLimit-Limit is the limit's capacity (a token bucket's burst,
//     which may exceed requests_per_unit; a window's requests_per_unit), so
//     that Remaining never exceeds it, and Reset the seconds until the
//     budget is full again (on a refusal, until the request would pass).
//   - [middleware.HeadersReference]: RateLimit-Limit, RateLimit-Remaining
//     and RateLimit-Reset as the reference writes them with
//     LIMIT_RESPONSE_HEADERS_ENABLED, for clients that rely on them: of the
//     descriptor with the fewest units left (the last one over its limit,
//     quota-mode ones aside, when any is), its requests_per_unit,
//     limit_remaining and the whole seconds until its window ends
//     (duration_until_reset; for a quota-mode descriptor over its limit,
//     which has none, the end of its unit, as the reference).
//
// [middleware.HeadersDiagnostic] is the HTTP middleware's and is refused.
func WithHeaders(h middleware.HeaderSet) Option {
	return Option{func(c *options) error {
		if h&^(middleware.HeadersIETF|middleware.HeadersLegacy|middleware.HeadersReference) != 0 {
			return fmt.Errorf("%w: rls: header set %d: only HeadersIETF, HeadersLegacy and HeadersReference apply to the Envoy service", floodgate.ErrInvalidConfig, h)
		}
		c.headers = h
		return nil
	}}
}

// WithGlobalShadowMode answers OK overall whatever the limits say, as the
// reference's SHADOW_MODE setting (per-descriptor statuses still tell).
func WithGlobalShadowMode(on bool) Option {
	return Option{func(c *options) error { c.shadow = on; return nil }}
}

// WithFailMode sets what ShouldRateLimit answers when the store cannot
// decide (Redis away, and the store's own failure policy returned the
// error):
//
//   - [middleware.FailError], the default, is Envoy's own: the call fails
//     with gRPC Unavailable, as the reference's, and Envoy's
//     failure_mode_deny decides.
//   - [middleware.FailOpen] answers OK for every descriptor, with no
//     current_limit, limit_remaining or duration_until_reset and no
//     rate-limit headers: nothing that tells a client to slow down or wait.
//   - [middleware.FailClosed] answers OVER_LIMIT for every enforcing
//     descriptor that has a limit, with its current_limit, limit_remaining
//     0 and no duration_until_reset (when the limit resets is unknown while
//     the store is away), and no rate-limit headers. Shadow-mode
//     descriptors answer OK, as they never refuse; unlimited and unknown
//     ones OK.
//
// FailOpen and FailClosed are the HTTP and gRPC middleware's fail modes,
// decided by the same admission core.
func WithFailMode(m middleware.FailMode) Option {
	return Option{func(c *options) error {
		if m > middleware.FailError {
			return fmt.Errorf("%w: rls: unknown fail mode %d", floodgate.ErrInvalidConfig, m)
		}
		c.failure = m
		return nil
	}}
}

// WithNearLimitRatio sets the share of a limit above which hits count as
// near_limit (default 0.8, the reference's NEAR_LIMIT_RATIO).
func WithNearLimitRatio(r float64) Option {
	return Option{func(c *options) error {
		if !(r > 0 && r <= 1) {
			return fmt.Errorf("%w: rls: near-limit ratio %v outside (0, 1]", floodgate.ErrInvalidConfig, r)
		}
		c.nearRatio = r
		return nil
	}}
}

// WithOnReload calls f after every config change applied or refused
// (Reload.Err set), from the goroutine that made it.
func WithOnReload(f func(Reload)) Option {
	return Option{func(c *options) error {
		if f == nil {
			return fmt.Errorf("%w: rls: nil reload callback", floodgate.ErrInvalidConfig)
		}
		c.onReload = f
		return nil
	}}
}

// WithKeySecret sets the secret of the keyed hash (HMAC-SHA256, 128 bits
// kept, in base64url: floodgate's credential keys, as httplimit's) that
// stands for a credential's value (a descriptor marked credential: true)
// in store keys and metrics: at least 16 bytes. Without it each process
// draws a random one, so every process sharing a Redis must be given the
// same secret to share a credential's budget.
func WithKeySecret(secret []byte) Option {
	return Option{func(c *options) error {
		if len(secret) < 16 {
			return fmt.Errorf("%w: rls: a key secret of %d bytes (want at least 16)", floodgate.ErrInvalidConfig, len(secret))
		}
		c.secret = bytes.Clone(secret)
		return nil
	}}
}

// WithClock sets the clock that duration_until_reset of a fixed window
// counts from when the store did not say (a key at full capacity). The
// default is the system clock. For tests.
func WithClock(c floodgate.Clock) Option {
	return Option{func(o *options) error {
		if c == nil {
			return fmt.Errorf("%w: rls: nil clock", floodgate.ErrInvalidConfig)
		}
		o.now = c.Now
		return nil
	}}
}

// Reload describes one config change, applied or refused.
