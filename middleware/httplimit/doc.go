// Package httplimit puts floodgate limiters in front of net/http handlers
// and behind net/http clients.
//
// The middleware is thin: it maps a request to a key and a cost, asks
// floodgate's admission core (the one grpclimit shares: the gRPC
// interceptors decide exactly as this middleware does), and writes a
// response contract that tells the truth. It owns no algorithm: any keyed
// limiter of floodgate (token bucket, leaky bucket, windows, on the memory
// store or on Redis) plugs in, and so does a concurrency limiter through
// [Shed].
//
//	perIP, _ := bucket.NewKeyed(store, bucket.Config{Name: "per-ip", Rate: floodgate.PerSecond(10), Burst: 20})
//	limit, err := httplimit.Middleware(perIP)
//	...
//	http.ListenAndServe(addr, limit(mux))
//
// One middleware can check several limits at once, each with its own key,
// all or nothing ([WithLimit]): a request one limit refuses is charged to
// none of them, and its Retry-After is the longest among the refusing
// limits.
//
// Each constructor takes its own option type ([Option] for Middleware,
// [PoliciesOption], [ShedOption], [TransportOption]); the options several
// of them share are a [CommonOption] or a [LimitOption]. An option given to
// a constructor it does not apply to does not compile.
//
// # Keys
//
// By default a request is keyed by its client IP: the peer address of the
// connection. X-Forwarded-For (or Forwarded, RFC 7239, chosen with
// [WithForwardedHeader]; one header, never both) is believed only when the
// peer is one of the proxies given to [WithTrustedProxies]; the client is
// then the rightmost address of the header that is not itself a trusted
// proxy. X-Real-IP is never read.
// Anyone else's forwarding headers are ignored, so a client cannot pick its
// own key, or spend someone else's budget, by forging them. IPv6 addresses
// are aggregated to their /64 (a subscriber usually holds a whole /64);
// [WithIPPrefix] changes both prefix lengths. A request whose peer address
// cannot be parsed (a Unix socket) shares one budget, "unknown-peer".
//
// [WithHeaderKey] keys by a header such as X-Service-Token, [WithKeyFunc] by
// any function, [WithKeyPrefix] scopes keys to a route. A missing header (or
// an empty key) never disables limiting: the request falls back to its
// client IP.
//
// A header value is a credential: it never reaches a store or an observer
// in clear. The key is "hdr#" and a keyed hash of the value
// (HMAC-SHA256, 128 bits), under the secret of [WithKeySecret]. Without it
// each process draws a random secret, so nodes that share a store must be
// given the same secret to share a credential's budget.
//
// # Response contract
//
// A request the limiter admits reaches the handler with these header fields
// added (each group can be turned off with [WithHeaders]):
//
//	RateLimit-Policy: "per-ip";q=20;w=2         the policy (draft-ietf-httpapi-ratelimit-headers-10)
//	RateLimit: "per-ip";r=19;t=1                r: units left now; t: seconds until full
//	X-RateLimit-Limit: 20                       Decision.Limit (the burst, for a token bucket)
//	X-RateLimit-Remaining: 19                   Decision.Remaining
//	X-RateLimit-Reset: 1                        seconds until the budget is full again (not a timestamp)
//
// The policy comes from the limiter ([floodgate.Describer]): its name is the
// limiter's Name ("default" when it has none), and q units per w seconds
// its rate (a token bucket's or a leaky bucket's Rate N per Per, a
// window's Limit per Window), scaled by the smallest whole factor that
// makes q at least the limit's capacity and w a whole number of seconds:
// 10 a second with a burst of 20 is q=20;w=2, with a burst of 5 q=10;w=1,
// 5 per 500ms q=10;w=1. So q/w is always the rate, and r never exceeds q.
// (A rate that needs more than 15 digits that way is stated as the
// capacity per its refill time, rounded up: q/w then understates it.)
// [WithPolicy] may restate the name, quota and window; a restatement that
// contradicts the limiter is refused at construction. With several
// limits ([WithLimit]), each has its member in RateLimit-Policy, and the
// X-RateLimit fields describe the one with the fewest units remaining
// (or, on a refusal, the refusing one with the longest wait). The name is
// a structured-field String; all numbers are whole seconds rounded up, and
// integers of at most 15 digits, as RFC 9651 requires.
//
// On admissions, RateLimit has a member per limit, t being the number of
// seconds until its budget is full again (Decision.ResetAfter). The draft
// defines t as the time until additional quota is available; for a bucket
// that refills continuously that moment depends on the algorithm, while
// "full again" holds for every algorithm and is never early: a client that
// waits t seconds may send the whole capacity again (X-RateLimit-Limit).
//
// On refusals, RateLimit has a member only for the limits that refused the
// request (those whose shaping delay was refused, under
// [middleware.DelayRefuse]), t being the number of seconds until that limit
// would admit it (Decision.RetryAfter, rounded up): so Retry-After >= every
// t, and, without jitter, Retry-After is the largest t. The limits that would have
// admitted keep their RateLimit-Policy member. A refusal by an inner
// stacked middleware replaces the RateLimit members an outer one wrote.
//
// A request the limiter refuses gets 429 Too Many Requests, without reaching
// the handler, with the fields above (r is what is left: 0, unless the
// request cost more than one unit) and:
//
//	Retry-After: 1                  whole seconds, rounded up, >= 1, plus WithRetryJitter's jitter
//	Cache-Control: no-store
//	X-Content-Type-Options: nosniff
//	Content-Type: text/plain; charset=utf-8    or application/problem+json with WithProblemDetails
//
// The problem+json body (RFC 9457) holds type, title, status, detail and a
// retry_after extension; neither body ever contains the key, the path or
// the client address. With diagnostics on (middleware.HeadersDiagnostic),
// responses also carry X-RateLimit-Tier ([WithTier]), X-RateLimit-Scope
// ("ip", "header", "key", prefixed by "route+" with [WithKeyPrefix]; with [Policies], the
// name of the policy that decided: the one that refused (the longest
// retry; for "delay_refused", the one that would have delayed), else the
// one with the fewest units left, or "descriptor" when the policy set could not
// match; "concurrency" for [Shed]) and, on
// refusals, X-RateLimit-Reason ("rate_limited", "delay_refused",
// "overloaded", "limiter_unavailable", "cost_exceeds_limit", "invalid_key").
//
// A request that can never be admitted, because its cost exceeds a limit's
// capacity (see [CostFunc]) or its key is refused by the store (see
// [KeyFunc]), gets 429 without Retry-After, whatever the fail mode: waiting
// would not help, and the body (or the problem detail, with a "reason"
// member instead of "retry_after") says so.
//
// Middlewares also stack: around a tighter per-route limit, a per-IP limit
// adds its own member to RateLimit-Policy and RateLimit (give each limit its
// own Name). But each layer charges its own limiter, so a request refused by
// an inner layer has already been charged by the outer ones: give one
// middleware both limits with [WithLimit] when a refusal must charge
// nothing. Two limiters share state only when they share a Name, so stacked
// layers built from one Config never spend each other's budget.
//
// A request shed by [Shed] gets 503 Service Unavailable with the same
// Retry-After, Cache-Control and body rules.
//
// # Failure, delays, dry run
//
// When the limiter returns an error or panics, the request follows the
// [middleware.FailMode]: FailOpen (the default) serves it, FailClosed answers 503 with
// Retry-After: 1, since the client did nothing wrong. The exception is a
// cost or a key the limiter refuses (see [CostFunc], [KeyFunc]): 429,
// whatever the fail mode.
// A panicking limiter never takes the server down. A store whose own
// failure policy answers (redisstore's FailOpen, FailClosed, Fallback)
// gets the same treatment for one limiter and for a group (floodgate.All,
// [WithLimit], [Policies]): its blanket admission is served (error_open),
// its blanket refusal answered 503 with the store's Retry-After
// (error_closed), its local fallback's decision answered as a limiter's
// (fallback).
//
// A shaping limiter may admit a request with a Decision.Delay: by default
// ([middleware.DelayHonour]) the request waits that long, with its context,
// before the handler runs; a delay that would end past the context's
// deadline, or a context that ends while waiting, turns into a 429 and the
// units are refunded when the limiter implements [floodgate.Refunder].
// [middleware.DelayRefuse] answers 429 at once, and its headers count only
// what passes without a delay: a leaky bucket that would delay the next request says
// Remaining 0, and the next request is indeed refused.
//
// [WithDryRun] (shadow mode) decides and charges every request exactly as
// enforcement would, reports refusals as floodgate.OutcomeWouldDeny, and
// changes nothing the client sees: no refusal, no delay, no rate-limit
// headers; a limiter that cannot decide is reported as error_open whatever
// the fail mode, and a refused cost or key as would_deny.
// Build one middleware per route to give each route its own dry-run flag,
// fail mode and observer labels.
//
// # Observing
//
// Every request gives one event per (request, limit) to the
// [floodgate.Observer] given to [WithObserver] (Source request): a request
// checked against several limits ([WithLimit], [Policies]) is counted under
// each, a refusal under the limits that refused (the others report allowed:
// they would have admitted it, and charged nothing), a policy set's dry-run
// policies in events of their own (Source shadow: allowed or would_deny).
// Each event carries its limit's name (the main limiter's renamed by
// [WithName]) and own Decision, the labels of [WithTier] and [WithRoute], the
// true outcome (allowed, denied, would_deny, error_open, error_closed,
// fallback when a store's local fallback decided, shed, delayed), the
// Decision and the latency. A store given the same observer reports only
// its own outcomes (Source store), so nothing is counted twice.
//
// # Caller side
//
// [Transport] is an http.RoundTripper that throttles outgoing requests with a
// local limiter ([WithThrottle], [WithThrottleLimiter]) and retries 429 and 503
// responses honouring Retry-After and RateLimit t, with capped exponential
// backoff and full jitter, only for requests that can safely be sent again,
// never sleeping past the request's deadline.
//
// # Cost and concurrency
//
// Every function, handler and Transport of this package is safe for
// concurrent use. On the admitted path with IPv4 client keys the middleware
// allocates once per request: the block holding every header value (128
// bytes for one limit without diagnostic fields), besides the first group
// of an empty header map, which writing any header costs. IPv6 and header
// keys add one allocation for the key.
package httplimit
