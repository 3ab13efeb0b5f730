// Package grpclimit rate-limits and load-sheds gRPC servers, and throttles
// gRPC clients, with floodgate limiters.
//
// # Server side
//
// [New] binds a [floodgate.Limiter] (for example a keyed token bucket on
// the embedded memstore) to a policy and hands out the unary and stream
// server interceptors that enforce it:
//
//	lim, _ := bucket.NewKeyed(store, bucket.Config{Name: "per-peer", Rate: floodgate.PerSecond(10), Burst: 5})
//	ic, err := grpclimit.New(lim)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ic.Unary()),
//		grpc.ChainStreamInterceptor(ic.Stream()))
//
// Each call is keyed by its peer's IP address (without port; IPv6 grouped
// by /64, see [WithIPPrefix]), by a metadata entry such as a service token
// ([WithHeaderKey]: gRPC metadata are HTTP/2 headers; a call without it
// falls back to its peer), or by a function of the context and the full
// method name ([WithKeyFunc]). Each call costs 1 unless [WithCost] says
// otherwise; a stream is charged once, when it opens. [WithLimit] adds
// limits checked with the main one all or nothing (per peer AND per token:
// a call one refuses is charged to none). [WithFilter] and [Methods] select
// the calls a policy covers, so that an expensive method can have a policy
// of its own.
//
// [Shed] does the same with a concurrency limiter (an [middleware.Acquirer]), for
// load shedding; [WithClassFunc] classifies calls for a priority shedder.
//
// Each constructor takes its own option type ([Option] for New,
// [PoliciesOption], [ShedOption], [ClientOption]); the options several of
// them share are a [CommonOption], a [LimitOption] or WithCost's
// [CostOption]. An option given to a constructor it does not apply to does
// not compile.
//
// # Credentials in keys
//
// A [WithHeaderKey] value is taken for a credential: it is hashed with
// HMAC-SHA256 (128 bits kept) before any store, Redis key or observer sees
// it. The secret is drawn at random once per process unless
// [WithKeySecret] sets one. Servers that share a store (several nodes on
// one Redis) must all be given the same secret: with the default, each
// process hashes a token to a key of its own, so each node grants the
// token a full budget (N nodes admit N times the limit) and a restart
// grants a fresh one.
//
// # The response contract
//
// Every rate-limit decision is made by floodgate's one admission core, the
// one httplimit uses, so that a call and an HTTP request get the same
// verdict; the interceptors only translate it:
//
//   - Admitted: the handler runs (after the decision's shaping delay, if
//     any: see [middleware.DelayMode]).
//   - Rate limited: codes.ResourceExhausted, message "rate limit exceeded", a
//     google.rpc.RetryInfo status detail holding the delay after which a
//     retry can succeed (read it with [RetryDelay]), and the
//     grpc-retry-pushback-ms trailer (gRFC A6) holding the same
//     delay in whole milliseconds, rounded up, so that a client that honours
//     it is never early; and a google.rpc.QuotaFailure detail with one
//     violation naming the limit that refused: subject "policy:" and its
//     name, description "rate limit exceeded". Of several limits ([WithLimit],
//     [Policies]) it is the refusing one with the longest retry, a limit that
//     would have delayed the call counting as refusing it; New's main limit
//     is named by [WithName], else by the limiter itself (its Config's
//     Name), an added limit by its limiter. There is no QuotaFailure when
//     that limit has no name, and none in a dry run, which refuses nothing.
//     A delay that cannot be honoured (it would pass the deadline, or
//     [middleware.DelayRefuse]) is refused this way, its units given back.
//   - Never admissible: a cost above the limit's capacity (or below 1), or
//     a key the store refuses: codes.ResourceExhausted, message
//     "request cost exceeds the rate limit's capacity" (or "rate limit key
//     refused"), no RetryInfo, and the pushback trailer "-1", which tells
//     gRPC clients not to retry (gRFC A6). This is whatever the fail mode:
//     failing open would exempt exactly the most expensive calls.
//   - Limiter failed (error or panic, of the limiter or of a key or cost
//     function) and [middleware.FailClosed]: codes.Unavailable, message
//     "rate limiter unavailable", RetryInfo and pushback of one second. With
//     [middleware.FailOpen] (the default) the call goes through.
//   - Shed for overload ([Shed]): codes.Unavailable, message
//     "server overloaded", RetryInfo and pushback ([WithShedRetryAfter], one
//     second by default).
//
// gRPC's own retry policy (retryPolicy in the service config, with
// RESOURCE_EXHAUSTED or UNAVAILABLE among retryableStatusCodes) reads the
// trailer: it waits that long, or does not retry at all on "-1". Refusals
// are trailers-only responses, which is what gRPC requires to retry a call.
// Messages are fixed: they never echo the key, the peer or the limiter's
// error text, which goes to the observer only. A call whose own context
// ended while it was decided or held gets its context's status instead.
//
// # Observability, dry-run and failures
//
// Each call decided is reported to a [floodgate.Observer] ([WithObserver])
// as one event per (call, limit) (Source floodgate.SourceRequest): a call
// checked against several limits ([WithLimit], [Policies]) is counted
// under each, a refusal under the limits that refused (the others report
// allowed: they would have admitted it, and charged nothing), a policy
// set's dry-run policies in events of their own (floodgate.SourceShadow),
// each event with its outcome (a
// decision of a store's local fallback is floodgate.OutcomeFallback; a
// store's blanket FailOpen or FailClosed answer is error_open or
// error_closed, the call answered as under [middleware.FailOpen] or [middleware.FailClosed]
// (Unavailable with one second), for one limiter and for a group alike),
// the
// limit's name (the main limiter's renamed by [WithName]), the tier, the
// route class (the full method name unless [WithRouteFunc] maps it), the
// priority class for a classifying shedder (Event.Class) and the time the
// decision took. [WithDryRun] decides and reports but never refuses. A
// limiter, key, cost or class function that errors or panics never crashes
// the server.
//
// # Client side
//
// [NewClient] returns a [Client] whose interceptors throttle outgoing calls
// with a local limiter ([WithThrottle], [WithThrottleLimiter]) before they
// reach the network, and honour the server's pushback: after a refusal
// carrying RetryInfo or the pushback trailer, the client holds its next
// calls (unary and streams) until the delay has passed ([WithPushback],
// [WithMaxPushback]). [WithMaxAttempts] (with [WithRetryable] and
// [WithBackoff]) retries refused idempotent unary calls,
// a bounded number of times, with capped exponential backoff and full
// jitter, never sooner than the pushback and never past the deadline.
//
// # Units, zero values, concurrency
//
// Durations are [time.Duration]; the trailer is in milliseconds. Options
// have documented defaults; an invalid option makes the constructor return
// an error wrapping [floodgate.ErrInvalidConfig], never a panic. The
// interceptors, [Interceptors] and [Client] are safe for concurrent use.
package grpclimit
