// Package lease decides a global limit at local speed: a keyed token bucket
// whose state lives in a shared store (Redis, through store/redisstore),
// decided on each node in memory from tokens leased in batches.
//
// # Leases
//
// Each node holds, per hot key, a lease: tokens debited from the global
// bucket (the Redis store's own GCRA, on the server's clock) by one Grant
// script call that takes up to want tokens at once. A request is admitted
// when the lease holds its cost: one atomic compare-and-swap, no clock read,
// no I/O, no allocation. When what is left would last less than half a
// refresh period P (Config.Refresh, 100ms by default) at the key's recent
// rate, a background worker asks for the next lease, one request in flight
// per key. A lease is sized from the node's own demand on the key: rate x
// 1.5 P, at least 1, at most a fair share of the burst (burst / live nodes),
// so busy nodes get more and idle ones return to zero. A busy key thus costs
// one Grant per P or less, whatever its rate. Tokens unspent after the TTL
// (3 P by default) go back to the global bucket (dropped when the store
// does not take them); Close gives back what is held.
//
// When a lease is spent before its renewal arrives, the request waits for
// the renewal in flight (bounded by the store's timeout) or makes it. When
// the global bucket has fewer tokens than a worthwhile batch (a quarter of
// a lease), Grant takes none and says when it will have them; the node
// denies the key in memory until then.
//
// # A saturated bucket is divided
//
// Every Grant reports the node's demand on the key (units per second,
// admitted and refused) on a board kept beside the key in the store. When
// the demands of the nodes add up to more than 0.9 of the bucket's
// refill, the bucket is divided: each Grant takes every whole token the
// bucket holds (and the refill its capacity lost since it filled, when the
// claims came later than the bucket takes to fill: at most 2 P of it),
// spreads it over the nodes' pools on the board in proportion to their
// demands, and hands its node what its own pool holds. Each node thus gets rate x its demand / the fleet's demand, what
// one bucket fed every node's requests gives it, and claims it once per
// refresh period P (sooner when the burst holds less than a period's
// refill: every 0.9 x burst / rate), denying in memory between claims
// (RetryAfter: until its next claim). The cost is one Grant per node per
// period whatever the load when the burst holds at least a period's
// refill (burst >= rate x P): five processes offered 3x a limit of
// 2,000/s (burst 500) make about 10 Grants a second each, about 100
// decisions per Grant (TestFleetShares). A smaller burst costs a Grant
// per node every 0.9 x burst / rate. A node whose report is not renewed for 2 TTL (a node
// that died) leaves the board and its pool is spread over the others;
// Close withdraws the node and gives its pool back with its lease. A key
// refused by a direct decision while half as busy as HotRate leases from
// then on, so that light nodes take part in the division too.
//
// # Bounds
//
// Tokens are debited from the global bucket before they are spent, and each
// is spent once, so the fleet never admits more than the one global bucket
// grants: from a key's first request, at most burst + rate x elapsed, as
// one bucket. A token may be spent up to a TTL after its grant, while the
// bucket refills: over an interval that starts with tokens held, the fleet
// admits at most burst + rate x length + H, H the tokens held at its
// start, in leases and in the pools of a divided bucket (debited before
// the interval, spent in it), plus, for a divided bucket, the refill its
// capacity lost just before the interval (at most rate x 2 P). The cumulative count never goes above the
// one bucket's.
// The exceptions are failures. A Redis failover that loses acknowledged
// writes (replication is asynchronous): the grants of the last
// replication lag before the failover can be granted again, at most
// burst + rate x lag tokens per key per failover (what the bucket could
// grant in that time). An outage decided by the divided fallback: the
// local buckets know nothing of the global one, so a node cut off from a
// Redis that the others still reach admits up to its 1/N share on top of
// them (the fleet: up to (1 + 1/N) x rate), and when Redis answers again
// its bucket has refilled during the outage and grants as if nothing had
// been admitted meanwhile.
//
// Under-admission, against one ideal global bucket fed the same requests,
// is bounded by the tokens the leases and pools keep from it. At any time
// T,
//
//	ideal(T) - admitted(T) <= H(T) + S(T) + E(T) + sum over nodes of L_i + rate x TTL
//
// where H is the tokens held in outstanding leases, S the tokens in the
// pools of a divided bucket, E the tokens dropped at their TTL so far
// (those the store did not take back; H and E in [Limiter.Stats]), L_i
// node i's lease size (<= ceil(burst / N)): what a node may wait for when
// the bucket is nearly empty, and the last term what a shift of demand
// between nodes costs until their reports follow it. The tests measure it
// on a deterministic simulation of 50 nodes (each node's share of the
// admissions within 0.1 points of its share of the demand, 98-100% of the
// ideal at 0.5x, 1x, 3x and 10x the limit, with nodes joining, leaving
// and dying) and on processes on a real Redis.
//
// # Cold keys
//
// A key below Config.HotRate (20/s by default, in units of cost) is
// decided by a direct call to the global store (store.Limiter on it: one
// round trip, no tokens held). The first window (the longer of P/2 and
// 250ms) in which a key is seen HotRate x that window times makes it
// leased, and so does a direct decision refused by the global bucket, or
// leaving it under a tenth full, for a key seen a quarter of that (the
// bucket is likely divided: the key joins the division rather than take
// the refill that drips in between the others' claims). A leased key whose
// rate falls below HotRate/2 goes back to direct calls once its lease is
// spent or dropped, unless it has a share of a divided bucket. Tracked
// keys are bounded (Config.MaxKeys; beyond it keys go direct), about 210
// bytes each plus the key (measured at 100,000 keys), and a key with no
// demand for a TTL (2 TTL for a key with a share) is forgotten.
//
// # Faults
//
// When the global store cannot answer, a node spends what it holds; then
// each decision is made in memory by the divided fallback: a local bucket
// at the global rate and burst divided by the number of live nodes
// (Decision.Fallback set, and reported to Config.Observer as
// floodgate.OutcomeFallback with the store's error). A key's fallback
// starts where the global bucket was at this node's last grant (a drained
// limit stays drained, a full one starts full), so that no burst is handed
// out at the switch: four nodes offered 3x the limit admitted 0.99x and
// 1.00x the global rate in the two seconds of a killed Redis
// (TestOutagePolicies). A cold key whose direct decision fails with
// floodgate.ErrStoreUnavailable is decided the same way: keep the store's
// own failure policy at FailError (redisstore's default) so that its
// errors reach the lease. With Config.StoreFailurePolicy, decisions are the
// store's failure policy instead (open, closed or its Fallback): failing
// open then removes the limit during an outage. The number of nodes comes
// from heartbeats: every node records itself each Config.Heartbeat (1s) in
// a sorted set with a TTL of three periods (redisstore.Store.Heartbeat).
// A failed renewal is retried 20ms later, through the store's breaker, so
// a node leases again within tens of milliseconds of Redis answering.
//
// # Fleet-divided mode
//
// Mode Divided decides every key in memory at rate / N and burst / N (N
// from the heartbeats, the way Envoy's local rate limit divides by the
// cluster size): no I/O per decision, about the global rate, not at most it
// (nodes that join or leave change N up to a heartbeat late, and each node
// may spend its burst share at once).
//
// # Concurrency
//
// A Limiter is safe for concurrent use. Its goroutines (a sweeper, a
// heartbeat, Config.Workers renewers) stop at Close.
package lease
