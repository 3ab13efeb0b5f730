package adaptive

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// AIMDConfig configures [NewAIMD], a loss-based limit: additive increase while
// requests succeed, multiplicative decrease on a drop. The zero value means
// the reference defaults.
type AIMDConfig struct {
	// InitialLimit is the starting limit. Default 20.
	InitialLimit int
	// MinLimit is the floor of the limit. Default 20.
	MinLimit int
	// MaxLimit is the ceiling of the limit. Default 200.
	MaxLimit int
	// Backoff multiplies the limit after a window with a drop or a timeout;
	// in [0.5, 1). Default 0.9.
	Backoff float64
	// Timeout: a window whose mean RTT exceeds it counts as a drop.
	// Default 5s.
	Timeout time.Duration
}

func (c AIMDConfig) withDefaults() AIMDConfig {
	c.InitialLimit = orDefault(c.InitialLimit, 20)
	c.MinLimit = orDefault(c.MinLimit, 20)
	c.MaxLimit = orDefault(c.MaxLimit, 200)
	c.Backoff = orDefault(c.Backoff, 0.9)
	c.Timeout = orDefault(c.Timeout, 5*time.Second)
	return c
}

// validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration (with defaults applied) cannot work.
func (c AIMDConfig) validate() error {
	c = c.withDefaults()
	if err := checkLimits("AIMD", c.InitialLimit, c.MinLimit, c.MaxLimit); err != nil {
		return err
	}
	if !(c.Backoff >= 0.5 && c.Backoff < 1) {
		return fmt.Errorf("%w: adaptive: AIMD backoff must be in [0.5, 1), got %v", floodgate.ErrInvalidConfig, c.Backoff)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: adaptive: AIMD timeout must be positive, got %v", floodgate.ErrInvalidConfig, c.Timeout)
	}
	return nil
}

// aimd is the controller NewAIMD returns.
type aimd struct {
	cfg   AIMDConfig
	limit int
}

// NewAIMD returns an AIMD controller, or an error wrapping
// [floodgate.ErrInvalidConfig].
//
// AIMD is the additive-increase / multiplicative-decrease [Controller] of the
// reference AIMDLimit. Per window:
//
//   - a drop, or a mean RTT above Timeout: limit = max(MinLimit,
//     min(limit-1, floor(limit*Backoff)));
//   - otherwise, when the window used at least half the limit
//     (2*InFlight >= limit): limit = min(MaxLimit, limit+1);
//   - otherwise (the application did not need the limit) it stays.
func NewAIMD(cfg AIMDConfig) (Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &aimd{cfg: cfg, limit: cfg.InitialLimit}, nil
}

// InitialLimit returns the configured initial limit.
func (a *aimd) InitialLimit() int { return a.cfg.InitialLimit }

// Update applies one window.
func (a *aimd) Update(s Sample) int {
	switch {
	case s.Dropped > 0 || s.RTT > a.cfg.Timeout:
		a.limit = max(a.cfg.MinLimit, min(a.limit-1, int(float64(a.limit)*a.cfg.Backoff)))
	case 2*s.InFlight >= a.limit:
		a.limit = min(a.cfg.MaxLimit, a.limit+1)
	}
	return a.limit
}
