// Package slogobserver logs floodgate decisions with [log/slog]: a
// [floodgate.Observer] that writes one record per decision, at a level
// chosen by the decision's outcome.
//
//	obs, err := slogobserver.New(slog.Default())
//	ic, err := grpclimit.New(lim, grpclimit.WithObserver(obs))
//
// By default allowed calls log at Debug, denials at Info, shedding and
// fail-open errors at Warn and fail-closed errors at Error ([DefaultLevel]);
// [WithLevel] changes any of them. Records whose level the logger does not
// enable cost one Enabled call and nothing else.
//
// # Units, zero values, concurrency
//
// Durations are logged as [time.Duration] attributes (the handler decides
// how they print). New needs a non-nil logger. An [Observer] is safe for
// concurrent use when its handler is, as the standard handlers are.
package slogobserver
