// Package bucket is the token bucket, in two forms: a keyed limiter that runs
// on any [store.Store] (the Go step and its Lua twin), and a keyless,
// lock-free [Limiter] for caller-side throttling whose methods mirror
// golang.org/x/time/rate.
//
// Both are written as GCRA (the generic cell rate algorithm): the state is
// one number, the theoretical arrival time (TAT), the time at which the
// bucket is full again. Taking n tokens pushes the TAT n intervals later; a
// request is admitted when the pushed TAT is at most burst intervals ahead of
// now. The state is an absolute schedule, so a caller whose clock reads
// earlier than another's simply finds fewer tokens: no time ever moves the
// state back or credits a token twice.
//
// # Keyed token bucket
//
// [Config] (a [floodgate.Rate] and a Burst) gives a [algo.Algorithm] and,
// with [NewKeyed], a keyed limiter: a [store.Limiter] (Take, Refund, Peek,
// Reserve) on any store. Its Name is the limit's identity: limiters with the
// same Name on one store share each key's state, unnamed ones never do (see
// [algo.Identity]). Units: time in Unix microseconds, the interval
// Rate.Per/Rate.N rounded up to a whole microsecond (the effective rate is
// never above the one written), so that the Redis twin computes with exact
// integers. The step:
//   - n > 0 takes n tokens when they are all there, and otherwise denies with
//     RetryAfter the time until they are (a denial takes nothing);
//   - n == 0 peeks; n < 0 refunds -n tokens, never beyond the burst;
//   - a TAT more than the burst plus the reservation horizon (below) ahead of
//     now can only come from a clock that went backwards: it is re-based to
//     "empty at now", which credits nothing. A clock that goes back by less
//     leaves the key that much longer in debt: it never credits either.
//
// The zero [Config] is invalid; [Config.Algorithm] says why.
//
// # Reservations and floodgate.Wait
//
// The keyed bucket reserves ([algo.Reservable], [floodgate.Reserver]): a
// reservation of n tokens is admitted now and pushes the TAT n intervals
// later, like a take, even when the tokens are not there yet; the caller acts
// after Decision.Delay, when the TAT less the burst reaches it. So
// reservations are served in the order they were made (first in, first
// out), one interval per token apart once the burst is spent, and a plain
// Take that arrives behind a queue is denied until the queue has passed:
// [floodgate.Wait] reserves, with one store call and no polling.
//
//   - A reservation is refused, charging nothing, when its wait would pass
//     maxWait (the caller's deadline); RetryAfter is then that wait.
//   - The horizon: a queue reaches at most max(15 minutes, 64 times the time
//     to refill the burst) beyond a full burst's worth; a reservation that
//     would go beyond is refused with RetryAfter the time until it fits.
//   - A cancelled reservation (an abandoned Wait) that is the last of its
//     queue comes back in full. One with later reservations behind it gives
//     back nothing, whatever the costs: they keep their times, and the TAT
//     is the end of the queue, so moving it back at all would let newcomers
//     be served with them, over the limit. Its slot passes unused.
//     x/time/rate's CancelAt (and the keyless Limiter's, below) gives back
//     the tokens less those reserved after it, which is more than that when
//     a reservation of several tokens has fewer behind it.
//   - Accuracy: delays are exact to the microsecond on the store's clock;
//     the caller's timer adds the runtime's latency. A cancellation locates
//     its reservation with the caller's clock (from before its Reserve call,
//     as Wait measures): a TAT beyond it by less than one interval is that
//     clock's error, and the last of a queue comes back less it, erring by
//     at most the store calls' latency (more by up to the cancel call's,
//     less by up to the Reserve call's); by one interval or more, it is
//     taken for a later reservation and nothing comes back.
//
// # Live changes
//
// A change of a named bucket's rate or burst (a policy reloaded with new
// numbers, see package policy) carries each key's state over by one rule:
// the key keeps the tokens it has left, capped by the new burst. In the
// bucket's units, with T the interval and tau = T x burst, at the change
// (now):
//
//   - the whole tokens left, k = floor((tau_old - (TAT - now)) / T_old),
//     are kept up to the new burst, and the token in progress keeps its
//     time, at most one new interval: TAT' = now + tau_new - min(k,
//     burst_new) x T_new - T_new + min(T_old - remainder, T_new);
//   - a drained key (k == 0) so stays drained whichever way the limit
//     moves; raising gives no burst (50 left of 100 stay 50 at 200/s), and
//     lowering gives nothing (50 left become 30 at 30/s);
//   - a debt (reservations queued beyond the burst, k < 0) stays a debt of
//     the same whole tokens, each at the new interval, within the new
//     reservation horizon;
//   - a key back to full (no state) is full under the new burst, as a
//     fresh key is.
//
// From the change on, the new rate refills. Stores apply the rule on a
// key's first request after the change ([algo.Converter], whose Lua twin
// runs in the Redis script); integers throughout, as the step.
//
// # Keyless limiter
//
// [NewLimiter](r, b) returns a bucket of b tokens, full, refilled at r tokens
// per second ([Limit], [Every], [Inf] as in x/time/rate). Allow drops what
// exceeds the limit, Reserve says how long to wait, Wait blocks (see
// [Limiter]). Times: Allow, Reserve, Wait, Tokens and the setters without a
// time read the monotonic system clock (offset to wall time once, at
// program start), cheap and never backwards; AllowN, ReserveN,
// TokensAt, SetLimitAt, SetBurstAt, DelayFrom and CancelAt take the time
// explicitly (using its monotonic reading when it has one). Both agree on a
// shared scale; times more than about 146 years from the process start are
// clamped to it. The zero Limiter rejects everything; every method is safe
// for concurrent use.
//
// Its state is one atomic word: the TAT as a float64 of nanoseconds relative
// to a base near the present (re-based about every 18 minutes, so that it
// stays exact to 2^-12 ns). It is a float because a Limit is a float: its
// interval is rarely a whole number of nanoseconds, and integer arithmetic
// would drift by the rounding on every token. The limit and burst live in an
// immutable generation next to that word; a setter freezes the word, converts
// the state and publishes the next generation, so that no decision is ever
// taken against a configuration no longer current. Allow reads the clock
// once and makes one CAS when it admits (a second atomic write, to record
// the time, once reservations or setters are in use), none when it denies:
// no lock and no allocation.
//
// # Where the keyless Limiter differs from x/time/rate, and why
//
// Switching is an import change for the common calls; these differences are
// deliberate:
//
//   - A time older than one the limiter has seen never credits anything.
//     x/time/rate reads the clock outside its lock and moves its last update
//     time back when a late caller arrives, so that the same interval is
//     credited again and again: under contention the limit can be exceeded
//     thousands of times (Go issues 71360 and 65508). Here a late caller sees
//     the tokens of its own, earlier time; a CancelAt, SetLimitAt or
//     SetBurstAt with an older time than the latest charge is taken as
//     happening at that charge. (To keep Allow at one atomic write, charge
//     times are recorded from the first reservation or setter on: a cancel
//     can only give back what a reservation took after that, and only the
//     very first setter can be dated before earlier charges; it then applies
//     the new limit from its own time.)
//   - A negative n is refused (AllowN false, ReserveN not OK, WaitN an error
//     wrapping [floodgate.ErrInvalidCost]); in x/time/rate it silently adds
//     tokens. n == 0 behaves as there: allowed unless reservations are
//     waiting for tokens. n > burst is refused unless the limit is Inf, as
//     there.
//   - A NaN or negative limit is taken as 0 and a negative burst as 0; a
//     limit of Inf or more (including +Inf) is Inf. Limit and Burst report
//     the values in force. (x/time/rate keeps NaN, whose arithmetic is
//     undefined.)
//   - A reservation that could never be served (limit 0 with too few tokens,
//     or a wait of 2^63 ns, 292 years, or more) is not OK and takes nothing;
//     x/time/rate makes it OK with an infinite delay and takes the tokens.
//   - Delays are rounded up to whole nanoseconds (x/time/rate truncates), so
//     that acting after the delay never runs ahead of the limit. Decisions
//     can therefore differ within 1 ns of the boundary.
//   - WaitN fails at once, without sleeping, when the tokens would come after
//     the context's deadline, with an error wrapping
//     [floodgate.ErrWouldExceedDeadline] and so [context.DeadlineExceeded]
//     (x/time/rate's error wraps neither). With limit 0 and too few tokens,
//     WaitN waits for the context or for a setter, and then tries again; in
//     x/time/rate it can only wait for the context.
//   - CancelAt gives back what the reservation took, less what later
//     reservations are scheduled behind it, never more and never beyond the
//     burst; only the first cancel counts (in x/time/rate a second one
//     credits again), and after SetLimit or SetBurst it gives nothing back.
//     After cancelling a reservation that others are scheduled behind,
//     x/time/rate keeps its latest scheduled time apart from its tokens; one
//     word cannot, so a later cancel of an older reservation may give back
//     somewhat more than x/time/rate would (never more than it took).
//   - A time far in the future that is charged (AllowN at now+10 years, say)
//     puts the limiter in debt until the clock gets there: the schedule is
//     absolute. x/time/rate recovers at once, by moving its clock back, which
//     is the double credit above.
//
// The test suite runs both limiters side by side on random sequences and
// checks that these are the only differences.
package bucket
