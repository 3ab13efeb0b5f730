package bucket

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Config is a keyed token bucket: each key gets a bucket of Burst tokens that
// refills at Rate. A request of cost n takes n tokens.
type Config struct {
	// Name names the limit (e.g. "api-per-ip"): its identity in the store,
	// the observer's label and the RateLimit-Policy name. Two limiters with
	// the same Name on one store share each key's state, whatever their
	// other parameters (they are one limit); unnamed limiters never share
	// state (see [algo.Identity]). Name every limit whose state several
	// processes share on Redis.
	Name string
	// Rate is the refill rate. Rate.Per / Rate.N is rounded up to a whole
	// microsecond (the keyed algorithms compute in integer microseconds so that
	// the Redis twin is exact): the effective rate is never above the one
	// written. Per-key rates above 1,000,000/s are refused; use the keyless
	// [Limiter] for those.
	Rate floodgate.Rate
	// Burst is the bucket's capacity: how many units pass at once from full.
	// Burst >= 1; it is also the largest cost one request may have.
	Burst int64
}

// maxSpanMicros bounds burst x interval so that every sum in the step stays
// below 2^53 (exact in Lua's doubles) even with a clock jumped decades ahead.
const maxSpanMicros = int64(1) << 50

// Validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration cannot work.
func (c Config) Validate() error {
	if err := c.Rate.Validate(); err != nil {
		return err
	}
	if c.Burst < 1 {
		return fmt.Errorf("%w: token bucket burst must be >= 1, got %d", floodgate.ErrInvalidConfig, c.Burst)
	}
	// Above one unit per microsecond the interval would round up to 1us and
	// silently lower the rate: refuse it, as documented on Rate.
	if per := int64(c.Rate.Per / time.Microsecond); c.Rate.N > per {
		return fmt.Errorf("%w: token bucket rate %v is above 1,000,000/s per key; use the keyless Limiter", floodgate.ErrInvalidConfig, c.Rate)
	}
	t := c.interval()
	if t < 1 || t > maxSpanMicros {
		return fmt.Errorf("%w: token bucket rate %v gives an interval of %dus, want 1us..%dus", floodgate.ErrInvalidConfig, c.Rate, t, maxSpanMicros)
	}
	if c.Burst > maxSpanMicros/t {
		return fmt.Errorf("%w: token bucket burst %d x interval %dus overflows", floodgate.ErrInvalidConfig, c.Burst, t)
	}
	return nil
}

// interval is the emission interval in microseconds, rounded up.
func (c Config) interval() int64 {
	per := int64(c.Rate.Per / time.Microsecond)
	if c.Rate.N <= 0 || per <= 0 {
		return 0
	}
	return (per + c.Rate.N - 1) / c.Rate.N
}

// Algorithm returns the token bucket as a [algo.Algorithm], for stores and
// for composition. It returns an error when the configuration is invalid.
func (c Config) Algorithm() (algo.Algorithm, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	t := c.interval()
	g := gcra{t: t, tau: t * c.Burst, burst: c.Burst}
	// A pointer: stores call Spec and Step through the interface on every
	// request, and a value receiver would copy the whole struct each time.
	g.spec = algo.Spec{
		Name:      "token-bucket",
		Policy:    c.Name,
		Namespace: algo.Identity("token-bucket", c.Name, fmt.Sprintf("%d/%d", t, c.Burst)),
		Words:     1,
		Capacity:  c.Burst,
		Undelayed: c.Burst,
		Quota:     c.Rate.N,
		Window:    c.Rate.Per,
		Lua:       algo.Lua{Source: gcraLua, Params: []int64{t, c.Burst}},
	}
	return &g, nil
}

// NewKeyed returns a keyed token bucket limiter on s.
func NewKeyed(s store.Store, c Config) (*store.Limiter, error) {
	alg, err := c.Algorithm()
	if err != nil {
		return nil, err
	}
	return store.NewLimiter(s, alg)
}

// gcra is the token bucket written as GCRA (the generic cell rate algorithm):
// the state is one word, the theoretical arrival time (TAT): the time at which
// the bucket is full again. Taking n tokens pushes the TAT n intervals later;
// a request is admitted when the pushed TAT is at most tau (= burst intervals)
// ahead of now.
type gcra struct {
	t, tau, burst int64
	spec          algo.Spec
}

func (g *gcra) Spec() algo.Spec { return g.spec }

// Layout implements [algo.Layout].
func (g *gcra) Layout() (namespace uint64, words, maxLog int) { return g.spec.Namespace, 1, 0 }

// Step is the pure step; see the package documentation for the rules. It is
// StepWord on W[0].
func (g *gcra) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	s.W[0] = g.StepWord(s.W[0], now, n, &d)
	return s, d
}

// StepWord implements [algo.WordStepper]: the step on the theoretical
// arrival time alone. It sets every field of *d.
func (g *gcra) StepWord(tat, now, n int64, d *floodgate.Decision) int64 {
	if tat < now {
		tat = now
	}
	// A TAT more than tau ahead of now can only come from a clock that went
	// backwards: re-base it to "empty at now". This credits nothing.
	if tat-now > g.tau {
		tat = now + g.tau
	}
	if n < 0 {
		tat += n * g.t // n < 0: refund
		if tat < now {
			tat = now
		}
		g.decide(d, tat, now, 0)
		return tat
	}
	newTat := tat + n*g.t
	if allowAt := newTat - g.tau; allowAt > now {
		g.decide(d, tat, now, allowAt-now)
		return tat
	}
	g.decide(d, newTat, now, 0)
	return newTat
}

// decide writes the decision for a bucket whose TAT is tat: admitted when
// retryAfter (µs) is 0, denied otherwise. It sets the fields one by one, not
// as a composite literal: that would zero *d with wide stores first, and
// the store's narrow reads of the fields would then wait on them.
func (g *gcra) decide(d *floodgate.Decision, tat, now, retryAfter int64) {
	rem := (g.tau - (tat - now)) / g.t
	d.Allowed = retryAfter == 0
	d.Limit = g.burst
	d.Remaining = max(0, min(rem, g.burst))
	d.RetryAfter = micros.Dur(retryAfter)
	d.ResetAfter = micros.Dur(tat - now)
	d.Delay = 0
}

// gcraLua is the Lua twin of gcra.Step. p = {interval, burst}.
const gcraLua = `
return function(s, now, n, p)
  local t, burst = p[1], p[2]
  local tau = t * burst
  local tat = s[1] or 0
  if tat < now then tat = now end
  if tat - now > tau then tat = now + tau end
  s[1] = tat
  local function decide(x, allowed)
    local rem = math.floor((tau - (x - now)) / t)
    if rem < 0 then rem = 0 end
    if rem > burst then rem = burst end
    return {allowed, burst, rem, 0, x - now, 0}
  end
  if n < 0 then
    tat = tat + n * t
    if tat < now then tat = now end
    s[1] = tat
    return s, decide(tat, 1)
  end
  local newTat = tat + n * t
  local allowAt = newTat - tau
  if allowAt > now then
    local d = decide(tat, 0)
    d[4] = allowAt - now
    return s, d
  end
  s[1] = newTat
  return s, decide(newTat, 1)
end
`
