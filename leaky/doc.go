// Package leaky is a keyed leaky bucket with the semantics of nginx's
// limit_req module, so that a limit ported from an nginx configuration gives
// the same verdicts, request for request and millisecond for millisecond.
//
// # From nginx to Config
//
//	nginx                                    leaky
//	---------------------------------------  -----------------------------------------------
//	limit_req_zone $key zone=z rate=10r/s    Config{Name: "z", Rate: floodgate.PerSecond(10)};
//	                                         NewKeyed(store, cfg), $key passed to Take
//	limit_req_zone ... rate=30r/m            Rate: floodgate.PerMinute(30)
//	limit_req zone=z                         Burst: 0 (the default): one request per 1/rate
//	limit_req zone=z burst=20                Burst: 20: excess requests delayed (Decision.Delay)
//	limit_req zone=z burst=20 nodelay        Burst: 20, NoDelay: true
//	limit_req zone=z burst=20 delay=8        Burst: 20, Delay: 8 (two-stage)
//	limit_req_dry_run on                     the transport's dry run (httplimit.WithDryRun,
//	                                         grpclimit.WithDryRun)
//	$limit_req_status                        from the Decision: REJECTED (!Allowed), DELAYED
//	                                         (Delay > 0), PASSED (see ExampleNewKeyed_delay)
//	limit_req_status 429                     the middleware's job: a denial is Allowed == false
//	several limit_req in one location        floodgate.All(limiters...) (Delay = the largest)
//	the request waits in nginx               Shape(ctx, limiter, key, 1), or wait Decision.Delay
//
// Two limiters with the same Name on one store share each key's state, like
// two limit_req directives on one zone, even when their parameters differ
// (a changed zone keeps its state); unnamed limiters never share state (see
// [algo.Identity]).
//
// [ParseNginx] reads the two directives as written: ParseNginx("10r/s",
// "zone=ip burst=20 nodelay").
//
// # The arithmetic (nginx's, in integers)
//
// The rate is kept in milli-requests per second, truncated as nginx does (1r/m
// is 16, so one request per 62.5 s). Each key keeps last, the millisecond of its last admitted request, and excess, in
// milli-requests. A request at millisecond now computes
//
//	ms     = now - last        (a clock that went back by less than 60 s counts as 0,
//	                            by more as 1 ms, after which last is re-based)
//	excess = max(0, excess - rate*ms/1000 + 1000)
//
// and is rejected when excess > burst*1000. A rejected request changes
// nothing (but the re-basing after a clock jump). An admitted one stores
// excess (and last = now, if ms != 0), and is delayed by (excess - delay*1000) * 1000 / rate milliseconds when excess is
// above delay*1000 (delay is Burst with NoDelay, Delay otherwise). A fresh key
// admits its first request with excess 0.
//
// Consequences worth knowing:
//
//   - From idle, Burst+1 requests pass at once, not Burst: the first is within
//     the rate, Burst more are in excess. [Config.Capacity] reports Burst+1,
//     and it is every Decision's Limit. With burst=20 nodelay, 21 requests
//     pass in the same millisecond and the 22nd is rejected.
//   - Default mode (no nodelay, no delay=): the first request passes at once
//     and every excess request is admitted with a Delay that spaces them at
//     the rate: with rate=1r/s burst=5, Delays 0, 1s, 2s, ..., 5s, then
//     rejections.
//   - delay=N: the first N+1 requests from idle (the first plus N in excess)
//     pass undelayed, the next Burst-N are
//     delayed, the rest rejected.
//   - Time has millisecond granularity: two requests in the same millisecond
//     see no leak between them.
//   - nginx may forget a key that has been idle for 60 s once its excess has
//     leaked to zero, but only when it needs room for another key; the next
//     request is then a fresh key's first. leaky never forgets a key before
//     it is fully idle: at 1r/m and slower rates (where 60 s leak less than
//     one request) its verdicts are those of an nginx that kept the key.
//
// A request of cost n counts as n requests arriving in the same millisecond
// and is admitted only if all n are (n may be 1..Burst+1; other costs are
// refused with [floodgate.ErrInvalidCost]). A refund of n subtracts exactly
// the n*1000 milli-requests a take adds; it may leave up to one request of
// credit (excess down to -1000) so that a refund right after a take from an
// idle key restores the idle key. Right after the take, the key then decides
// exactly as if the take had not happened when the rate is a whole number of
// requests per second; at other rates nginx's own rounding (each admitted
// request drops the fraction of a milli-request that rate*ms/1000 truncates)
// is not given back, an error below 1/1000 of a request.
//
// # Decision
//
// Limit is Burst+1. Remaining is how many requests would pass at once now
// (delayed or not). RetryAfter (denials only) is the exact wait until the same
// request passes. ResetAfter is how long until the key is idle again (the next
// request would be treated as the first of a fresh key); it is zero exactly
// when Remaining == Limit. Delay is set on admitted requests in default and
// delay=N modes, in whole milliseconds like nginx.
//
// # Dry run
//
// limit_req_dry_run is the transports' dry-run mode, not the limiter's: the
// limiter decides exactly as when enforcing (a would-be delay is charged like
// a delay, a would-be rejection charges nothing, since a denial consumes
// nothing), and the transport admits the request at once. The state therefore
// evolves exactly as when enforcing, and nginx's dry-run statuses
// (PASSED, DELAYED_DRY_RUN, REJECTED_DRY_RUN) follow from the limiter's
// Decision.
//
// # Reservations and floodgate.Wait
//
// The keyed leaky bucket reserves ([algo.Reservable], [floodgate.Reserver]):
// a reservation is nginx's arithmetic with the burst check replaced by a
// wait check. It is admitted when its Delay, nginx's (excess -
// delay*1000) * 1000 / rate ms, is at most maxWait (the caller's deadline);
// its excess is kept like an admitted request's, past the burst if need be.
// Within the burst it decides exactly as Take; beyond it, reservations queue
// at the rate, 1/rate apart (in whole milliseconds), and a plain request is
// rejected until the queue has leaked back under the burst. [floodgate.Wait]
// reserves and sleeps the whole Delay, shaping delay included: waiters leave
// in the order they reserved (first in, first out), one store call each, no
// polling, none rejected while the queue fits the horizon.
//
//   - A reservation whose Delay would pass maxWait is refused, charging
//     nothing; RetryAfter is then that Delay.
//   - The horizon: a key holds at most 2^42 milli-requests (about 4.4 billion
//     requests) of excess, and no more than 2^40 ms (about 35 years) of leak;
//     a reservation beyond is refused with RetryAfter the time until it fits.
//   - A cancelled reservation (an abandoned Wait) that is the last of its
//     queue comes back in full, exactly as a Refund. One with later
//     reservations behind it gives back nothing, whatever the costs: they
//     keep their times, and the excess is the end of the queue, so giving
//     back any of it would let newcomers be served with them, over the
//     limit. Its slot passes unused.
//   - Accuracy: Delays are in whole milliseconds like nginx's. A cancellation
//     locates its reservation with the caller's clock (from before its
//     Reserve call, as Wait measures): the key's time to idle beyond it,
//     rounded up to whole milliseconds, is taken for a later reservation
//     when it is at least one request's leak (less 1 ms), and is otherwise
//     the clock's error, given back less. The last of a queue thus comes
//     back less the store calls' latency (more by up to the cancel call's,
//     less by up to the Reserve call's), or not at all when that error
//     reaches one request's leak.
//
// # Live changes
//
// A change of a named bucket's rate, burst or delay (a policy reloaded with
// new numbers, see package policy) carries each key's state over by one
// rule: the key keeps what it has left, capped by the new capacity. At the
// change (now) the old excess is leaked to now at the old rate (leaked,
// milli-requests; at least -1000, one request of credit); what is left is
// burst_old - leaked milli-requests (up to Burst+1 requests, negative when
// reservations are queued beyond the burst), and the new excess is
//
//	excess' = min(burst_new - min(burst_old - leaked, burst_new + 1000), maxExcess_new)
//
// with last = now (ms). A drained key stays drained whichever way the limit
// moves, raising gives no burst, lowering gives nothing, a debt stays a
// debt (within the new reservation bound), and the new rate leaks from the
// change on; less than a milli-request of leak in progress is dropped
// (never credited). A key back to idle (no state) is fresh under the new
// parameters. Stores apply the rule on a key's first request after the
// change ([algo.Converter], whose Lua twin runs in the Redis script).
//
// # Units, state, stores and concurrency
//
// Steps take time in Unix microseconds and keep three words of state: W[0] is
// the µs at which the key is idle again (the store may drop it from then on),
// W[1] last (Unix ms), W[2] excess (milli-requests, above the burst only
// for reservations). The zero State is a fresh key. The same step exists in Lua (Spec().Lua) for the Redis store,
// exact in doubles: every integer stays below 2^53 for times below 2^53 µs
// (the year 2255), and divisions are exact floors in both languages.
//
// Rates are integers ([floodgate.Rate]), so a NaN or infinite rate cannot be
// expressed; a rate below nginx's resolution (0.001 r/s) or above 1,000,000
// r/s, a negative burst or delay, a delay above the burst, NoDelay with
// Delay, or a bucket that would take more than 2^40 ms to drain are refused
// by [Config.Algorithm] (and [NewKeyed]) with an error wrapping
// [floodgate.ErrInvalidConfig].
//
// Nothing in this package reads a clock except [Shape], and nothing but
// [Shape] sleeps. The algorithm [Config.Algorithm] returns and the limiter [NewKeyed] returns are safe for
// concurrent use; the store serialises the steps of one key.
package leaky
