// Package window implements the window rate limits: at most Limit units of
// cost per Window, per key. One [Config] runs as any of three algorithms,
// each a [store.Algorithm] (a pure step in integer microseconds plus its Lua
// twin for the Redis store), so that the same limiter runs in memory or on
// Redis with identical decisions:
//
//   - [NewFixed], the fixed window: one counter per key per window, the
//     windows aligned to the Unix epoch (a 1-minute window starts on the
//     minute, on every node), reset when the window ends.
//
//   - [NewSlidingLog], the sliding log: the exact rule "at most Limit in any
//     window-long interval", kept as the log of admission times.
//
//   - [NewSlidingCounter], the sliding-window counter: the counts of the
//     current and previous aligned windows, the previous one weighted by the
//     share of it the sliding window still covers (the approximation
//     Cloudflare popularised):
//
//     estimate = prev x (Window - elapsed) / Window + curr
//
//     where elapsed is the time since the current window started. A request
//     of cost n is admitted when estimate + n <= Limit, compared exactly in
//     integers (prev x (Window-elapsed) + (curr+n) x Window <= Limit x Window).
//
// # Choosing
//
//	                   fixed window        sliding log           sliding counter
//	bursts             up to 2 x Limit     none: never more      up to 2 x Limit in a
//	                   across a window     than Limit in any     window-long interval
//	                   boundary            window-long interval  (adversarial worst case)
//	memory per key     2 words (16 B)      1 word + 8 B per      4 words (32 B)
//	                                       unit in the window
//	                                       (<= 80 KB at the
//	                                       MaxLogLimit 10,000)
//	time per decision  O(1)                O(expired) + O(Limit)  O(1)
//	                                       copy per admission
//	exactness          exact per aligned   exact                 estimate: see the
//	                   window                                    measured error below
//	when to pick       quotas that reset   small limits that     large limits or long
//	                   on the clock ("1000 must hold in every    windows: smooth, cheap,
//	                   per day", billing)  interval (logins,     nearly exact under
//	                                       OTPs, payments)       ordinary traffic
//
// The misclassification figures come from TestCounterAccuracy, which replays
// seeded Poisson traffic at 0.5x, 1x and 2x the limit through the counter and
// the log and counts the decisions that differ; the same test replays an
// adversarial trace and checks every window-long interval for the 2 x Limit
// bound.
//
// # Units and bounds
//
// Time is in Unix microseconds inside the steps ([store.Micros]); Window must
// be a whole number of microseconds, at most [MaxWindow]. Limit is at least 1
// and at most [MaxLimit] (fixed window), [MaxLogLimit] (sliding log; the log
// keeps one timestamp per unit) or MaxCounterProduct / Window in microseconds
// (sliding counter, [MaxCounterProduct]). These bounds keep every
// intermediate value below 2^53 so that the Lua twins, which compute in
// doubles, are bit-identical to the Go steps. Invalid configurations are
// refused at construction with an error wrapping
// [floodgate.ErrInvalidConfig]; a cost outside 1..Limit is refused by Take
// with [floodgate.ErrInvalidCost].
//
// # Decisions
//
// Every algorithm fills the [floodgate.Decision] exactly:
//   - Remaining is how many units would be admitted right now.
//   - ResetAfter is the time until the key is back to full (0 when full):
//     the end of the window (fixed), the expiry of the newest log entry
//     (log), the end of the window after the last one counted (counter).
//   - RetryAfter is zero exactly when the request is admitted, and otherwise
//     the shortest wait after which the same request is admitted if nothing
//     else arrives: the end of the window (fixed), the expiry of the
//     entry that makes room (log), and for the counter the first microsecond
//     at which the decaying estimate leaves room for n, computed in closed
//     form.
//
// A refund (Refund, or a negative cost to Step) gives units back: it lowers
// the window count (fixed), removes the newest log entries (log), lowers the
// current count and then the previous one (counter), never beyond full. A
// cost of 0 peeks.
//
// # Clocks
//
// The stores own time: the memory store reads its clock, the Redis store the
// server's TIME. A clock that goes backwards credits nothing and stalls
// nothing: the state is re-based onto the time given (a fixed-window count
// moves to the window holding now; log entries from the future are moved to
// now; the counter folds both counts into the current window), so a key is
// back to full at most one window (two for the counter) after any clock
// reading.
//
// # State words
//
// As every store.Algorithm, W[0] of the state is the time at which the key
// is full again, so that stores may drop it from then on. Fixed: W[0] the end
// of the counted window, W[1] the count. Log: W[0] the newest entry plus the
// window, State.Log the entries, oldest first, one per unit of cost (a
// request of cost n at time t records t n times), never more than Limit.
// Counter: W[0] the time to full, W[1] the current window's start, W[2] its
// count, W[3] the previous window's count. A full key is the zero state.
//
// # Concurrency
//
// A [Config] is a plain value. The algorithms are immutable and safe for
// concurrent use; their steps never write into the state they are given (the
// log is re-sliced or copied). The limiters are [store.Limiter]s: safe for
// concurrent use, with the store serialising the decisions on one key.
package window
