// Package window implements the window rate limits: at most Limit units of
// cost per Window, per key. One [Config] runs as any of three algorithms,
// each a [algo.Algorithm] (a pure step in integer microseconds plus its Lua
// twin for the Redis store), so that the same limiter runs in memory or on
// Redis with identical decisions:
//
//   - [NewFixed], the fixed window: one counter per key per window, the
//     windows aligned to the Unix epoch (a 1-minute window starts on the
//     minute, on every node), reset when the window ends.
//   - [NewSlidingLog], the sliding log: the exact rule "at most Limit in any
//     window-long interval", kept as the log of admission times.
//   - [NewSlidingCounter], the sliding-window counter: the counts of the
//     current and previous aligned windows, the previous one weighted by the
//     share of it that the sliding window still covers (the approximation
//     Cloudflare popularised).
//
// The counter's estimate, with elapsed the time since the current window
// started, is
//
//	estimate = prev x (Window - elapsed) / Window + curr
//
// and a request of cost n is admitted when estimate + n <= Limit, compared
// exactly in integers: prev x (Window - elapsed) + (curr + n) x Window <=
// Limit x Window.
//
// # Choosing
//
//	                   fixed window         sliding log           sliding counter
//	worst burst in     2 x Limit (the end   Limit: exact          2 x Limit - 1 (an
//	one window-long    of a window and the                        adversary's best;
//	interval           start of the next)                         about 1.1 x under
//	                                                              Poisson traffic)
//	memory per key     2 words (16 B)       1 word + 8 B per      4 words (32 B)
//	                                        unit in the window,
//	                                        up to about twice
//	                                        that allocated
//	time per decision  O(1)                 O(1) amortised        O(1)
//	exactness          exact per aligned    exact                 an estimate: see the
//	                   window                                     figures below
//	pick it for        quotas that reset    small limits that     large limits, long
//	                   on the clock (1000   must hold in every    windows: smooth,
//	                   per day, billing)    interval (logins,     cheap, admits the
//	                                        OTPs, payments)       right volume
//
// # The counter's error, measured
//
// TestCounterAccuracy replays seeded Poisson traffic (Limit 100 per second,
// 400 windows; cost 1) through the counter and checks each decision against
// the exact rule applied to the counter's own admissions ("fewer than Limit
// in the last Window"):
//
//	load   misclassified  false allow  false deny  admitted vs log  busiest 1s
//	0.5x       0.000%        0.000%      0.000%        +0.00%           76
//	0.8x       1.061%        0.949%      0.112%        +0.21%          108
//	1.0x      13.686%        9.976%      3.710%        +0.94%          114
//	1.2x      23.275%       12.388%     10.887%        +0.59%          112
//	2.0x      38.952%        3.712%     35.240%        -0.34%          105
//
// (Limit 1000: 0.000%, 15.932% and 38.843% at 0.5x, 1x and 2x; admitted
// volume within 0.7% of the log's; busiest second 1044.) Below the limit the
// counter is exact. At and above it the exact count sits at the limit, so
// which request takes the last unit is close to a coin toss and many single
// decisions differ, while the admitted volume stays within 1% of the exact
// log's and no second holds more than 1.14 x Limit. TestWorstCaseBurst
// checks every window-long interval of adversarial traces: the counter's
// worst is 2 x Limit - 1 (Limit in the last microsecond of a quiet window,
// Limit - 1 a window later less a microsecond), the fixed window's 2 x
// Limit, the log's Limit.
//
// # Units and bounds
//
// Time is in Unix microseconds inside the steps; Window must
// be a whole number of microseconds, at most 2^50 µs (about 35 years). Limit is at
// least 1 and at most 2^50; the sliding log also caps it at 10,000 (the log
// keeps one timestamp, 8 bytes, per unit: 80 KB per key at most), the sliding
// counter at 2^52 / Window in microseconds (1,250,000 per hour, 52,000,000
// per day). The zero [Config] is invalid:
// Limit and Window have no defaults. The zero [algo.State] is a fresh key,
// at full capacity. These bounds keep every
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
// As every algo.Algorithm, W[0] of the state is the time at which the key
// is full again, so that stores may drop it from then on. Fixed: W[0] the end
// of the counted window, W[1] the count. Log: W[0] the newest entry plus the
// window, State.Log the entries, oldest first, one per unit of cost (a
// request of cost n at time t records t n times), never more than Limit.
// Counter: W[0] the time to full, W[1] the current window's start, W[2] its
// count, W[3] the previous window's count. A full key is the zero state.
//
// # Live changes
//
// A change of a named window's limit or length (a policy reloaded with new
// numbers, see package policy) carries each key's state over by one rule:
// the key keeps the units it has left in the window at the change, capped
// by the new limit. A drained key stays drained whichever way the limit
// moves, raising gives no burst (50 left of 100 stay 50 at 200), lowering
// gives nothing (50 left become 30 at 30). Per algorithm, at the change
// (now):
//
//   - Fixed: the units used (new limit less what is kept) are counted in
//     the new window holding now, which resets as usual. With another
//     window length that is the new window holding now: a drained key stays
//     drained until it ends.
//   - Counter: with the same length, the previous window's count is kept
//     (lowered only as far as the key must not have more left than it
//     had) and the current count is set so that the key has exactly what
//     it keeps; with another length, the units used are counted in the new
//     window holding now and the previous count is dropped.
//   - Log: the newest entries that the new window still holds are kept, as
//     many as the units used; when there are fewer (a raise, or a shorter
//     window), entries at now make up the count (never more than the new
//     limit), so that a drained key stays drained for one new window.
//     Entries keep their times: a longer window holds them longer.
//
// A key back to full (no state) is full under the new limit, as a fresh key
// is. Stores apply the rule on a key's first request after the change
// ([algo.Converter], whose Lua twin runs in the Redis script).
//
// # Concurrency
//
// A [Config] is a plain value. The algorithms are immutable and safe for
// concurrent use. Their steps never change the state they are given; the
// sliding log appends in the spare capacity of the log's slice (as Go's
// append does), so of two states stepped from the same input only one may be
// kept, which is what every store does. The limiters are [store.Limiter]s:
// safe for concurrent use, the store serialising the decisions on one key.
package window
