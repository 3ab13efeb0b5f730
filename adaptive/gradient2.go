package adaptive

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// Gradient2Config configures [NewGradient2]. The zero value means the reference
// defaults.
type Gradient2Config struct {
	// InitialLimit is the starting limit. Default 20.
	InitialLimit int
	// MinLimit is the floor of the limit. Default 20.
	MinLimit int
	// MaxLimit is the ceiling of the limit. Default 200.
	MaxLimit int
	// Smoothing in (0, 1] is how far each window moves the limit towards its
	// new estimate. Default 0.2.
	Smoothing float64
	// LongWindow is the span, in windows, of the exponential average that
	// tracks the baseline RTT. Default 600.
	LongWindow int
	// RTTTolerance >= 1 is how much slower than the baseline a window may be
	// before the limit shrinks: 1.5 accepts a 50% increase. Default 1.5.
	RTTTolerance float64
	// QueueSize is how much the limit grows in a window without queueing
	// (before smoothing). Default 4.
	QueueSize int
}

func (c Gradient2Config) withDefaults() Gradient2Config {
	c.InitialLimit = orDefault(c.InitialLimit, 20)
	c.MinLimit = orDefault(c.MinLimit, 20)
	c.MaxLimit = orDefault(c.MaxLimit, 200)
	c.Smoothing = orDefault(c.Smoothing, 0.2)
	c.LongWindow = orDefault(c.LongWindow, 600)
	c.RTTTolerance = orDefault(c.RTTTolerance, 1.5)
	c.QueueSize = orDefault(c.QueueSize, 4)
	return c
}

// validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration (with defaults applied) cannot work.
func (c Gradient2Config) validate() error {
	c = c.withDefaults()
	if err := checkLimits("Gradient2", c.InitialLimit, c.MinLimit, c.MaxLimit); err != nil {
		return err
	}
	switch {
	case !(c.Smoothing > 0 && c.Smoothing <= 1):
		return fmt.Errorf("%w: adaptive: Gradient2 smoothing must be in (0, 1], got %v", floodgate.ErrInvalidConfig, c.Smoothing)
	case c.LongWindow < 1:
		return fmt.Errorf("%w: adaptive: Gradient2 long window must be >= 1, got %d", floodgate.ErrInvalidConfig, c.LongWindow)
	case !(c.RTTTolerance >= 1):
		return fmt.Errorf("%w: adaptive: Gradient2 RTT tolerance must be >= 1, got %v", floodgate.ErrInvalidConfig, c.RTTTolerance)
	case c.QueueSize < 0:
		return fmt.Errorf("%w: adaptive: Gradient2 queue size must be >= 0, got %d", floodgate.ErrInvalidConfig, c.QueueSize)
	}
	return nil
}

// gradientWarmup is how many windows the baseline is a plain mean before it
// becomes an exponential average (the reference uses 10).
const gradientWarmup = 10

// gradient2 is the controller NewGradient2 returns.
type gradient2 struct {
	cfg   Gradient2Config
	limit float64
	// baseline RTT in nanoseconds and its warm-up state.
	long  float64
	sum   float64
	count int
}

// NewGradient2 returns a Gradient2 controller, or an error wrapping
// [floodgate.ErrInvalidConfig].
//
// Gradient2 is the [Controller] of the reference Gradient2Limit: it compares
// each window's mean RTT (short) with a long exponential average of it (the
// baseline, long) and moves the limit by the ratio. Per window, in order:
//
//   - a window with a drop: target = limit/2 (see below);
//   - the short RTT joins the baseline's average (a plain mean over the first
//     10 windows it joins, then an exponential average with factor
//     2/(LongWindow+1)), unless rule 3 below skips it;
//     when long/short > 2 (latency fell back after a long overload) the
//     baseline is multiplied by 0.95;
//   - when the window used less than half the limit, the limit stays;
//   - gradient = clamp(RTTTolerance*long/short, 0.5, 1);
//     target = gradient*limit, plus QueueSize when gradient == 1;
//   - limit = clamp((1-Smoothing)*limit + Smoothing*target, MinLimit, MaxLimit).
//
// Three departures from the reference close its known failure modes:
//
//  1. Drops lower the limit. The reference ignores them, so a server that
//     answers every request with a steady timeout (a stable RTT) lets the
//     limit climb to the maximum; here a window with a drop moves the limit
//     towards half of it (a 10% cut with the default smoothing).
//  2. QueueSize is added only when the gradient is 1 (no queueing seen).
//     The reference adds it always, so under a modest steady overload
//     (gradient ~0.8) the limit keeps a slow upward drift.
//  3. The baseline learns a slower RTT only from windows in which the gate
//     was not full (InFlight < limit). Under sustained overload the RTT the
//     gate itself inflates would otherwise become the new baseline, the
//     gradient would return to 1 and the limit would creep up to the maximum
//     while latency stays stable but high. Faster RTTs are always learned.
//     The rule holds from the second measured window on, warm-up included:
//     the first one sets the baseline whatever it saw, so a gate that
//     starts under overload grows by at most RTTTolerance over that first
//     RTT, and no further.
func NewGradient2(cfg Gradient2Config) (Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &gradient2{cfg: cfg, limit: float64(cfg.InitialLimit)}, nil
}

// InitialLimit returns the configured initial limit.
func (g *gradient2) InitialLimit() int { return g.cfg.InitialLimit }

// Baseline returns the current baseline (long) RTT in nanoseconds, 0 before
// the first measured window.
func (g *gradient2) Baseline() float64 { return g.long }

// Update applies one window.
func (g *gradient2) Update(s Sample) int {
	if s.Dropped > 0 {
		g.move(g.limit * 0.5)
		return int(g.limit)
	}
	if s.RTT <= 0 {
		return int(g.limit)
	}
	short := float64(s.RTT)
	g.learn(short, s.InFlight < int(g.limit))
	if g.long/short > 2 {
		g.decay()
	}
	if float64(s.InFlight) < g.limit/2 {
		return int(g.limit)
	}
	gradient := clampF(g.cfg.RTTTolerance*g.long/short, 0.5, 1)
	target := g.limit * gradient
	if gradient == 1 {
		target += float64(g.cfg.QueueSize)
	}
	g.move(target)
	return int(g.limit)
}

// learn adds one window's RTT to the baseline. A window that found the
// gate full and is slower than the baseline is skipped, in the warm-up as
// after it; the first measured window always sets the baseline, there being
// nothing to compare it with.
func (g *gradient2) learn(rtt float64, notFull bool) {
	if g.count > 0 && rtt > g.long && !notFull {
		return
	}
	if g.count < gradientWarmup {
		g.count++
		g.sum += rtt
		g.long = g.sum / float64(g.count)
		return
	}
	f := 2 / float64(g.cfg.LongWindow+1)
	g.long = g.long*(1-f) + rtt*f
}

// decay lowers the baseline by 5% (latency fell back after a long overload);
// in the warm-up the sum is lowered too, so that the next window's mean
// keeps the cut.
func (g *gradient2) decay() {
	g.long *= 0.95
	if g.count < gradientWarmup {
		g.sum *= 0.95
	}
}

// move smooths the limit towards target and bounds it.
func (g *gradient2) move(target float64) {
	sm := g.cfg.Smoothing
	g.limit = clampF(g.limit*(1-sm)+target*sm, float64(g.cfg.MinLimit), float64(g.cfg.MaxLimit))
}
