// Package memstore is floodgate's embedded, in-memory [store.Store]: the
// default store of every keyed limiter when the state need not be shared
// between processes.
//
// # Use
//
//	s, err := memstore.New()                  // defaults: 256 shards, 4Mi keys, sweep every minute
//	defer s.Close()
//	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 20})
//
// # Time
//
// The store owns time: each Apply reads the clock under the key's lock (on
// the token bucket's path without it, see Speed, after it has read the
// key's state; a second time when that path's write finds the key changed
// and decides again under the lock), and hands the algorithm Unix
// microseconds. The
// default clock is the monotonic system clock (offset to wall time once at
// start, never backwards); [WithClock] injects another one for tests.
// [WithCoarseClock] opts in to a cached time,
// refreshed every resolution (say 1ms) by one goroutine shared by the
// process: one atomic load instead of a clock read, about half of a
// decision on a hot key, for decisions made up to the resolution late, and
// later on a machine short of processors (see WithCoarseClock for the
// accuracy cost). The rule: only the algorithms whose grain ([algo.Grain],
// the time one unit of cost takes at their rate, e.g. 10ms at 100 per
// second) spans ten resolutions read it, so that a resolution's lag moves a
// decision by at most a tenth of a unit; faster rates keep the exact clock,
// and so does ApplyAll. The default stays the exact clock for every
// algorithm: the store conformance suite (storetest) asks RetryAfter,
// ResetAfter and Remaining to be those of a time within the call, which a
// cached time, always behind, cannot give. Algorithms cope with a clock that goes backwards;
// note only that a key dropped because it was full (see below) is fresh
// after a backward jump, where a kept state might have had a little less.
//
// # Keys and memory
//
// A key is never stored as a string. The key is hashed with
// [hash/maphash] under a per-store random seed into a 64-bit id that picks
// the shard and the home slot, and a second, independent 64-bit hash of
// the key, combined with the namespace (Spec.Namespace, or the version's,
// see below), is kept beside it as a check hash. Entries with the same id
// but different check hashes are told apart (the table probes past the
// other one), so a 64-bit collision changes nothing; two keys would share
// state only if both 64-bit hashes collided (about 2^-128 per pair, with
// seeds an attacker cannot know). Different namespaces never share state
// for one key: their check hashes differ by construction, and their
// entries sit side by side in one cluster of slots.
//
// Each shard keeps one open-addressing table (Robin Hood probing, no
// pointers, grown by half at 7/8 load) per state width, so a token bucket
// (one word) costs 24 bytes a slot: 34 bytes a key measured after
// inserting 1,000,000 keys (see BenchmarkBytesPerKey). Algorithms with a
// log (Spec.MaxLog > 0) keep it in a slice beside the slot, reused in place.
//
// # Speed
//
// A decision costs one clock read, one uncontended lock and unlock, two
// maphash passes over the key and one table probe, beside the step itself.
//
// The decisions of floodgate's token bucket (one word of state and a
// DecideWord method, its step with the decision's fields returned in
// registers: any algorithm with that method; the others keep the lock) on
// a key the store already holds skip the lock when they
// change nothing: the one-word table is published to lock-free readers
// (its slots written with atomic stores, a sequence counter moved on by
// every write, odd while an entry moves or an ApplyAll writes its group),
// so a decision reads the key's word, checks that no entry
// moved meanwhile, reads the clock and steps. A denial or a peek, which
// leaves the state as it was, returns there: the decision of the state as
// it stood at that read, at a time read after it, which is what the lock
// gives. A step that changes the state takes the lock and writes the new
// word only if the sequence has not moved since the read: no write came
// in between, so the state's last writer read its clock before this one
// (time never goes backwards from one state to the next) and no update is
// lost; otherwise it decides again under the lock with a fresh clock read.
// On a drained hot key (every call a denial) this saves the lock's two
// atomic operations; on a key that admits it adds a compare of the counter
// and one atomic add to the write. A [store.Limiter] of the token bucket
// on a Store (bucket.NewKeyed) takes through a path the store binds once,
// when the limiter is built: the algorithm's layout and interfaces are
// looked up then, not on each call, and the decision comes back field by
// field in registers rather than as a Decision copied through memory.
// Algorithms that implement [algo.Layout] (every one floodgate ships) are
// not asked for their whole Spec on each call, and one-word algorithms that
// implement [algo.WordStepper] (the token bucket) are stepped on the word
// itself, in registers, and write their decision in place. The others that
// implement [algo.StateStepper] (the leaky bucket and the three windows)
// step the state in place in the shard's scratch memory, and write their
// decision there, instead of passing both by value. BenchmarkTakeHotKey and
// BenchmarkTakeZipf1M measure a token bucket on one hot key and on a
// million keys; the benchmarks module compares them with other libraries.
// ApplyAll allocates nothing for groups of up to 8 ops (BenchmarkApplyAll).
//
// # Live changes
//
// The shard of a key depends on the key alone, so every namespace of one
// key is under one lock. An algorithm that is a [algo.Lineage] (a version
// of a limit, see package policy) keeps its states under a namespace of
// its own; when a key has no state there, the store looks it up under the
// namespaces of the limit's other versions ([algo.Versions], newest first:
// the earlier ones, and the later ones for a version replaced while a
// decision on it was in flight), converts the first state it finds
// ([algo.Converter]) unless the parameters are the same, and moves it
// (Apply; ApplyAll moves it only when it commits). So a key's state sits
// under one version's namespace at a time, and every version finds it.
// That is one probe per other version on a miss, and nothing at all on a
// hit or for an algorithm that is no Lineage. The bytes per key do not
// change.
//
// # Bounds and expiry
//
// A key whose state is back to full (State.W[0] <= now) is equivalent to a
// fresh key: Apply does not keep it, a background sweeper ([WithSweepInterval])
// drops the ones that become full while idle, and the MaxKeys bound
// ([WithMaxKeys]) drops them first when a shard is full. Only when no sampled
// entry is full is a live entry evicted; [Store.Stats] counts those. A sweep
// holds one shard's lock while it scans that shard (about 16,000 keys a
// shard at the default bound), then moves to the next.
//
// # Concurrency and cancellation
//
// A Store is safe for concurrent use. Apply on one key is atomic; a shard's
// lock is held for one table probe and one step. [Store.ApplyAll] locks the
// shards of all its keys, in shard order (no two calls can deadlock), and
// decides the whole group under them: all or nothing, and a denied or
// evaluated group changes no state. Neither blocks on anything but those
// locks, so both honour a context only on entry: a context that is already
// done gives its error, not a decision.
//
// The background sweeper is a goroutine started by the first key the store
// keeps. [Store.Close] stops it and waits for it; Apply and ApplyAll after
// Close return [floodgate.ErrClosed]. A Store dropped without Close does
// not keep its goroutine: the goroutine holds the shards, not the Store, and
// stops once the garbage collector finds the Store unreachable (at a
// collection after its last use, not at once).
package memstore
