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
// A request describes itself with [Descriptor]s, lists of (key, value)
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
// running one in place and is reported. Every applied change is reported as
// a [Change] with its version and what changed, for an audit log.
//
// A change of parameters under a policy name applies to every key at once
// and keeps each key's state: the same limit, new numbers.
//
// # Concurrency
//
// A [Set] is immutable; [Live] swaps Sets atomically. Both are safe for
// concurrent use.
package policy
