// Package slogobserver logs floodgate decisions with [log/slog]: a
// [floodgate.Observer] that writes one record per decision, at a level
// chosen by the decision's outcome, and folds failing decisions in an
// outage (below).
//
//	obs, err := slogobserver.New(slog.Default())
//	ic, err := grpclimit.New(lim, grpclimit.WithObserver(obs))
//
// By default allowed calls log at Debug, denials at Info, shedding and
// fail-open errors at Warn and fail-closed errors at Error;
// [WithLevel] changes any of them. Records whose level the logger does not
// enable cost one Enabled call and nothing else.
//
// # Outages
//
// Failing decisions (error_open, error_closed, fallback) are folded per
// (policy, outcome, source), so that a store outage does not write one
// record per request: a key's first failure is written at once, then at
// most one record per interval (10 s by default;
// [WithFoldInterval]) carrying folded=N, the failures counted since the
// key's last record. A count left when the failures stop is written with
// "floodgate failures folded" by the policy's first decision that does not fail once
// the interval has passed, or at once by [Observer.Flush]. A 2 s outage at
// 2,000 decisions/s, each reported by the store and by the transport, writes
// 4 records instead of 8,000. Fold state is bounded (1,024 policies),
// and folding does not allocate. Allowed, denied, shed and the other
// outcomes are not folded; promobserver's counters count every decision
// whatever this package logs.
//
// # Units, zero values, concurrency
//
// Durations are logged as [time.Duration] attributes (the handler decides
// how they print). New needs a non-nil logger. An [Observer] is safe for
// concurrent use when its handler is, as the standard handlers are.
package slogobserver
