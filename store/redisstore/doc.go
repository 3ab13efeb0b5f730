// Package redisstore is the Redis [store.Store] of floodgate: every algorithm
// of the module (token bucket, leaky bucket, the window family) runs on Redis,
// Redis Cluster or Sentinel through a [rueidis] client, so that a fleet of
// processes enforces one global limit. Limits are global rates: 100/s on the
// Redis store is 100/s for the whole fleet, however many processes share it.
//
// # From memory to Redis to Cluster
//
// Limiters take a store; switching stores is one line:
//
//	st, err := memstore.New()                                               // one process
//	st, err := redisstore.New(client)                                       // a fleet, one Redis
//	limiter, err := bucket.NewKeyed(st, bucket.Config{Rate: floodgate.PerSecond(100), Burst: 20})
//
// where client is a rueidis client; the same call works on a Cluster, since
// rueidis finds out what it is talking to:
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"redis:6379"}, DisableCache: true})
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"node1:7000", "node2:7000", "node3:7000"}, DisableCache: true})
//
// A Store made by New does not own the client: close it yourself.
//
// # Starting without Redis
//
// rueidis.NewClient fails at once when Redis is down, so a service built
// on New cannot start while its Redis is away. [Dial] takes the client's
// options instead, and makes and owns the client ([Store.Close] closes
// it):
//
//	st, err := redisstore.Dial(rueidis.ClientOption{InitAddress: []string{"redis:6379"}, DisableCache: true},
//		redisstore.WithFailurePolicy(redisstore.FailClosed(time.Second)))
//
// It fails only on invalid options. While Redis is down it returns a Store
// all the same (after at most the per-decision timeout) whose every call
// goes to the failure policy at once, with a cause wrapping
// [floodgate.ErrStoreUnavailable] and the last connection error, and dials
// again in the background (10ms after the first failure, then with a
// back-off doubling up to 500ms); from the moment the client is made,
// decisions are on Redis: within about 500ms of Redis answering (0.3s
// median, 0.44s at most in 200 runs of TestDialWhileRedisDown, a
// redis-server started 300ms after the store). Limiters, middleware and leases built on it start the same way.
//
// # One decision, one round trip
//
// Each decision is one call of a Lua program that embeds the algorithm's
// Lua twin ([algo.Lua]). The program reads the time from the Redis server
// (TIME, in microseconds: all nodes of a fleet agree on it however their
// own clocks drift), loads the key's state, runs the step, writes the state
// back with a TTL equal to its time to full (algo.State.W[0] - now) or
// deletes the key when the state is full, and returns the decision. A state
// the step left as it was (a denial) is not written again: the key already
// holds it, with a TTL that runs to the same time to full. The Go step and
// the Lua twin are checked to agree, decision by decision and state by
// state, on random sequences: the store implements storetest.TwinStepper
// ([Store.StepTwin]), so every storetest.RunAlgorithm run on it (every
// algorithm package runs one when FLOODGATE_REDIS_ADDR is set) runs
// storetest.RunEquivalence.
//
// # Redis functions, and scripts on Redis 6
//
// On Redis 7 and later (and servers that implement its functions), the
// programs are Redis functions: the store loads each one as a function
// library (FUNCTION LOAD) the first time a server answers that it does not
// have it, and calls it with FCALL. A library runs its top level (the
// twins, the helpers) once, when it is loaded, and keeps what it parsed of
// a policy's parameters from one call to the next; an EVAL script builds
// all of that again on every call. Measured with callgrind on
// redis-server 7.0.15 (BenchmarkScriptCost), a call of three fixed windows
// at once (an Envoy rate limit request with three descriptors) costs the
// server about a third fewer instructions as a function than it did as a
// script before functions, a token bucket decision about a fifth fewer.
// What this means for you:
//
//   - Libraries named floodgate_ and 20 hex digits (a hash of their code)
//     appear on your server (FUNCTION LIST LIBRARYNAME 'floodgate_*'), a few
//     kilobytes each, one for each combination of algorithms your programs
//     use. Each version of floodgate has its own names, so processes of two
//     versions never run each other's code. Deleting them (FUNCTION DELETE,
//     FUNCTION FLUSH) is harmless: the store loads them again on its next
//     call. FLUSHALL and SCRIPT FLUSH leave them; functions are kept in the
//     RDB and AOF files and replicated to replicas like data.
//   - On a Cluster each master needs its own copy: the store loads a
//     library on every node the client knows, in parallel, when any node
//     lacks it (replicas refuse a load with READONLY and get their
//     master's). The first call of each library on a server therefore
//     takes two more round trips (FUNCTION LOAD on every node at once,
//     then FCALL again) and the compilation of the library, within the
//     call's timeout.
//   - The ACL user needs FCALL and FUNCTION LOAD (the @scripting category
//     has both), besides GET, SET, DEL, MGET, TIME and, for leases, ZADD,
//     ZREMRANGEBYSCORE, ZREM, ZCARD and PEXPIRE. A user who may not call or
//     load functions gets the same decisions with EVALSHA: on a refusal
//     (NOPERM) or a server without functions (Redis 6: an unknown command)
//     the store runs its programs as scripts, at the price of one extra
//     round trip for that call, and tries functions again a minute later
//     (an ACL grant, a rolling upgrade to Redis 7). A library whose code a
//     server refuses (a twin whose top level calls math or string, which
//     a library's top level cannot: refer to them inside the twin's
//     functions) runs as a script, alone, for the rest of the process. A
//     load refused for a passing reason (out of memory, a busy or loading
//     server) runs that one call as a script.
//   - As a script (EVALSHA through rueidis.NewLuaScript, EVAL when the
//     server answers NOSCRIPT after a restart or a SCRIPT FLUSH), a call
//     parses its policy's parameters on every call, which travel as one
//     argument: on Redis 6 a call costs the server about what it did
//     before functions (within some 6% either way).
//   - A function declares no flags, so Redis treats it as one that writes:
//     under maxmemory with noeviction and the memory full, FCALL is refused
//     before it runs (an error, handled by the failure policy), where a
//     script would have read the key and then failed on its write.
//
// Programs that consume are never retried blindly: a command that was
// written to a connection that then failed may have run, and running it
// twice would count the request twice. rueidis retries only commands marked
// retryable, and neither FCALL nor EVALSHA is (the scripts are built with
// NewLuaScript, not NewLuaScriptRetryable), so a connection error or a
// timeout is reported, not retried; Cluster redirections (MOVED, ASK) are
// followed, because a redirected call did not run. The store calls again
// only after a Redis error that says the call did not run: "Function not
// found" (after loading the library), NOSCRIPT (rueidis, with EVAL), an
// unknown command or NOPERM (with EVALSHA).
//
// Under concurrency, calls of one algorithm beyond a few in flight
// ([WithCoalescing], 2 by default) wait for one of them to finish and then go
// together in one script call: one TIME, then each decision in turn, as
// atomically as one. Each decision is still made by exactly one script run;
// the server's work per decision drops by about half. ApplyAll groups are
// coalesced the same way, per set of Lua twins: the waiting groups go in one
// script call that runs each in turn, all or nothing as alone, and each
// sees the ones before it. Coalescing applies to single-node and Sentinel
// clients (on a Cluster the keys of one script must share a slot).
//
// Redis 6 or later is needed (scripts that call TIME before writing rely on
// effects replication, the default since Redis 5, and a window that counts
// within its window is written with SET KEEPTTL, Redis 6); Redis 7 or later
// for functions.
//
// # Keys
//
// The Redis key of a user key is
//
//	prefix + "{" + hex(FNV-1a-64(key)) + "}" + hex(namespace) + ":" + key
//
// with prefix "floodgate:" by default ([WithPrefix]). The hash tag is a hash
// of the user key, so braces in a user key never choose the Cluster slot; the
// user key itself follows, so two user keys never share state whatever their
// hashes; the namespace ([algo.Spec].Namespace) keeps different algorithms
// and configurations on one key apart. Any byte string is a valid key (empty,
// binary, CR/LF, 64 KiB...). A key costs Redis memory for its length plus a
// few decimal numbers, and disappears when its limit is full again.
//
// # Live changes
//
// The namespace of a named limit does not depend on its parameters, so a
// change of rate, burst or window (package policy) finds every key's state
// where it was. The value of a key holds the state and, after "|", the
// parameters it was written with ([algo.StateParams]: a token bucket's
// interval and burst, a leaky bucket's rate and burst, a window's limit and
// length). A script that reads a state written with other parameters than
// its caller's converts it first, with the twin's convert
// ([algo.Converter]: a key keeps the units it has left, capped by the new
// capacity), in Lua, exactly as the Go Convert does. Processes that pick up
// a change at different moments so each convert what the other wrote, and
// together never admit more than the larger of the two configs would. (The
// parameters make a token bucket's value a string rather than an integer:
// some 136 bytes of Redis memory a key instead of 104, measured with
// MEMORY USAGE; the other algorithms' values were strings already.)
//
// # Several limits at once
//
// [Store.ApplyAll] decides several (key, algorithm, cost) ops in one script:
// all-or-nothing, atomically (a denial writes nothing anywhere), in one round
// trip, each op with its own decision. floodgate.All ("10 per second AND
// 1000 per hour" on one key) and floodgate.TakeAll ("per IP AND per API
// key") over the keyed limiters of one Store come down to one ApplyAll. The
// keys of one user key share a hash tag, so several limits on one key are
// one script on Cluster too; ops on keys in different slots are decided in
// two phases (evaluate every slot, then commit slot by slot, refunding on a
// race), as ApplyAll documents.
//
// # Timeouts and failure policies
//
// Every decision is bounded by a timeout ([WithTimeout], 50ms by default; a
// caller context with an earlier deadline wins). What happens when Redis
// cannot decide (down, too slow, an error) is explicit ([WithFailurePolicy]):
//
//   - [FailError] (the default): Apply returns an error wrapping
//     [floodgate.ErrStoreUnavailable]; the caller's fail mode (for example the
//     HTTP middleware's) decides.
//   - [FailOpen]: the request is admitted; the observer sees
//     [floodgate.OutcomeErrorOpen].
//   - [FailClosed]: the request is denied with a RetryAfter; the observer sees
//     [floodgate.OutcomeErrorClosed].
//   - [Fallback]: a local store (typically a memstore) decides with the rate
//     and the capacity divided by the number of nodes, each local limit
//     starting as after an even pace at the limit (a bucket drained); the
//     observer sees
//     [floodgate.OutcomeFallback] with the local verdict. [FallbackWith] lets
//     you choose the local configuration.
//
// A store that hangs is a store that failed. A connection error (Redis
// down: the dial is refused, the connection reset) stops the sending:
// rueidis would dial again for every call, thousands of connection
// attempts per second from one busy process. So does a stall (a stopped
// or swamped server, a partition that drops packets): a call that timed
// out while Redis answered no call of the store from the moment it was
// sent (to within 1ms); a call that times out while others are answered
// (one slow call on a busy Redis) does not. Calls then go straight to the
// failure policy, in microseconds, except those already in flight, which
// wait out their timeout; one probe at a time (a PING on a goroutine of its
// own, bounded by the timeout) goes after a back-off (5ms, doubling up to
// 50ms), when calls come in: at most about 20 connection attempts per
// second per Store, and back on Redis within about 50ms of its answering
// the probe or a call in flight (after a restart without persistence, the
// library is loaded again, or the script sent again on NOSCRIPT). Measured
// (TestRedisStallUnderLoad: a redis-server stopped with SIGSTOP for 3s
// under 32 deciding goroutines, 200 runs on a shared 2-core machine): the
// calls in flight wait their 50ms, the store stops sending some 52ms after
// the stop, and over the 3s the median decision takes under a microsecond
// (0.6µs median of runs) and the 99th percentile 4-35µs (15µs median),
// with one probe in flight at a time (30 in 3s); after SIGCONT decisions
// are on Redis again within 3-135ms (10ms median). A call that timed out may still run when
// the server wakes up (its reply then goes nowhere): it is charged, never
// retried (see above). The rule is per store, not per node: on a Cluster
// whose other masters answer, the calls on a stalled master's slots wait
// out their timeout. A context cancelled by the caller (or its own earlier
// deadline) is the caller's error under every policy, and tells the store
// nothing about Redis.
//
// Group decisions ([Store.ApplyAll]: floodgate.All, TakeAll) fail exactly
// like single ones: every decision the failure policy made is marked
// (floodgate.Decision.Fallback; Limit 0 for the blanket FailOpen and
// FailClosed answers), so that a transport answers it as it answers a
// single limiter's (a 503, not a 429, under FailClosed).
//
// With [WithObserver], the store reports its own outcomes, with Source
// floodgate.SourceStore: the three failure outcomes, each with its own
// label. Decisions Redis made are the transport's to report (once per
// request), never the store's.
//
// # Costs
//
// A decision allocates about three times: the Redis key, the reply array, and
// a share of the timeout machinery (calls that start within the same
// fraction of the timeout share one deadline context; a caller context that
// can be cancelled and has no deadline pays context.WithTimeout instead). Its
// latency is one Redis round trip plus the function (on a 2-core KVM guest,
// some 15-20µs of server time for an admitted token-bucket decision, of
// which the TIME, GET and SET calls are about 10µs, against 0.2µs for a
// PING; a denial skips the SET; BenchmarkScriptCost measures it, with the
// server's own figure from INFO commandstats); under concurrency rueidis pipelines the calls of all
// goroutines on one connection. The store never shows rueidis the deadline
// of a call, only its Done channel: with a deadline rueidis may run a lone
// call synchronously and close the connection when it times out, and the
// calls after it then wait for a new connection's handshake. The price is
// that a lone call goes through rueidis' background writer and reader, a
// little slower than a synchronous PING.
//
// A Store is safe for concurrent use.
package redisstore
