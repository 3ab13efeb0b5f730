// Package grpclimit rate-limits and load-sheds gRPC servers, and throttles
// gRPC clients, with floodgate limiters.
//
// # Server side
//
// [New] binds a [floodgate.Limiter] (for example a keyed token bucket on
// the embedded memstore) to a policy and hands out the unary and stream
// server interceptors that enforce it:
//
//	lim, _ := bucket.NewKeyed(store, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 5})
//	ic, err := grpclimit.New(lim, grpclimit.WithName("per-peer"))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ic.Unary()),
//		grpc.ChainStreamInterceptor(ic.Stream()))
//
// Each call is keyed by its peer's IP address (without port; IPv6 grouped
// by /64, see [WithIPPrefix]), by a metadata entry such as a service token
// ([WithMetadataKey]; a call without it falls back to its peer), or by a
// function of the context and the full method name ([WithKeyFunc]). Each
// call costs 1 unless [WithCost] says otherwise; a stream is charged once,
// when it opens. [WithFilter] and [Methods] select the calls a policy
// covers, so that several policies can be chained: one per peer for every
// method, a tighter one for an expensive method.
//
// [NewShedder] does the same with a concurrency limiter (an [Acquirer]),
// for load shedding.
//
// # The response contract
//
//   - Denied by the rate limit: codes.ResourceExhausted, message
//     [MsgRateLimited].
//   - Shed for overload: codes.Unavailable, message [MsgOverloaded].
//   - Limiter failed and [FailClosed]: codes.Unavailable, message
//     [MsgLimiterUnavailable], retry in one second. With [FailOpen] (the
//     default) the call goes through.
//
// Every refusal carries a google.rpc.RetryInfo status detail (read it with
// [RetryDelay]) and the grpc-retry-pushback-ms trailer ([PushbackTrailer]),
// both holding the delay after which a retry can succeed; the trailer is
// rounded up to whole milliseconds, so a client that honours it is never
// early. gRPC's own retry policy (retryPolicy in the service config, with
// RESOURCE_EXHAUSTED or UNAVAILABLE among retryableStatusCodes) reads the
// trailer and waits that long. Refusals are trailers-only responses, which
// is what gRPC requires to retry a call. Messages are fixed: they never
// echo the key, the peer or the limiter's error text, which goes to the
// observer only.
//
// A leaky bucket in delay mode admits calls with a Delay: the call is held
// that long before its handler runs, or refused like a denial (and its units
// refunded) when the delay would pass its deadline.
//
// # Observability, dry-run and failures
//
// Every decision is reported to a [floodgate.Observer] ([WithObserver]) with
// the policy's name, tier and route class (the full method name unless
// [WithRoute] maps it) and the time the decision took. [WithDryRun] decides
// and reports but never refuses. A limiter (or key or cost function) that
// returns an error or panics never crashes the server: the call follows the
// [FailMode] and the outcome says which way it went.
//
// # Client side
//
// [NewClient] returns a [Client] whose interceptors throttle outgoing calls
// with a local limiter ([WithThrottle], [WithThrottleLimiter]) before they
// reach the network, and honour the server's pushback: after a refusal
// carrying RetryInfo or the pushback trailer, the client holds its next
// calls (unary and streams) until the delay has passed ([WithPushback],
// [WithMaxPushback]). [WithRetry] retries refused idempotent unary calls,
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
