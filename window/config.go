package window

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/luasrc"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Bounds checked by the algorithm constructors. They keep every intermediate value of
// the steps an integer below 2^53, so that the Lua twins (Lua numbers are
// doubles) compute exactly what the Go steps compute, even with a clock
// jumped decades ahead.
const (
	// maxWindow is the longest window: 2^50 microseconds, about 35 years.
	maxWindow = time.Duration(1<<50) * time.Microsecond

	// maxLimit is the largest limit of the fixed window.
	maxLimit = int64(1) << 50

	// maxLogLimit is the largest limit of the sliding log. The log keeps one
	// timestamp (8 bytes) per admitted unit still in the window, so this caps
	// the log at 80 KB per key. Use the sliding-window counter (a fixed 32
	// bytes per key) for larger limits. The slice grows like append, so up to
	// about twice the live entries may be allocated.
	maxLogLimit = int64(10_000)

	// maxCounterProduct bounds Limit x Window (in microseconds) for the
	// sliding-window counter, whose estimate multiplies counts by
	// microseconds: 2^52, e.g. 1,250,000 per hour or 52,000,000 per day.
	maxCounterProduct = int64(1) << 52
)

// Config is a window policy: at most Limit units of cost per Window, per key.
// The same Config runs as any of the three window algorithms:
// [NewFixed], [NewSlidingLog] and [NewSlidingCounter] (see the package
// documentation for which one to pick).
//
// The zero Config is invalid: Limit and Window are required.
type Config struct {
	// Name names the limit (e.g. "api-per-ip"): its identity in the store,
	// the observer's label and the RateLimit-Policy name. Two limiters of
	// one algorithm with the same Name on one store share each key's state,
	// whatever their other parameters; unnamed limiters never share state
	// (see [algo.Identity]).
	Name string

	// Limit is how many units of cost a key may take per window. Limit >= 1;
	// it is also the largest cost one request may have. At most 2^50; the
	// sliding log caps it at 10,000 and the sliding-window counter caps
	// Limit x Window (in microseconds) at 2^52 (see the package
	// documentation's "Units and bounds").
	Limit int64

	// Window is the length of the window: a whole number of microseconds
	// between 1µs and 2^50 µs (about 35 years). Fixed and sliding-counter windows are
	// aligned to the Unix epoch (a 1-minute window starts on the minute), so
	// that nodes and stores agree on them.
	Window time.Duration
}

// validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration cannot work for any of the three algorithms. The algorithm
// constructors check the algorithm-specific bounds (the sliding log's
// limit, the sliding-window counter's Limit x Window) as well.
func (c Config) validate() error {
	if c.Limit < 1 {
		return fmt.Errorf("%w: window limit must be >= 1, got %d", floodgate.ErrInvalidConfig, c.Limit)
	}
	if c.Limit > maxLimit {
		return fmt.Errorf("%w: window limit %d above the maximum %d", floodgate.ErrInvalidConfig, c.Limit, maxLimit)
	}
	if c.Window <= 0 {
		return fmt.Errorf("%w: window must be > 0, got %v", floodgate.ErrInvalidConfig, c.Window)
	}
	if c.Window%time.Microsecond != 0 {
		return fmt.Errorf("%w: window %v is not a whole number of microseconds", floodgate.ErrInvalidConfig, c.Window)
	}
	if c.Window > maxWindow {
		return fmt.Errorf("%w: window %v above the maximum %v", floodgate.ErrInvalidConfig, c.Window, maxWindow)
	}
	return nil
}

func (c Config) validateLog() error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.Limit > maxLogLimit {
		return fmt.Errorf("%w: sliding log limit %d above the maximum %d (the log keeps one timestamp per unit; use the sliding-window counter)", floodgate.ErrInvalidConfig, c.Limit, maxLogLimit)
	}
	return nil
}

func (c Config) validateCounter() error {
	if err := c.validate(); err != nil {
		return err
	}
	if w := c.micros(); c.Limit > maxCounterProduct/w {
		return fmt.Errorf("%w: sliding-window counter limit %d x window %dus overflows (max %d)", floodgate.ErrInvalidConfig, c.Limit, w, maxCounterProduct)
	}
	return nil
}

// micros is the window in microseconds.
func (c Config) micros() int64 { return int64(c.Window / time.Microsecond) }

// The algorithms are returned as pointers: stores call Spec and Step through
// the interface on every request, and a value would be copied each time.

// FixedAlgorithm returns the fixed window as a [algo.Algorithm], for stores
// and for composition. It returns an error when the configuration is invalid.
func (c Config) FixedAlgorithm() (algo.Algorithm, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &fixed{c.params("fixed-window", 2, 0, fixedLua)}, nil
}

