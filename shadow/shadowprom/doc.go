// Package shadowprom exports the demand a shadow.Recorder measures as
// Prometheus gauges: per policy, the quantiles of the per-key demand per
// window and of the bursts, the current limit, and the recommendation.
//
//	reg := prometheus.NewRegistry()
//	err := shadowprom.Register(reg, rec)
//
// The metrics (prefix "floodgate_shadow_", labels policy and, for the
// distributions, quantile: 0.5, 0.9, 0.95, 0.99, 1 for the maximum):
//
//   - floodgate_shadow_demand: units per key per window, by quantile.
//   - floodgate_shadow_burst: the most units per key in an eighth of a window.
//   - floodgate_shadow_limit: the policy's current limit per window.
//   - floodgate_shadow_recommended_limit, floodgate_shadow_recommended_burst:
//     the recommendation (absent until there is one).
//   - floodgate_shadow_keys: distinct keys (estimated);
//     floodgate_shadow_observed_seconds: how long the policy has been
//     observed; floodgate_shadow_key_windows_above_recommendation: what
//     enforcing the recommendation would have refused.
//   - floodgate_shadow_refused_total, floodgate_shadow_decisions_total:
//     decisions the current limit refused, and all decisions recorded.
//   - floodgate_shadow_top_key_refused_total{policy, key_hash}: the
//     refusals of each of the heaviest keys (the report's top-K) that had
//     any, labelled by the key's hash (a per-Recorder keyed hash, the
//     report's Key.Hash), never by the key: a caller throttled for long is
//     a series that keeps growing (the shipped alert rules watch it). At
//     most TopK series per policy at a time; a key that leaves the top-K
//     leaves its series, and restarts it from zero if it comes back.
//
// # Units, zero values, concurrency
//
// Demand is in the policy's units (requests, or cost) per window of its own
// length (floodgate_shadow_window_seconds). Every scrape takes one report
// of every policy (a pass over each policy's table of sampled keys: about
// 100 KiB read). The collector is safe for concurrent use. Like
// promobserver, this package is the only place the shadow recorder meets
// the Prometheus client: programs that do not use it do not link it.
package shadowprom
