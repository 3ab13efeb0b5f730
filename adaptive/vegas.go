package adaptive

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/floodgate-go/floodgate"
)

// VegasConfig configures [NewVegas]. The zero value means the reference
// defaults.
type VegasConfig struct {
	// InitialLimit is the starting limit. Default 20.
	InitialLimit int
	// MaxLimit is the ceiling of the limit. Default 1000. The floor is 1.
	MaxLimit int
	// Smoothing in (0, 1] is how far each window moves the limit towards its
	// new value. Default 1 (no smoothing).
	Smoothing float64
	// ProbeMultiplier sets how often the no-load RTT is probed again: after
	// jitter*ProbeMultiplier*limit windows, jitter uniform in [0.5, 1).
	// Default 30.
	ProbeMultiplier int
	// Rand is the source of the probe jitter; nil means a randomly seeded
	// one. Tests pass a seeded source to be deterministic.
	Rand *rand.Rand
}

func (c VegasConfig) withDefaults() VegasConfig {
	c.InitialLimit = orDefault(c.InitialLimit, 20)
	c.MaxLimit = orDefault(c.MaxLimit, 1000)
	c.Smoothing = orDefault(c.Smoothing, 1.0)
	c.ProbeMultiplier = orDefault(c.ProbeMultiplier, 30)
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return c
}

// validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration (with defaults applied) cannot work.
func (c VegasConfig) validate() error {
	c = c.withDefaults()
	if err := checkLimits("Vegas", c.InitialLimit, 1, c.MaxLimit); err != nil {
		return err
	}
	if !(c.Smoothing > 0 && c.Smoothing <= 1) {
		return fmt.Errorf("%w: adaptive: Vegas smoothing must be in (0, 1], got %v", floodgate.ErrInvalidConfig, c.Smoothing)
	}
	if c.ProbeMultiplier < 1 {
		return fmt.Errorf("%w: adaptive: Vegas probe multiplier must be >= 1, got %d", floodgate.ErrInvalidConfig, c.ProbeMultiplier)
	}
	return nil
}

// vegas is the controller NewVegas returns.
type vegas struct {
	cfg        VegasConfig
	limit      float64
	noLoad     float64 // ns; 0 before the first measured window
	probeCount int
	jitter     float64
}

// NewVegas returns a Vegas controller, or an error wrapping
// [floodgate.ErrInvalidConfig].
//
// Vegas is the delay-based [Controller] of the reference VegasLimit, after TCP
// Vegas. It keeps the smallest RTT seen as the no-load RTT and estimates the
// queue the limit builds: queue = ceil(limit*(1 - noLoad/rtt)). With
// lg(x) = max(1, floor(log10(x))) (floor(sqrt(x)) from 1000 on), alpha =
// 3*lg(limit), beta = 6*lg(limit) and threshold = lg(limit), per window:
//
//   - a window with a drop: limit -= lg(limit);
//   - every jitter*ProbeMultiplier*limit windows the no-load RTT is reset to
//     the window's RTT (a probe, so that it can follow a slower server);
//   - an RTT below the no-load RTT becomes the new no-load RTT;
//   - a window that used less than half the limit leaves it alone;
//   - queue <= threshold: limit += beta; queue < alpha: limit += lg(limit);
//     queue > beta: limit -= lg(limit); otherwise it stays;
//   - the result is bounded to [1, MaxLimit] and smoothed.
//
// One departure from the reference: drops are handled first. The reference
// checks the probe and a new minimum RTT before the drop, so a window of
// fast failures (which often carries a new minimum) never lowers the limit.
//
// Vegas steers by latency. Its reaction to drops is the reference's small
// step (lg(limit) per window), so a limit that grew far above what the server
// can take (it grows whenever a window uses half of it and sees no queueing)
// comes down slowly once the server starts refusing: for a server that
// signals overload by refusing fast rather than by slowing down, prefer
// [NewAIMD] or [NewGradient2], which cut the limit by 10% per window with drops.
func NewVegas(cfg VegasConfig) (Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	v := &vegas{cfg: cfg, limit: float64(cfg.InitialLimit)}
	v.resetJitter()
	return v, nil
}

func (v *vegas) resetJitter() { v.jitter = 0.5 + v.cfg.Rand.Float64()/2 }

// InitialLimit returns the configured initial limit.
func (v *vegas) InitialLimit() int { return v.cfg.InitialLimit }

// NoLoadRTT returns the current no-load RTT estimate in nanoseconds, 0 before
// the first measured window.
func (v *vegas) NoLoadRTT() float64 { return v.noLoad }

// Update applies one window.
func (v *vegas) Update(s Sample) int {
	lim := int(v.limit)
	if s.Dropped > 0 {
		v.set(v.limit - float64(log10Root(lim)))
		return int(v.limit)
	}
	if s.RTT <= 0 {
		return lim
	}
	rtt := float64(s.RTT)
	v.probeCount++
	if v.jitter*float64(v.cfg.ProbeMultiplier)*v.limit <= float64(v.probeCount) {
		v.resetJitter()
		v.probeCount = 0
		v.noLoad = rtt
		return lim
	}
	if v.noLoad == 0 || rtt < v.noLoad {
		v.noLoad = rtt
		return lim
	}
	if float64(2*s.InFlight) < v.limit {
		return lim
	}
	queue := int(math.Ceil(v.limit * (1 - v.noLoad/rtt)))
	lg := log10Root(lim)
	switch {
	case queue <= lg:
		v.set(v.limit + float64(6*lg))
	case queue < 3*lg:
		v.set(v.limit + float64(lg))
	case queue > 6*lg:
		v.set(v.limit - float64(lg))
	}
	return int(v.limit)
}

// set bounds and smooths a new limit.
func (v *vegas) set(n float64) {
	n = clampF(n, 1, float64(v.cfg.MaxLimit))
	sm := v.cfg.Smoothing
	v.limit = (1-sm)*v.limit + sm*n
}
