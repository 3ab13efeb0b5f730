package shadow

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/policy"
)

// TuneConfig configures a [Tuner] for one policy.
type TuneConfig struct {
	// Policy is the name of the policy to tune. Required.
	Policy string
	// Interval is the least time between two steps (and the period of
	// Run). Default 1 minute; 1 ms .. 24 h.
	Interval time.Duration
	// MaxStep is the largest change of one step, as a fraction of the
	// current limit. Default 0.3 (30%); 0 < MaxStep <= 1.
	MaxStep float64
	// Floor and Ceiling bound the limit the tuner sets (per window).
	// Required: 1 <= Floor <= Ceiling.
	Floor, Ceiling int64
	// Health reports whether the protected service is healthy (e.g. its
	// error rate is below a threshold). Checked at every step: unhealthy
	// after a step, the step is rolled back; unhealthy otherwise, the
	// tuner holds. nil means always healthy.
	Health func(context.Context) bool
	// CoolDown is how long the tuner holds after a rollback: then it moves
	// toward the recommendation again. Doubled after each further rollback
	// before a step has gone past the limit last rolled back, up to 16
	// times. Default 10 x Interval; at most 7 days.
	CoolDown time.Duration
	// DryRun only proposes: every step is reported as a proposed event,
	// none is applied.
	DryRun bool
	// OnEvent receives every event, synchronously, from the goroutine of
	// the step.
	OnEvent func(TuneEvent)
	// Clock tells the time of steps; default the system clock.
	Clock floodgate.Clock
}

// TuneEventKind says what a [TuneEvent] reports.
type TuneEventKind string

// The kinds of tuning events.
const (
	// Proposed: a step the tuner would take (the only kind in dry run).
	Proposed TuneEventKind = "proposed"
	// Applied: a step applied through policy.Live.Update.
	Applied TuneEventKind = "applied"
	// RolledBack: the last step undone because the service was unhealthy.
	RolledBack TuneEventKind = "rolled_back"
	// Failed: an update the Live refused (Err says why).
	Failed TuneEventKind = "failed"
)

// TuneEvent is one proposed or applied change of a policy's limit.
type TuneEvent struct {
	Kind   TuneEventKind `json:"kind"`
	Policy string        `json:"policy"`
	At     time.Time     `json:"at"`
	// Before and After are the limit per window; BeforePolicy and
	// AfterPolicy the policies as config lines.
	Before       int64  `json:"before"`
	After        int64  `json:"after"`
	BeforePolicy string `json:"before_policy"`
	AfterPolicy  string `json:"after_policy"`
	// Reason says why the step was taken.
	Reason string `json:"reason"`
	// Evidence is the recommendation the step follows (for a rollback,
	// the one at the rollback).
	Evidence Recommendation `json:"evidence"`
	// Version is the Live's config version after an applied change.
	Version uint64 `json:"version,omitempty"`
	// Err is the Live's refusal, for Failed.
	Err error `json:"-"`
}

