package slogobserver

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate"
)

// defaultMessage is the message of every decision's record unless
// [WithMessage] sets another.
const defaultMessage = "floodgate decision"

// configMessage is the message of the record of a config change (an event
// of [floodgate.SourceConfig]: applied, or refused with its error).
const configMessage = "floodgate config change"

// maxOutcome bounds the outcomes an Observer has a level for; larger values
// (outcomes added to floodgate later) log at Info.
const maxOutcome = 16

// defaultLevel returns the level an outcome is logged at unless [WithLevel]
// says otherwise (the table is in WithLevel's documentation).
func defaultLevel(o floodgate.Outcome) slog.Level {
	switch o {
	case floodgate.OutcomeAllowed, floodgate.OutcomeDelayed:
		return slog.LevelDebug
	case floodgate.OutcomeShed, floodgate.OutcomeErrorOpen, floodgate.OutcomeFallback:
		return slog.LevelWarn
	case floodgate.OutcomeErrorClosed, floodgate.OutcomeConfigRefused:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Option configures [New]. An option given a value it cannot use makes New
// return an error wrapping [floodgate.ErrInvalidConfig].
type Option func(*Observer) error

// WithLevel logs outcome o at level l. The defaults are:
//
//   - allowed, delayed: Debug (the normal path, one record per request
//     and limit);
//   - denied, would_deny: Info (the limiter doing its job);
//   - shed, error_open, fallback: Warn (overload, or a limiter that could
//     not decide and let traffic through);
//   - error_closed, config_refused: Error (a limiter failure that refused
//     traffic; a config change that was refused, the running one staying);
//   - config_applied: Info (a config change, for the audit trail).
func WithLevel(o floodgate.Outcome, l slog.Level) Option {
	return func(ob *Observer) error {
		if o == 0 || int(o) >= maxOutcome {
			return fmt.Errorf("%w: slogobserver: unknown outcome %d", floodgate.ErrInvalidConfig, o)
		}
		ob.levels[o] = l
		return nil
	}
}

// WithMessage sets the message of every decision's record; the default is
// "floodgate decision". Config changes keep "floodgate config change",
// folded counts written on their own keep "floodgate failures folded".
func WithMessage(msg string) Option {
	return func(ob *Observer) error {
		if msg == "" {
			return fmt.Errorf("%w: slogobserver: empty message", floodgate.ErrInvalidConfig)
		}
		ob.msg = msg
		return nil
	}
}

// WithFoldInterval sets how often at most a failing key writes a record
// (see [Observer]); the default is 10 s. Zero turns
// folding off: one record per failing decision, as before folding existed.
// A negative interval is invalid.
func WithFoldInterval(d time.Duration) Option {
	return func(ob *Observer) error {
		if d < 0 {
			return fmt.Errorf("%w: slogobserver: negative fold interval %v", floodgate.ErrInvalidConfig, d)
		}
		ob.folds.interval = int64(d)
		return nil
	}
}

// Observer is a [floodgate.Observer] that writes one log record per
// decision, except for failing decisions, which it folds (below). A
// record's attributes are:
//
//   - policy, outcome: always (source when it is not the request's: a
//     store's, a shadow limit's; class when set);
//   - tier, route: when not empty;
//   - latency: the decision's latency (a duration);
//   - limit, remaining: when the limiter gave a decision;
//   - retry_after, delay: when not zero;
//   - error: the error's text, for the error and fallback outcomes;
//   - folded: on a failing decision's record, the failing decisions of its
//     key folded since the key's last record, when there were any;
//   - overflow: true on the records of a shared fold state, whose folded
//     counts any policy in that case: fold state is kept for at most 1,024
//     policies; when that many are held, policies whose state is idle
//     (nothing pending, the interval since their last record passed) are
//     dropped to make room, and a failing policy that still finds no room
//     shares one fold state per (outcome, source) with the others in its
//     case.
//
// # Folding failures
//
// In a store outage every decision fails, and one record per decision would
// flood the log. The failing outcomes (error_open, error_closed, fallback)
// are therefore folded per key (policy, outcome, source): the first failure
// of a key is written at once; the key then writes at most one record per
// interval ([WithFoldInterval], default 10 s). A failure
// within the interval is counted, not written, and the next failure after
// it is written with folded=N. So in a steady outage each key writes one
// record per interval, and every failing decision whose level the logger
// enables is either written or counted in a folded attribute (one it does
// not enable is neither, as before).
//
// A count that no failure comes to carry (the outage ended) is written with
// "floodgate failures folded" and the key's policy, outcome, source and folded: by the
// first decision of that policy that does not fail once the key's interval
// has passed (a recovery record, which starts a new interval), or at once by
// [Observer.Flush] (call it before the process exits). While no count is
// pending, a decision that does not fail costs one atomic load more than
// without folding; while one is, a decision of any policy also looks its
// policy up (a read lock and a map access). Folding does not allocate but
// for a policy's first failure (its state, 240 bytes, and its map entry;
// at most 1,024 policies).
//
// A config change is logged with "floodgate config change" and only its outcome,
// source ("config") and error (the file:line of a refused file).
//
// The key of the request is never logged (it may be a credential). When the
// logger is not enabled at an outcome's level, Observe returns at once
// without building the record, so Debug-level allowed decisions cost almost
// nothing in production.
//
// An Observer is safe for concurrent use if its handler is (the standard
// handlers are).
type Observer struct {
	logger *slog.Logger
	msg    string
	levels [maxOutcome]slog.Level
	folds  folds
}

// New returns an Observer that logs to logger. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when logger is nil or an option is invalid.
func New(logger *slog.Logger, opts ...Option) (*Observer, error) {
	if logger == nil {
		return nil, fmt.Errorf("%w: slogobserver: nil logger", floodgate.ErrInvalidConfig)
	}
	o := &Observer{logger: logger, msg: defaultMessage}
	o.folds.interval = int64(defaultFoldInterval)
	o.folds.epoch = time.Now()
	o.folds.byPolicy = make(map[string]*policyFolds)
	for i := range o.levels {
		o.levels[i] = defaultLevel(floodgate.Outcome(i))
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: slogobserver: nil option", floodgate.ErrInvalidConfig)
		}
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// level returns the level outcome o is logged at.
func (o *Observer) level(oc floodgate.Outcome) slog.Level {
	if int(oc) < len(o.levels) {
		return o.levels[oc]
	}
	return slog.LevelInfo
}

// Observe implements [floodgate.Observer].
func (o *Observer) Observe(e floodgate.Event) {
	fail := -1
	if o.folds.interval > 0 && e.Source != floodgate.SourceConfig {
		fail = failureSlot(e.Outcome)
		if fail < 0 && o.folds.pending.Load() != 0 {
			var buf [len(failureOutcomes) * numSourceSlots]foldedCount
			o.write(o.folds.recovered(buf[:0], e.Policy))
		}
	}
	ctx := context.Background()
	level := o.level(e.Outcome)
	if !o.logger.Enabled(ctx, level) {
		return
	}
	var buf [14]slog.Attr
	if e.Source == floodgate.SourceConfig {
		attrs := append(buf[:0], slog.String("outcome", e.Outcome.String()), slog.String("source", e.Source.String()))
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		o.logger.LogAttrs(ctx, level, configMessage, attrs...)
		return
	}
	var folded int64
	var over bool
	if fail >= 0 {
		var write bool
		if write, folded, over = o.folds.admit(e.Policy, fail, sourceSlot(e.Source)); !write {
			return
		}
	}
	attrs := eventAttrs(buf[:0], e)
	if folded > 0 {
		attrs = append(attrs, slog.Int64("folded", folded))
	}
	if over {
		attrs = append(attrs, slog.Bool("overflow", true))
	}
	o.logger.LogAttrs(ctx, level, o.msg, attrs...)
}

// eventAttrs appends the attributes of a decision event to attrs: the
// policy, outcome, source, class, tier, route, latency, the decision's
// figures and the error's text.
func eventAttrs(attrs []slog.Attr, e floodgate.Event) []slog.Attr {
	attrs = append(attrs,
		slog.String("policy", e.Policy),
		slog.String("outcome", e.Outcome.String()))
	if e.Source != 0 && e.Source != floodgate.SourceRequest {
		attrs = append(attrs, slog.String("source", e.Source.String()))
	}
	if e.Class != "" {
		attrs = append(attrs, slog.String("class", e.Class))
	}
	if e.Tier != "" {
		attrs = append(attrs, slog.String("tier", e.Tier))
	}
	if e.Route != "" {
		attrs = append(attrs, slog.String("route", e.Route))
	}
	attrs = append(attrs, slog.Duration("latency", e.Latency))
	if d := e.Decision; d.Limit > 0 {
		attrs = append(attrs, slog.Int64("limit", d.Limit), slog.Int64("remaining", d.Remaining))
		if d.RetryAfter > 0 {
			attrs = append(attrs, slog.Duration("retry_after", d.RetryAfter))
		}
		if d.Delay > 0 {
			attrs = append(attrs, slog.Duration("delay", d.Delay))
		}
	}
	if e.Err != nil {
		// The text, not the error: a handler may keep attributes past this
		// call, an Observer must not keep the error.
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	return attrs
}

// Flush writes, with "floodgate failures folded", every folded count not
// yet written, whatever the interval; a key's next failure is still written or folded by
// the interval that was running. Call it before the process exits, or
// where an outage is known to be over. It is safe to call at any time,
// concurrently with Observe.
func (o *Observer) Flush() {
	if o.folds.interval > 0 && o.folds.pending.Load() != 0 {
		o.write(o.folds.flush())
	}
}

// write writes the records of counts taken from the fold state.
func (o *Observer) write(counts []foldedCount) {
	ctx := context.Background()
	for _, c := range counts {
		level := o.level(c.outcome)
		if !o.logger.Enabled(ctx, level) {
			continue
		}
		var buf [5]slog.Attr
		attrs := buf[:0]
		if !c.over {
			attrs = append(attrs, slog.String("policy", c.policy))
		}
		attrs = append(attrs, slog.String("outcome", c.outcome.String()))
		switch c.source {
		case floodgate.SourceRequest:
		case 0:
			attrs = append(attrs, slog.String("source", "unknown"))
		default:
			attrs = append(attrs, slog.String("source", c.source.String()))
		}
		attrs = append(attrs, slog.Int64("folded", c.n))
		if c.over {
			attrs = append(attrs, slog.Bool("overflow", true))
		}
		o.logger.LogAttrs(ctx, level, foldedMessage, attrs...)
	}
}
