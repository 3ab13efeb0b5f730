package adaptive

import (
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Sample summarises one window of finished requests. The [Gate] builds it
// and hands it to its [Controller]; tests can build samples by hand.
type Sample struct {
	// RTT is the mean round-trip time of the window's measured requests: those
	// that ended with Success (Dropped requests are counted, not timed: an
	// immediate rejection would pull the mean towards zero and a timeout would
	// say more about the timeout than about the server). Zero when the window
	// measured none.
	RTT time.Duration
	// MinRTT is the smallest measured RTT of the window (zero when none).
	MinRTT time.Duration
	// InFlight is the largest number of requests in flight seen by the
	// window's requests when they were admitted (each counts itself).
	InFlight int
	// Dropped is how many of the window's requests ended with Dropped.
	Dropped int
	// Count is how many requests the window holds, measured and dropped.
	Count int
}

// Controller is a limit algorithm: it turns window samples into a new
// concurrency limit and does nothing else. The [Gate] calls it with its
// lock held, so a Controller needs no synchronisation of its own; it keeps
// state, so each Gate needs its own Controller value. [NewVegas],
// [NewGradient2], [NewAIMD] and [NewConstant] return the package's
// controllers; implement it for another algorithm.
type Controller interface {
	// InitialLimit is the limit before the first sample; it is >= 1.
	InitialLimit() int
	// Update consumes one window and returns the new limit (>= 1).
	Update(s Sample) int
}

// constant is the controller NewConstant returns.
type constant struct{ n int }

// NewConstant returns the [Controller] whose limit never changes: n
// concurrent requests (n >= 1). It turns a [Gate] into a plain concurrency
// semaphore with tokens, observer and leak detection, and gives package
// priority a fixed capacity.
func NewConstant(n int) (Controller, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: adaptive: fixed limit must be >= 1, got %d", floodgate.ErrInvalidConfig, n)
	}
	return &constant{n: n}, nil
}

// InitialLimit returns the fixed limit.
func (f *constant) InitialLimit() int { return f.n }

// Update ignores the sample and returns the fixed limit.
func (f *constant) Update(Sample) int { return f.n }

// log10Root is the step function of the reference Vegas: max(1, floor(log10(x)))
// below 1000 and floor(sqrt(x)) from 1000 on.
func log10Root(x int) int {
	if x >= 1000 {
		return int(math.Sqrt(float64(x)))
	}
	if x < 100 {
		return 1 // floor(log10(x)) is 0 or 1 here
	}
	return 2
}

// clampF bounds v to [lo, hi].
func clampF(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// checkLimits validates the initial, minimum and maximum limits shared by the
// adaptive algorithms.
func checkLimits(name string, initial, lo, hi int) error {
	switch {
	case lo < 1:
		return fmt.Errorf("%w: adaptive: %s minimum limit must be >= 1, got %d", floodgate.ErrInvalidConfig, name, lo)
	case hi < lo:
		return fmt.Errorf("%w: adaptive: %s maximum limit %d is below the minimum %d", floodgate.ErrInvalidConfig, name, hi, lo)
	case initial < lo || initial > hi:
		return fmt.Errorf("%w: adaptive: %s initial limit %d is outside [%d, %d]", floodgate.ErrInvalidConfig, name, initial, lo, hi)
	}
	return nil
}

// orDefault returns def when v is the zero value.
func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
