// Package floodgate is an embeddable rate-limiting library for Go services.
//
// Rate limiting is a reliability primitive, not only a security feature:
// internal callers (retry loops, fan-outs, health checks) overload a system as
// surely as attackers do. floodgate gives every caller a budget, enforces it
// cheaply at every hop, and makes every "no" explicit, observable and honest:
// a [Decision] carries what a 429 response needs (Retry-After, remaining
// quota, time to reset) without recomputation.
//
// # Which package for which job
//
//	job                                          package
//	throttle your own outgoing calls             bucket.NewLimiter (keyless, lock-free; x/time/rate's API)
//	a budget per client, route or token          bucket.NewKeyed, leaky.NewKeyed, window.New* on a store
//	the embedded default store                   store/memstore (sharded, bounded, idle keys evicted)
//	one global rate across a fleet               store/redisstore (rueidis, Lua, Redis Cluster)
//	a global rate at local speed                 lease (tokens leased in batches from the global bucket)
//	protect net/http handlers, call out          middleware/httplimit (Middleware, Transport)
//	protect gRPC servers, throttle clients       middleware/grpclimit (interceptors)
//	Envoy's global rate limiting                 rls (its own module; cmd floodgate-rls)
//	limits that follow the origin's latency      adaptive (Vegas, Gradient2, AIMD, constant)
//	shed the least important work first          priority (critical / standard / best-effort)
//	limits as data: plans, config files, reload  policy (with httplimit.Policies, grpclimit.Policies)
//	measure demand, recommend and tune a limit   shadow (shadow/shadowprom: its Prometheus gauges)
//	metrics and logs of every decision           observer/promobserver, observer/slogobserver
//	check, diff, replay and report configs       cmd/floodgate (its own module)
//
// # Algorithms
//
//	algorithm               bursts                      memory per key   exact   pick it when
//	token bucket (GCRA)     up to Burst at once         1 word           yes     the default: a rate with a burst allowance
//	leaky bucket (nginx)    burst+1, then smoothed      3 words          yes     porting nginx limit_req; shaping (delay mode)
//	fixed window            up to 2x at a boundary      2 words          per window  simple quotas ("1000 per hour") nodes agree on
//	sliding log             none beyond the limit       up to limit      yes     small limits that must be exact
//	sliding-window counter  bounded approximation       4 words          ~       large limits per window, cheap and smooth
//
// # This package
//
// The root package holds only what every part shares: [Decision], the keyed
// [Limiter] interface (and [Refunder], [Describer], [GroupTaker]), [Rate],
// [Description], [Clock], the sentinel errors, [Wait] (block until admitted,
// failing fast before a deadline), composition ([TakeAll] over (limiter, key)
// checks and [All] over one key: all or nothing, with the longest RetryAfter
// of every refusing limit) and the [Observer] hook that receives every
// decision.
//
// A limit's identity is its Name (every algorithm's Config has one): two
// limiters with the same Name on one store share each key's state (they are
// one limit), and unnamed limiters never share state, even with equal
// parameters.
//
// Time: keyed algorithms compute in integer microseconds (so that their Redis
// twins, in Lua doubles, are exact); [Decision] durations are [time.Duration].
// Every type in floodgate documents its concurrency safety; limiters and stores
// are safe for concurrent use.
//
// # Where things go
//
//	floodgate (this package)          the shared vocabulary; imports nothing of the module
//	bucket, leaky, window             algorithms: a Config, a pure Go step, its Lua twin
//	store                             the Store contract and the one keyed Limiter type
//	store/algo                        the contract between algorithms and stores (for implementers)
//	store/memstore, redisstore        stores; store/storetest is the suite every store passes
//	lease                             global limits decided locally on leased tokens (over a store)
//	adaptive, priority                concurrency limits and shedding
//	middleware                        what the transports share: fail and delay modes, Acquirer, Waiter, Matcher
//	middleware/httplimit, grpclimit   transports: map requests to checks, translate verdicts
//	policy                            named policies, plans, descriptor rules, config files, live changes
//	shadow, shadow/shadowprom         the demand recorder, its recommendation and tuner, its metrics
//	observer/...                      adapters of the Observer hook (Prometheus, slog)
//	internal/admit                    the admission core of httplimit and grpclimit (and of cmd/floodgate's
//	                                  replay, released with this module); rls reuses its fail mode
//	                                  and decides in its own code
//	internal/...                      what no user imports (header formats, test harnesses, ...)
//	rls (module of its own)           the Envoy rate limit service and its command, floodgate-rls
//	cmd/floodgate (module of its own) the operator's command
//	benchmarks (module of its own)    floodgate side by side with its peers
//	rls/benchmarks (module of its own) rls against envoyproxy/ratelimit: answers and cost
//	scripts/release (module of its own) a module proxy of this tree; its test installs both commands
//	deploy/                           Prometheus alert and recording rules, a Grafana dashboard
//	examples/...                      runnable programs, one idea each
//
// A new algorithm is a package with a Config whose Algorithm method returns
// an algo.Algorithm (Go step and Lua twin) and one storetest.RunAlgorithm
// call in its tests; a new store implements store.Store and passes
// storetest.Run; a new transport builds its checks and calls internal/admit.
package floodgate