// String describes the event on one line, for a log.
func (e TuneEvent) String() string {
	s := fmt.Sprintf("%s %s: %d -> %d (%s)", e.Kind, e.Policy, e.Before, e.After, e.Reason)
	if e.Version > 0 {
		s += fmt.Sprintf(", config version %d", e.Version)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Tuner moves one policy's limit toward its recommendation through live
// policy changes, guarded: at most one step per Interval, each at most
// MaxStep of the current limit, within [Floor, Ceiling], never before the
// recommendation exists (the Recorder's MinObservation); a step after
// which Health says unhealthy is rolled back at the next step (within one
// Interval). After a rollback the tuner holds for CoolDown (doubled after
// each further rollback before a step has gone past the limit rolled
// back, up to 16 times), then moves toward the recommendation again: its
// next steps go at most halfway from the last healthy limit to the one
// rolled back (bisecting), and once a step reaches that bound and the
// service stays healthy, on in steps of MaxStep. Only the limit per
// window moves (a bucket's Rate.N, a window's Limit); a bucket's burst is
// scaled with it. A step reads the running config, changes the policy in
// it and applies it with Live.Update: a reload that lands between the read
// and the update is overwritten by the step. The tuner never rolls back a
// change that is not its own. Safe for concurrent use.
type Tuner struct {
	live *policy.Live
	rec  *Recorder
	cfg  TuneConfig

	mu      sync.Mutex
	last    time.Time // of the last applied step or rollback
	pending *step     // the last applied step, until a healthy check
	// above and below bound the limits tried after a rollback
	// (exclusive): 0 when none. A healthy step that reaches one lifts it.
	above, below int64
	// coolUntil ends the hold after a rollback; streak counts the
	// rollbacks since a step last went past bad, the limit last rolled
	// back (in the direction of that step: up when raise).
	coolUntil time.Time
	streak    int
	bad       int64
	raise     bool
}

type step struct {
	before, after policy.Policy
}

// NewTuner returns a Tuner of cfg.Policy on live, following the
// recommendations of rec (which must record live's store). Errors wrap
// [floodgate.ErrInvalidConfig].
func NewTuner(live *policy.Live, rec *Recorder, cfg TuneConfig) (*Tuner, error) {
	cfg = cfg.filled()
	err := cfg.validate()
	switch {
	case live == nil:
		err = errors.New("nil policy.Live")
	case rec == nil:
		err = errors.New("nil Recorder")
	case err == nil:
		if _, ok := live.Set().Policy(cfg.Policy); !ok {
			err = fmt.Errorf("the running config has no policy %q", cfg.Policy)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: shadow: tuner: %w", floodgate.ErrInvalidConfig, err)
	}
	rec.Follow(live)
	return &Tuner{live: live, rec: rec, cfg: cfg}, nil
}

// filled returns cfg with each zero field set to its default.
func (cfg TuneConfig) filled() TuneConfig {
	if cfg.Interval == 0 {
		cfg.Interval = time.Minute
	}
	if cfg.MaxStep == 0 {
		cfg.MaxStep = 0.3
	}
	if cfg.Clock == nil {
		cfg.Clock = monotime.Clock{}
	}
	if cfg.CoolDown == 0 {
		cfg.CoolDown = 10 * cfg.Interval
	}
	return cfg
}

// validate says what is wrong with a filled TuneConfig.
func (cfg TuneConfig) validate() error {
	switch {
	case cfg.Policy == "":
		return errors.New("no policy named")
	case cfg.Interval < time.Millisecond || cfg.Interval > 24*time.Hour:
		return fmt.Errorf("interval %v outside 1ms..24h", cfg.Interval)
	case cfg.CoolDown < 0 || cfg.CoolDown > 7*24*time.Hour:
		return fmt.Errorf("cool-down %v outside 0..7 days", cfg.CoolDown)
	case !(cfg.MaxStep > 0 && cfg.MaxStep <= 1):
		return fmt.Errorf("max step %v outside (0, 1]", cfg.MaxStep)
	case cfg.Floor < 1 || cfg.Ceiling < cfg.Floor:
		return fmt.Errorf("floor %d and ceiling %d: want 1 <= floor <= ceiling", cfg.Floor, cfg.Ceiling)
	case nilcheck.Is(cfg.Clock):
		return errors.New("typed-nil clock")
	}
	return nil
}

// Run steps every Interval until ctx ends, and returns ctx's error.
func (t *Tuner) Run(ctx context.Context) error {
	tk := time.NewTicker(t.cfg.Interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
			t.Step(ctx)
		}
	}
}

// Step evaluates the policy now: it rolls the last step back when the
// service is unhealthy, else takes (or, in dry run, proposes) one step
// toward the recommendation when one is due. It returns the events it
// reported (none when it holds) and why it held or acted.
func (t *Tuner) Step(ctx context.Context) (events []TuneEvent, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.cfg.Clock.Now()
	cur, ok := t.live.Set().Policy(t.cfg.Policy)
	if !ok {
		return nil, "the running config has no policy " + t.cfg.Policy
	}
	healthy := t.cfg.Health == nil || t.cfg.Health(ctx)
	rec := t.recommendation()
	if ev, ok := t.judgePending(cur, healthy, rec, now); ok {
		return []TuneEvent{ev}, ev.Reason
	}
	if why := t.holding(now, healthy, rec); why != "" {
		return nil, why
	}
	have := limitOf(cur)
	target, next, lo, hi := t.target(have, rec.Limit)
	switch {
	case target == have:
		return nil, fmt.Sprintf("holding: at the target %d", target)
	case next == have:
		return nil, fmt.Sprintf("holding: the target %d is within one unit of %d but more than %.0f%% away", target, have, 100*t.cfg.MaxStep)
	}
	reason := fmt.Sprintf("toward %d (recommended %d, bounds %d..%d)", target, rec.Limit, lo, hi)
	after := withLimit(cur, next)
	prop := t.event(Proposed, cur, after, reason, rec, now)
	events = append(events, prop)
	if t.cfg.DryRun {
		return events, "proposed (dry run): " + reason
	}
	ev := t.change(cur, after, Applied, reason, rec, now)
	events = append(events, ev)
	if ev.Kind == Applied {
		t.pending = &step{before: cur, after: after}
	}
	return events, reason
}

// recommendation is the recorder's current recommendation for the policy.
func (t *Tuner) recommendation() Recommendation {
	d, ok := t.rec.Demand(t.cfg.Policy)
	if !ok {
		return Recommendation{Reason: "no demand recorded yet"}
	}
	return d.reportAt(t.rec.nanos()).Recommendation
}

// judgePending judges the last step, when one is pending: rolled back when
// the service is unhealthy after it (ok true, the rollback's event), kept
// otherwise. A step someone else has overwritten since is left alone.
func (t *Tuner) judgePending(cur policy.Policy, healthy bool, rec Recommendation, now time.Time) (ev TuneEvent, ok bool) {
	p := t.pending
	if p == nil {
		return TuneEvent{}, false
	}
	t.pending = nil
	switch {
	case cur != p.after:
		// Someone else changed the policy since: not ours to undo.
	case !healthy:
		ev := t.change(cur, p.before, RolledBack, "unhealthy after the step", rec, now)
		t.rolledBack(limitOf(p.after), limitOf(p.before), now)
		return ev, true
	default:
		t.healthyAt(limitOf(p.after))
	}
	return TuneEvent{}, false
}

// rolledBack learns from a step from good to bad that was rolled back: a
// cool-down, and a bound halfway between them that later steps respect.
func (t *Tuner) rolledBack(bad, good int64, now time.Time) {
	t.coolDown(now, bad, bad > good)
	if bad > good {
		t.above = good + (bad-good)/2 + 1
		if t.below != 0 && t.above <= t.below {
			t.above = t.below + 1
		}
	} else {
		t.below = bad + (good-bad+1)/2 - 1
	}
}

// holding says why the tuner holds at now, or "" when it may step.
func (t *Tuner) holding(now time.Time, healthy bool, rec Recommendation) string {
	switch {
	case !healthy:
		return "holding: the service is unhealthy"
	case now.Before(t.coolUntil):
		return fmt.Sprintf("holding: cool-down after a rollback until %s", t.coolUntil.Format(time.RFC3339))
	case !t.last.IsZero() && now.Sub(t.last) < t.cfg.Interval:
		return "holding: the last step was less than an interval ago"
	case !rec.OK:
		return "holding: " + rec.Reason
	}
	return ""
}

// target returns where the limit should go from have, given the
// recommended limit: the target within the bounds lo..hi (the configured
// ones, narrowed by what rollbacks taught), and the next limit, at most
// MaxStep away from have.
func (t *Tuner) target(have, recommended int64) (target, next, lo, hi int64) {
	lo, hi = t.cfg.Floor, t.cfg.Ceiling
	if t.above > 0 {
		hi = min(hi, t.above-1)
	}
	if t.below > 0 {
		lo = max(lo, t.below+1)
	}
	target = min(max(recommended, lo), max(hi, lo))
	switch {
	case target > have:
		next = min(target, int64(math.Floor(float64(have)*(1+t.cfg.MaxStep))))
	case target < have:
		next = max(target, int64(math.Ceil(float64(have)*(1-t.cfg.MaxStep))))
	default:
		next = have
	}
	return target, next, lo, hi
}

// coolDown starts the hold after the rollback of a step to bad: CoolDown,
// doubled for each rollback since a step last went past the limit last
// rolled back, up to 16 times.
func (t *Tuner) coolDown(now time.Time, bad int64, raise bool) {
	t.streak++
	t.bad, t.raise = bad, raise
	t.coolUntil = now.Add(t.cfg.CoolDown << min(t.streak-1, 4))
}

// healthyAt notes that the service stayed healthy after a step to limit n:
// a bisection bound it reached is lifted, and a step past the limit last
// rolled back ends the streak of rollbacks.
func (t *Tuner) healthyAt(n int64) {
	if t.above > 0 && n >= t.above-1 {
		t.above = 0
	}
	if t.below > 0 && n <= t.below+1 {
		t.below = 0
	}
	if t.streak > 0 && (t.raise && n >= t.bad || !t.raise && n <= t.bad) {
		t.streak = 0
	}
}

func (t *Tuner) event(kind TuneEventKind, before, after policy.Policy, reason string, rec Recommendation, now time.Time) TuneEvent {
	ev := TuneEvent{
		Kind: kind, Policy: t.cfg.Policy, At: now,
		Before: limitOf(before), After: limitOf(after), BeforePolicy: before.String(), AfterPolicy: after.String(),
		Reason: reason, Evidence: rec,
	}
	if t.cfg.OnEvent != nil && kind != Applied && kind != RolledBack {
		t.cfg.OnEvent(ev)
	}
	return ev
}

// change applies after in place of before through the Live, and reports it.
func (t *Tuner) change(before, after policy.Policy, kind TuneEventKind, reason string, rec Recommendation, now time.Time) TuneEvent {
	ev := t.event(kind, before, after, reason, rec, now)
	cfg := t.live.Set().Config()
	ps := make([]policy.Policy, len(cfg.Policies))
	copy(ps, cfg.Policies)
	for i := range ps {
		if ps[i].Name == t.cfg.Policy {
			ps[i] = after
		}
	}
	cfg.Policies = ps
	ch, err := t.live.Update(cfg, "shadow-tuner")
	if err != nil {
		ev.Kind, ev.Err = Failed, err
	} else {
		ev.Version = ch.Version
		t.last = now
	}
	if t.cfg.OnEvent != nil {
		t.cfg.OnEvent(ev)
	}
	return ev
}

// limitOf is a policy's limit per window: a bucket's Rate.N (per its
// period), a window algorithm's Limit.
func limitOf(p policy.Policy) int64 {
	switch p.Algorithm {
	case "", policy.TokenBucket, policy.LeakyBucket:
		return p.Rate.N
	}
	return p.Limit
}

// withLimit is p with its limit per window set to n, a bucket's burst
// scaled with it (at least 1).
func withLimit(p policy.Policy, n int64) policy.Policy {
	switch p.Algorithm {
	case "", policy.TokenBucket, policy.LeakyBucket:
		if p.Burst > 0 {
			p.Burst = max(1, int64(math.Round(float64(p.Burst)*float64(n)/float64(p.Rate.N))))
		}
		p.Rate.N = n
	default:
		p.Limit = n
	}
	return p
}
