// Package promobserver reports floodgate decisions and config changes to
// Prometheus: a [floodgate.Observer] backed by a counter and a histogram of
// decisions, labelled by policy, tier, route class, priority class,
// outcome and source, and two metrics of config reloads.
//
//	reg := prometheus.NewRegistry()
//	obs, err := promobserver.New(reg)
//	ic, err := grpclimit.New(lim, grpclimit.WithObserver(obs))
//	live, err := policy.NewLive(cfg, s, policy.WithObserver(obs))
//
// The metrics are floodgate_decisions_total and
// floodgate_decision_duration_seconds, and, for the config changes of a
// policy set ([floodgate.SourceConfig] events),
// floodgate_config_reloads_total{outcome} and
// floodgate_config_last_reload_successful (see [Observer]; the prefix is
// set by [WithNamespace] and [WithSubsystem]). The outcome label takes the
// values of [floodgate.Outcome.String]: allowed, denied, would_deny,
// error_open, error_closed, fallback, shed, delayed for decisions;
// config_applied, config_refused for reloads.
//
// [RegisterMemStore] adds the key counts of a memory store
// (floodgate_memstore_keys, floodgate_memstore_max_keys,
// floodgate_memstore_evictions_total). The alert and recording rules of
// deploy/prometheus and the Grafana dashboard of deploy/grafana, in the
// repository, read these metrics and those of shadow/shadowprom.
//
// # Units, zero values, concurrency
//
// Latency is recorded in seconds (the Prometheus base unit) in 10
// exponential buckets from 1µs to about 0.26 s unless [WithBuckets] says
// otherwise. New needs a non-nil prometheus.Registerer; options have documented defaults. An
// [Observer] is safe for concurrent use and never blocks.
//
// It and shadow/shadowprom are the only packages of the floodgate module
// that import the Prometheus client: programs that do not use them do not
// link it.
package promobserver
