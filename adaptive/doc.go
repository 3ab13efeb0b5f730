// Package adaptive limits how many requests run at once, and adapts that
// limit to the latency and the failures of the server it protects, in the
// manner of Netflix's concurrency-limits.
//
// Two roles are kept apart:
//
//   - a [Controller] turns samples into a limit and does nothing else:
//     [NewVegas] (delay-based, after TCP Vegas), [NewGradient2] (compares the
//     current RTT with a long-term baseline), [NewAIMD] (loss-based: +1 per
//     window, x0.9 on a drop) and [NewConstant];
//   - a [Gate] counts requests in flight, admits a request while the count
//     is below the limit and hands out a [Token]; the token's Success,
//     Dropped or Ignore ends the request, measures its RTT and feeds the
//     algorithm.
//
// # Windows and samples
//
// The gate gathers finished requests into windows: a window closes at the
// first release at least 1s after it opened, and reaches the algorithm only
// when it holds at least 10 requests (see [WithWindow]); the algorithm sees
// one [Sample] per window: the mean RTT of the successful requests, the
// largest in-flight count, the number of drops. Successful requests faster
// than 100µs are not measured ([WithMinRTT]); drops always count, whatever
// their RTT, so that a server failing fast still lowers the limit.
//
// # Rejections, waiting, the observer
//
// Acquire returns a token or a rejection: an error wrapping
// [ErrLimitExceeded]. By default it never blocks. With [WithQueue] a request
// that finds the limit reached waits in a bounded queue (FIFO or LIFO;
// higher [Request.Rank] first) until a slot frees or its context ends; it
// never waits past the context's deadline. [Gate.AcquireFunc] is the
// asynchronous form for event loops and simulations: a callback receives the
// token or the rejection, and the returned function withdraws a waiting
// request. Every admission and every
// rejection is reported to the [floodgate.Observer] ([WithObserver]) with
// outcome [floodgate.OutcomeAllowed] or [floodgate.OutcomeShed]; every limit
// change is reported to the [OnLimitChange] hook.
//
// # Leaks
//
// The contract: end every token exactly once (the first of Success, Dropped
// or Ignore counts, later calls do nothing; `defer tok.Ignore()` right after
// Acquire is a safe net). A token that is never ended would hold its slot
// forever, so the gate keeps its tokens in age order and reclaims those
// older than the maximum age (one minute by default, [WithMaxAge]) on its
// next Acquire, release or [Gate.Stats] call: the slot is freed, the leak
// is counted in [Stats].Leaked and reported to the [OnLeak] hook. No
// finalizer and no goroutine is involved.
//
// # Units, zero values, concurrency
//
// Limits and in-flight counts are numbers of requests; RTTs are
// [time.Duration]s measured with the gate's [floodgate.Clock] (injectable
// with [WithClock], so tests run in simulated time). The zero value of each
// algorithm's Config means the reference defaults (Vegas: initial 20,
// max 1000; Gradient2: initial 20, min 20, max 200, smoothing 0.2, long
// window 600, RTT tolerance 1.5, queue size 4; AIMD: initial 20, min 20,
// max 200, backoff 0.9, timeout 5s). A [Gate] and its tokens are safe for
// concurrent use; a [Controller] value is used by one gate, under its
// lock. The program examples/shedding runs a gate and priority classes
// against a simulated server, in simulated time.
package adaptive
