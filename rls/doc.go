// Package rls is an Envoy rate limit service on floodgate: it implements
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit), the API of
// Envoy's global rate limiting, on floodgate's stores and algorithms, so
// that the proxy tier and Go services enforce the same limits with the same
// engine. It is a module of its own, so that users of floodgate never
// download Envoy's protos.
//
// A [Service] is embedded on any *grpc.Server:
//
//	cfg, err := rls.LoadDir("/etc/ratelimit")     // envoyproxy/ratelimit's files, unchanged
//	svc, err := rls.New(memstore, cfg)             // or a redisstore.Store for a fleet
//	svc.Register(grpcServer)
//	err = svc.WatchDir(ctx, "/etc/ratelimit")      // hot reload
//
// and the command floodgate-rls (rls/cmd/floodgate-rls) runs one, with
// the gRPC health service, Prometheus metrics and graceful shutdown.
//
// # Config files
//
// A config directory holds one file per domain, in envoyproxy/ratelimit's
// format, which loads unchanged and means the same:
//
//	domain: edge
//	descriptors:
//	  - key: destination_cluster
//	    value: image-origin.prod
//	    rate_limit: {unit: second, requests_per_unit: 15000}
//	    descriptors:
//	      - key: source_service
//	        value: purge-orchestrator
//	        rate_limit: {unit: second, requests_per_unit: 500}
//
// A request descriptor's entries are matched level by level: the entry's key
// and value, else a value ending in '*' that prefixes it, else the key
// alone (each value then has its own counter); the limit of the level that
// matches the descriptor's last entry applies, and a descriptor longer than
// the tree, or matching nothing, has no limit. rate_limit holds unit
// (second, minute, hour, day, week, month = 30 days, year = 365 days),
// requests_per_unit, unit_multiplier, unlimited, name and replaces (a limit
// whose name another matched limit of the request replaces is not applied);
// beside it shadow_mode (decided and counted, never refusing),
// detailed_metric (metrics per request value), value_to_metric (the
// request's value of that level in the metric key), share_threshold (every
// value matching that wildcard counts in one counter) and quota_mode. Unknown keys, empty keys, duplicate
// descriptors, bad units, a unit with unlimited, empty or self replaces and
// two files of one domain are refused, each as a *policy.ConfigError
// "file:line: what".
//
// # Extensions
//
// Fields the reference does not have, in the same files:
//
//	rate_limit:
//	  algorithm: token-bucket   # fixed-window (default), token-bucket, leaky-bucket, sliding-log, sliding-counter
//	  unit: 30s                 # besides the named units: a duration of whole seconds (30s, 5m, 90s)
//	  requests_per_unit: 100
//	  burst: 200                # a token bucket's capacity (default requests_per_unit), a leaky bucket's burst
//	  leased: true              # a token bucket decided on tokens leased from its global bucket (Redis only)
//	  lease_refresh: 100ms      # a leased limit's refresh period (default 100ms, 1ms..10s)
//	rate_limits:                # further limits of the descriptor, checked with rate_limit all or nothing
//	  - {unit: hour, requests_per_unit: 1000}
//	credential: true            # beside key: the entry's value is a credential (an API key, a token)
//
// A credential's value reaches neither the store nor the metrics in clear:
// both see a keyed hash of it (HMAC-SHA256 under [WithKeySecret], which
// every process sharing a Redis must be given alike), and observer events
// name limits as RateLimit-Policy does, never by a request's values.
//
// A token bucket runs at requests_per_unit per unit with its burst; a leaky
// bucket in nginx's nodelay mode (Envoy cannot delay a request). A limit's
// current_limit is told in the largest unit that divides its window, times
// a multiplier (30s is 30 x SECOND). Every limit is a floodgate policy named
// by its descriptor path ("edge.destination_cluster_image-origin.prod", and
// "#1", "#2" for the limits of rate_limits), so a reload keeps each key's
// state when the path stays.
//
// # Leased limits
//
// A token-bucket limit with leased: true (in rate_limit or in an entry of
// rate_limits) is a floodgate leased policy (policy.Policy.Leased, decided
// by a [github.com/floodgate-go/floodgate/lease.Limiter]): each service
// process decides a hot descriptor in memory on tokens it leased in
// batches from the limit's one global bucket on Redis, at about one Redis
// call per lease_refresh instead of one per request; a cold descriptor
// (under 20 requests a second on the process) is decided on Redis as any
// limit. The fleet never admits more than the one bucket would (burst +
// rate x elapsed from a key's first request); it may admit less, by the
// tokens the leases hold (the bound is in lease's documentation). leased
// belongs to token buckets (a fixed window, the default, is refused at its
// line), lease_refresh to leased limits; the store must grant leases: on
// the memory store a leased limit is refused by [New] and by a reload,
// with its file and line. A reload that changes a leased limit keeps each
// key's state in the global bucket (floodgate's live-change rule); the
// process's old lease limiter serves the calls that started before the
// change, then gives its tokens back a second later. [Service.Close] (the
// command calls it at shutdown, once the calls in flight are done) gives
// back every token the leases hold.
//
// What a leased limit answers is the process's view:
//
//   - limit_remaining is, for a hot descriptor, what this process's lease
//     still holds for it: what the process can admit without asking Redis,
//     not what the fleet has left (the global bucket may have more, other
//     processes hold their own leases). It falls as the lease is spent and
//     rises when a renewal arrives; 0 on a refusal. For a cold descriptor
//     it is the global bucket's, as for any limit.
//   - duration_until_reset is, when admitted, the global bucket's time to
//     full as of this process's last lease (or call) for the key; on a
//     refusal, the wait until the global bucket has tokens again, as the
//     lease's last renewal told it.
//   - current_limit is the config's (requests_per_unit per unit), and
//     X-RateLimit-Limit the global burst; the headers carry
//     limit_remaining and duration_until_reset as above.
//   - A look (hits_addend 0) and negative hits go to the global bucket
//     directly (one Redis call): a look tells what the global bucket has
//     left, the tokens that leases hold being already taken from it.
//   - In a request refused before anything is charged (another descriptor
//     is over, or asks for more than its capacity), a leased limit answers
//     what its lease would decide, taking nothing (lease.Limiter.Look);
//     without a lease on this process, what the global bucket would.
//   - near_limit is not counted for a leased limit (a process does not
//     know how near the fleet is to the limit); total_hits, within_limit
//     and over_limit are.
//
// # Answers
//
// For a fixed window the answers are the reference's except where this
// paragraph and "Deliberate differences" below say otherwise (a refused
// request, a check without counting at exactly the limit, a request's own
// limit, negative hits, reloads, store errors): per descriptor code,
// current_limit, limit_remaining (0 when over the limit),
// duration_until_reset (whole seconds to the end of the window, windows
// aligned to the epoch); overall_code OVER_LIMIT when any enforcing
// descriptor is over; hits_addend of the request (0 means 1) or of the
// descriptor (which wins; 0 there checks without counting: OVER_LIMIT when
// nothing is left, and the request is then refused as a whole); the
// descriptor's own limit (a fixed window in place of the config's, on a
// counter of its own; the domain must be known); an unlimited descriptor
// answers OK with limit_remaining 2^32-1 and no current_limit; a descriptor
// without a limit (unknown domain or descriptor, or replaced) OK with
// nothing; an empty domain or descriptor list is an InvalidArgument error. A
// shadow-mode descriptor answers OK whatever its counter says; a
// quota-mode descriptor (quota_mode in the config, or every descriptor
// under [WithGlobalQuotaMode]) over its limit answers OK with its
// current_limit, limit_remaining 0 and no duration_until_reset, and never
// makes the request OVER_LIMIT, as the reference that rls/benchmarks
// builds answers (its main branch has since made a request whose every
// quota descriptor is over OVER_LIMIT, #1059, not yet in a release).
// is_negative_hits gives the hits back as a
// floodgate refund: never beyond the limit (10 per hour, 3 used, 5 given
// back: 10 left, a key is never more than full), and hits larger than the
// limit fail the call as a store error does (Unavailable under the default
// middleware.FailError). TestConformanceWithReference covers neither negative hits nor
// a request's own limit on a key already counted.
//
// # Deliberate differences from envoyproxy/ratelimit
//
//   - A refused request consumes nothing (floodgate's all-or-nothing, as
//     floodgate.TakeAll): the reference increments every descriptor's counter
//     on every request, the refused ones included. So after a request whose
//     hits_addend crosses a limit, a smaller one may still pass (10 per hour,
//     8 used, hits 5 refused, then hits 2 admitted: the reference refuses it,
//     its counter being at 13), and the other descriptors of a refused request
//     (the image origin's, when the purge orchestrator is over) keep their
//     units. Statuses of a refused request tell each descriptor's state as
//     it stands (limit_remaining uncharged) and 0 for those over. A check
//     without counting (hits_addend 0) is over when no unit is left, where
//     the reference says over only once its counter has passed the limit
//     (at exactly the limit it says OK with 0 left).
//   - Shadow-mode descriptors are charged only when the request is admitted
//     (floodgate's dry-run rule); quota-mode descriptors are each charged
//     when they admit, before the others are decided.
//   - A request's own limit (descriptor.limit) has its own counter per
//     (requests_per_unit, unit): in the reference it shares the counter of
//     the descriptor's configured limit.
//   - A reload applies floodgate's live-change rule: a key keeps the units
//     it has left, capped by the new limit (raising 3 to 5 per hour with 1
//     left leaves 1; a fresh key has 5). The reference keeps the count (3
//     left). A change of algorithm or window length starts the keys afresh.
//   - Store errors: the reference answers with an error; so does the
//     default middleware.FailError (see [WithFailMode]). FailOpen answers OK with no limit information
//     (no current_limit, limit_remaining or duration_until_reset, no
//     headers: nothing that tells a client to wait); FailClosed answers
//     OVER_LIMIT for every enforcing limited descriptor with its
//     current_limit, limit_remaining 0 and no duration_until_reset (when
//     the store is back is unknown), no headers; shadow-mode descriptors
//     answer OK there too. redisstore's failure policies apply before: its
//     FailOpen / FailClosed are answered as these (and reported to the
//     observer as error_open / error_closed), its local Fallback decides
//     (reported as fallback), whatever the number of descriptors. Feed the
//     store's observer events to [Service.ObserveStore] too, so that a
//     failure policy deciding inside the store is seen when a limiter does
//     not mark its decisions (Decision.Fallback); each such
//     call is counted (floodgate_rls_store_unavailable_total) and an
//     outage logged once when it starts and once when it ends
//     ([WithLogger]).
//   - Store keys are floodgate's (redisstore's key format, the domain and
//     every entry escaped), not the reference's: moving from the reference
//     on one Redis starts every counter afresh.
//   - Headers (WithHeaders) name a limit by its rate_limit name, else by a
//     short hash of its config path ([WithHeaderPolicyNames]), never the
//     path; X-RateLimit-Limit is the limit's capacity (a token bucket's
//     burst), and RateLimit-Policy's q per w the rate scaled so that q is
//     at least that capacity (see [middleware.HeadersIETF]).
//   - Month is 30 days and year 365, as the reference without its
//     calendar-month setting; the metric labels are domain and key (the
//     descriptor path), not the mapping's key1/key2 split at dots.
//   - rls/benchmarks (a module of its own) runs the reference, built from
//     its module, and this service side by side on one Redis and checks
//     that they answer a sequence of requests covering the above
//     identically (TestConformanceWithReference).
//   - There is no STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT switch: it
//     would change nothing. The reference's switch stops charging a
//     request's keys when one of them is known over its limit; here a
//     refused request charges nothing on any descriptor, always (the
//     first difference above), which is what the switch approximates.
//   - The over-limit cache ([WithOverLimitCache], the reference's
//     LOCAL_CACHE_SIZE_IN_BYTES) is bounded in keys, not bytes, and does
//     not change an answer of this process: a key is remembered only when
//     the store refused it with nothing left, until the instant the store
//     would admit one unit again, and is forgotten when hits are given
//     back here or the config is reloaded.
//   - Each limit of a descriptor (rate_limit and every entry of
//     rate_limits) is advertised in RateLimit-Policy under its own name:
//     the rate_limit's name for the first, a short hash of the path and
//     its index for the others.
//
// # The reference's settings
//
// The reference's environment settings that change answers map to options
// of [New] (and flags of floodgate-rls):
//
//	SHADOW_MODE                             WithGlobalShadowMode                      -shadow
//	QUOTA_MODE                              WithGlobalQuotaMode                       -quota-mode
//	RESPONSE_DYNAMIC_METADATA               WithDynamicMetadata                       -response-dynamic-metadata
//	LIMIT_RESPONSE_HEADERS_ENABLED          WithHeaders(middleware.HeadersReference)  -headers reference
//	LOCAL_CACHE_SIZE_IN_BYTES               WithOverLimitCache (in keys)              -over-limit-cache
//	NEAR_LIMIT_RATIO                        WithNearLimitRatio
//	STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT none: always so, and more (above)
//
// middleware.HeadersReference writes the reference's default names
// (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset); its
// LIMIT_*_HEADER renames are not offered, nor the per-descriptor metadata
// field of its main branch.
// rls/benchmarks' TestConformanceSettings runs the reference with
// QUOTA_MODE, RESPONSE_DYNAMIC_METADATA, LIMIT_RESPONSE_HEADERS_ENABLED and
// LOCAL_CACHE_SIZE_IN_BYTES beside this service with the four options and
// requires the same statuses, headers and metadata.
//
// # Store calls
//
// A request's counted descriptors are decided in one store call (one
// script on Redis): the enforcing ones all or nothing, and with them the
// quota-mode and shadow-mode ones when nothing refused the request before
// (a look over its limit, a blocked limit, a key the over-limit cache
// knows over): when every check admits, each kind is charged as it would
// be on its own. When one refuses, nothing was charged and each kind is
// decided on its own: each quota-mode descriptor in a call, the
// enforcing ones in one, then each shadow-mode one. A look (hits_addend 0)
// and a refund (is_negative_hits) are a call per limit each. On Redis
// Cluster, keys in different hash slots are decided in two phases
// (redisstore.Store.ApplyAll).
//
// # Metrics
//
// Every counted hit lands in total_hits and in one of within_limit,
// over_limit, refused_by_other (hits of a descriptor within its limits
// whose request another descriptor refused: a nested descriptor's refusal
// shows on its parent) or, for the share below the limit of a hits_addend
// that crosses it, near_limit (see [Metrics]).
//
// # Events
//
// An observer ([WithObserver], e.g. floodgate's promobserver) gets one
// event per (request, limit), reported by floodgate's admission core as
// its HTTP and gRPC middleware report theirs: each limit the request's
// descriptors decided, under the name RateLimit-Policy gives it, with its
// own decision and outcome (denied only for a limit that refused;
// would_deny for quota-mode limits over their quota, and, with Source
// shadow, for shadow-mode limits of an admitted request; error_open,
// error_closed or fallback when the store failed). The core also judges
// the request: OVER_LIMIT when an enforcing limit refuses, OK in the
// global shadow mode (its dry run).
//
// # Concurrency
//
// A Service is safe for concurrent use; Update, ReloadDir and WatchDir swap
// the running config atomically (each request is decided on one config).
package rls
