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
// (3 P by default) are dropped; Close gives back what is held.
//
// When a lease is spent before its renewal arrives, the request waits for
// the renewal in flight (bounded by the store's timeout) or makes it. When
// the global bucket has fewer tokens than a worthwhile batch (a quarter of
// a lease), Grant takes none and says when it will have them; a request
// that is waiting then takes the tokens there are, as a direct decision
// would. Until the bucket has tokens again the node denies the key in
// memory, with that RetryAfter: the time of one token when the node is
// alone, of a batch (spread at random over a few such waits, so that nodes
// do not all ask at once) when others compete for the refill. With the
// fleet's demand above the limit, the calls are thus about one per batch
// per node, none for the requests denied in memory (four processes at
// 1.5x the limit: about 0.7 calls per admitted token, for 1.5 decisions
// per token).
//
// # Bounds
//
// Tokens are debited from the global bucket before they are spent, and each
// is spent once, so the fleet never admits more than the one global bucket
// grants: from a key's first request, at most burst + rate x elapsed, as
// one bucket. A token may be spent up to a TTL after its grant, while the
// bucket refills: over an interval that starts with tokens held, the fleet
// admits at most burst + rate x length + H, H the tokens the leases held at
// its start (at most the sum of the lease sizes, about a burst, none older
// than the TTL). The cumulative count never goes above the one bucket's.
// The one exception is a Redis failover that loses acknowledged writes
// (replication is asynchronous): the grants of the last replication lag
// before the failover can be granted again, at most burst + rate x lag
// tokens per key per failover (what the bucket could grant in that time).
//
// Under-admission, against one ideal global bucket fed the same requests,
// is bounded by the tokens the leases keep from it. At any time T,
//
//	ideal(T) - admitted(T) <= H(T) + E(T) + sum over nodes of L_i
//
// where H is the tokens held in outstanding leases, E the tokens dropped at
// their TTL so far (both in [Limiter.Stats]), and L_i node i's lease size
// (<= ceil(burst / N)): what a node may wait for when the bucket is nearly
// empty. With every node busy, H <= sum of 1.5 L_i, so the shortfall
// is at most about 2.5 bursts plus what expired. The tests measure it on a
// deterministic simulation of 50 nodes and on four processes on a real
// Redis.
//
// # Cold keys
//
// A key below Config.HotRate (20/s by default) is decided by a direct call
// to the global store (store.Limiter on it: one round trip, no tokens held).
// The first tick of the sweeper (P/2) in which a key is seen HotRate x P/2
// times makes it leased; a leased key whose rate falls below HotRate/2 goes
// back to direct calls once its lease is spent or dropped. Tracked keys are
// bounded (Config.MaxKeys; beyond it keys go direct), about 210 bytes each
// plus the key (measured at 100,000 keys), and a key with no demand for a
// TTL is forgotten.
//
// # Faults
//
// When the global store cannot answer, a node spends what it holds; then
// each decision is the store's own (its failure policy: for redisstore
// error, open, closed or a local fallback), or with Config.DividedFallback
// a local bucket at the global rate and burst divided by the number of live
// nodes (Decision.Fallback set, and reported to Config.Observer as
// floodgate.OutcomeFallback with the store's error). The number of nodes comes from heartbeats:
// every node records itself each Config.Heartbeat (1s) in a sorted set with
// a TTL of three periods (redisstore.Store.Heartbeat). A failed renewal is
// retried 20ms later, through the store's breaker, so a node leases again
// within tens of milliseconds of Redis answering.
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