// SlidingLogAlgorithm returns the sliding log as a [algo.Algorithm]. It
// returns an error when the configuration is invalid or Limit is above
// 10,000.
func (c Config) SlidingLogAlgorithm() (algo.Algorithm, error) {
	if err := c.validateLog(); err != nil {
		return nil, err
	}
	return &slidingLog{c.params("sliding-log", 1, int(c.Limit), logLua)}, nil
}

// SlidingCounterAlgorithm returns the sliding-window counter as a
// [algo.Algorithm]. It returns an error when the configuration is invalid or
// Limit x Window (in microseconds) is above 2^52.
func (c Config) SlidingCounterAlgorithm() (algo.Algorithm, error) {
	if err := c.validateCounter(); err != nil {
		return nil, err
	}
	return &counter{c.params("sliding-counter", 4, 0, counterLua)}, nil
}

// NewFixed returns a keyed fixed-window limiter on s.
func NewFixed(s store.Store, c Config) (*store.Limiter, error) {
	return newLimiter(s, c, Config.FixedAlgorithm)
}

// NewSlidingLog returns a keyed sliding-log limiter on s. The store must keep
// variable-size state ([algo.State.Log]).
func NewSlidingLog(s store.Store, c Config) (*store.Limiter, error) {
	return newLimiter(s, c, Config.SlidingLogAlgorithm)
}

// NewSlidingCounter returns a keyed sliding-window counter limiter on s.
func NewSlidingCounter(s store.Store, c Config) (*store.Limiter, error) {
	return newLimiter(s, c, Config.SlidingCounterAlgorithm)
}

func newLimiter(s store.Store, c Config, alg func(Config) (algo.Algorithm, error)) (*store.Limiter, error) {
	a, err := alg(c)
	if err != nil {
		return nil, err
	}
	return store.NewLimiter(s, a)
}

// params is what the three window algorithms share: the policy in
// microseconds and the Spec that stores ask for.
type params struct {
	limit, w int64
	spec     algo.Spec
	// memNS is the namespace in memory (see algo.Lineage): spec.Namespace,
	// or the version's own once the algorithm is a Lineage, which memory
	// stores read the limit's versions (vs) through.
	memNS uint64
	vs    *algo.Versions
	grain int64 // w / limit: algo.Grain of spec
}

// Spec implements [algo.Algorithm].
func (p *params) Spec() algo.Spec { return p.spec }

// Layout implements [algo.Layout].
func (p *params) Layout() (uint64, int, int, int64) {
	return p.memNS, p.spec.Words, p.spec.MaxLog, p.grain
}

// params builds an algorithm's params; the namespace is the limit's
// identity (see [algo.Identity]).
func (c Config) params(name string, words, maxLog int, lua string) params {
	limit, w := c.Limit, c.micros()
	ns := algo.Identity(name, c.Name, fmt.Sprintf("%d/%d", limit, w))
	return params{limit: limit, w: w, memNS: ns, grain: w / max(limit, 1), spec: algo.Spec{
		Name:      name,
		Policy:    c.Name,
		Namespace: ns,
		Capacity:  limit,
		Undelayed: limit,
		Quota:     limit,
		Window:    c.Window,
		Words:     words,
		MaxLog:    maxLog,
		Lua:       algo.Lua{Source: lua, Params: []int64{limit, w}, StateParams: 2},
	}}
}

// floorDiv is a/b rounded towards minus infinity, for b > 0 (Go's / truncates
// towards zero; the Lua twins use the same floor).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Times outside [minNow, maxNow] are clamped into it, so that no step can
// overflow whatever the clock says (real clocks are far inside: 2^60µs is
// 36,000 years).
const (
	maxNow = int64(1) << 60
	minNow = -maxNow
)

func clampNow(now int64) int64 { return max(minNow, min(now, maxNow)) }

// setDecision writes a decision field by field (a composite literal would
// zero *d with wide stores first, which a store's narrow reads of the
// fields would then wait on). Times are in microseconds.
func setDecision(d *floodgate.Decision, allowed bool, limit, remaining, retry, reset int64) {
	d.Allowed = allowed
	d.Limit = limit
	d.Remaining = remaining
	d.RetryAfter = micros.Dur(retry)
	d.ResetAfter = micros.Dur(reset)
	d.Delay = 0
}

// windowStart is the start of the epoch-aligned window of length w holding
// now.
func windowStart(now, w int64) int64 { return floorDiv(now, w) * w }

// luaPrelude defines fdiv, floor division exact for integers below 2^53
// (math.floor(a/b) alone can round up when a/b is within an ulp of an
// integer), shared by the three Lua twins.
const luaPrelude = luasrc.FloorDiv + `
local function clampnow(now)
  if now > 1152921504606846976 then return 1152921504606846976 end
  if now < -1152921504606846976 then return -1152921504606846976 end
  return now
end
`
