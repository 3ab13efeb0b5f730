// Package policy runs rate limits as data: named policies, per-key plans
// and overrides, request descriptors mapped to policies by rules, config
// files (YAML or JSON) with file:line errors, and live changes that keep
// every key's state.
//
// # Policies, plans, overrides
//
// A [Policy] is a name plus an algorithm and its parameters ("pro:
// token-bucket 100/s"). Its name is its identity everywhere: the state in
// the store, the observer's label, the RateLimit-Policy name. A key (an API
// key, a service token) is placed on a plan, which is a policy, by the
// [Config]'s Overrides (a static table: the negotiated exceptions), else by
// a [ResolveFunc] (e.g. from an API key to its plan in a database; its
// answers are cached), else by the DefaultPlan. [Set.Plan] resolves a key
// without allocating on the static and cached paths, and [Live] is itself a
// keyed floodgate.Limiter that charges each key on its plan.
//
// # Descriptors and rules
//
// A request describes itself with [middleware.Descriptor]s, lists of (key, value)
// entries ("source_service: purge-orchestrator", then "route: /img"), the
// model of envoyproxy/ratelimit, so that a config written for it means the
// same here. [Rule]s map descriptors to policies: entries are matched in
// order against nested rules, a rule with a value matches that value only
// (and is preferred), a rule without one matches any value (each value its
// own budget), and the rule matching a descriptor's last entry limits it,
// with its policy or with the plan of the entry's value. [Set.Match] turns a
// request's descriptors into checks that floodgate.TakeAll decides all or
// nothing.
//
// # Config files and live changes
//
//	domain: api
//	default_plan: free
//	policies:
//	  - {name: free, rate: 10/s}
//	  - {name: pro, rate: 100/s}
//	  - {name: enterprise-acme, rate: 1000/s, burst: 2000}
//	overrides:
//	  key_acme_live: enterprise-acme
//	rules:
//	  - key: api_key
//	    plan: true
//
// [LoadFile] reads a file and checks everything; every error is a
// [*ConfigError] ("policies.yaml:12: rate \"-5/s\" is negative"). [Live]
// holds the running config: [Live.Update], [Live.ReloadFile] (for a SIGHUP
// handler or an admin endpoint) and [Live.WatchFile] (on every change of the
// file) apply a new config atomically, all or nothing; a bad one leaves the
// running one in place and is reported: the error (file:line), a [Change]
// with Err set to the change callback ([WithOnChange]), and an event to the
// observer ([WithObserver]), which the Prometheus adapter counts
// (floodgate_config_reloads_total, floodgate_config_last_reload_successful).
// Every applied change is reported as a [Change] with its version and what
// changed, for an audit log.
//
// # Live changes
//
// A change of parameters under a policy name applies to every key at once
// and keeps each key's state, by one rule for every algorithm: a key keeps
// the units it has left, capped by the new capacity. A drained key stays
// drained whichever way the limit moves; lowering never grants anything
// (50 left of 100 become 30 at 30/s); raising never grants a burst (50
// left of 100 stay 50 at 200/s); the new rate or window applies from the
// change on. A key with no state (fresh, or back to full) is full under the
// new parameters. Per algorithm (each package documents its arithmetic):
//
//   - token bucket: the whole tokens left, capped by the new burst, and the
//     time to the next token, capped by the new interval; a reservation
//     debt stays a debt in whole tokens;
//   - leaky bucket: the milli-requests left (burst less the excess leaked
//     to the change), capped by the new burst plus one; the excess is the
//     new burst less them;
//   - fixed window and sliding counter: the units left in the window,
//     capped; what was used counts in the new window holding now (the
//     counter keeps its previous window's count when the length is the
//     same);
//   - sliding log: the newest entries still in the new window, as many as
//     were used, and entries at now to make up the count.
//
// The rule runs on a key's first request after the change, identically in
// Go and in the Redis script. A Redis key keeps the parameters it was
// written with beside its state, so processes that pick up a change at
// different times each convert what the other wrote: together they never
// admit more than the larger of the two configs would. A memory store
// cannot keep parameters beside each key: the Live gives each version of a
// policy's parameters a namespace of its own and a version reads a key it
// has not seen yet through the policy's other versions (the running one
// and at most 8 earlier ones), converting and moving it; an earlier version
// is forgotten once all its keys are full again (its algorithm's
// FullWithin after it was replaced: from 15 minutes for a token bucket, its
// reservation horizon; one or two windows for the windows). A policy
// unchanged by a reload keeps its limiter; one never changed costs a look
// at its versions on a key's first request, nothing on the others. A
// change of algorithm under one name starts the keys afresh: the states of
// two algorithms do not convert. A decision in flight across a change is
// decided on the old parameters or the new, on the key's state, on every
// store: a version replaced while a request holds it reads the key through
// the versions that came after it, as the running one reads the earlier
// ones.
//
// # Leased policies
//
// A token-bucket policy with Leased (leased: true in a file; lease_refresh
// sets its refresh period) is decided by a
// [github.com/floodgate-go/floodgate/lease.Limiter] on the Live's store,
// which must grant leases (redisstore; NewLive and Update refuse others):
// a hot key is decided in memory on tokens leased from the policy's one
// global bucket, at about one Grant call per refresh period, instead of a
// round trip per request. The fleet never admits more than that one bucket
// would; it may admit less, by the tokens the leases hold (the bound is in
// lease's documentation, "Bounds"). It costs each node six goroutines per
// leased policy and the tokens its leases hold, which [Live.Close] gives
// back. [Live.Take] and [Set.Match] decide such a policy through its lease
// ([Set.Lease]); [Set.Limiter] and [Set.Plan] return the store limiter of
// the same bucket, which decides directly. A live change keeps the global
// bucket's state as for any policy on Redis (the Grant script converts it);
// the changed policy gets a new lease limiter, and the old one, or that of a
// removed policy, is closed a second later (its tokens go back), so that
// the requests that picked it before the change still get a decision.
//
// # Concurrency
//
// A [Set] is immutable; [Live] swaps Sets atomically. Both are safe for
// concurrent use.
package policy
