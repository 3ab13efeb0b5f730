// Package promobserver reports floodgate decisions to Prometheus: a
// [floodgate.Observer] backed by one counter and one histogram, both
// labelled by limiter name, tier, route class and outcome.
//
//	reg := prometheus.NewRegistry()
//	obs, err := promobserver.New(reg)
//	ic, err := grpclimit.New(lim, grpclimit.WithObserver(obs))
//
// The metrics are floodgate_decisions_total and
// floodgate_decision_duration_seconds (see [Observer]; the prefix is set by
// [WithNamespace] and [WithSubsystem]). The outcome label takes the values
// of [floodgate.Outcome.String]: allowed, denied, would_deny, error_open,
// error_closed, fallback, shed, delayed.
//
// # Units, zero values, concurrency
//
// Latency is recorded in seconds (the Prometheus base unit) with the buckets
// of [DefaultBuckets] unless [WithBuckets] says otherwise. New needs a
// non-nil prometheus.Registerer; options have documented defaults. An
// [Observer] is safe for concurrent use and never blocks.
//
// This is the only floodgate package that imports the Prometheus client:
// programs that do not use it do not link it.
package promobserver
