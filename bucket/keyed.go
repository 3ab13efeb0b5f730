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

// validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration cannot work.
func (c Config) validate() error {
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
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := c.interval()
	g := gcra{t: t, tau: t * c.Burst, burst: c.Burst}
	g.horizon = reserveHorizon(g.tau)
	g.span = g.tau + g.horizon
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
		// The state's parameters are the interval and the burst (the span
		// follows from them): what a Redis value keeps beside its TAT.
		Lua: algo.Lua{Source: gcraLua, Params: []int64{t, c.Burst, g.span}, StateParams: 2},
	}
	g.memNS = g.spec.Namespace
	g.reserveSpec = g.spec
	g.reserveSpec.Name = reserveName
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
	// horizon is how far beyond tau reservations may push the TAT, and
	// span = tau + horizon the farthest ahead of now a TAT may be.
	horizon, span int64
	spec          algo.Spec
	reserveSpec   algo.Spec // the reserving twin's, but for its Params
	// memNS is the namespace in memory (see algo.Lineage): spec.Namespace,
	// or the version's own once the algorithm is a Lineage, which memory
	// stores read the limit's versions (vs) through.
	memNS uint64
	vs    *algo.Versions
}

// reserveHorizon is the reservation horizon of a bucket whose TAT is at most
// tau ahead when nothing is reserved: max(15 minutes, 64 x tau), at most
// maxSpanMicros (so that every sum stays below 2^53). It is also what tells
// a queue of reservations from a clock gone back: a TAT more than
// tau+horizon ahead of now cannot hold a reservation.
func reserveHorizon(tau int64) int64 {
	return min(max(15*60*usPerSecond, 64*tau), maxSpanMicros)
}

const usPerSecond = int64(time.Second / time.Microsecond)

func (g *gcra) Spec() algo.Spec { return g.spec }

// Layout implements [algo.Layout].
func (g *gcra) Layout() (namespace uint64, words, maxLog int, grain int64) {
	return g.memNS, 1, 0, g.t
}

// Step is the pure step; see the package documentation for the rules. It is
// StepWord on W[0].
func (g *gcra) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	s.W[0] = g.StepWord(s.W[0], now, n, &d)
	return s, d
}

// StepWord implements [algo.WordStepper]: the step on the theoretical
// arrival time alone. It sets every field of *d, one by one (a composite
// literal would zero *d with wide stores first, and the store's narrow
// reads of the fields would then wait on them).
func (g *gcra) StepWord(tat, now, n int64, d *floodgate.Decision) int64 {
	next, limit, rem, retryAfter, resetAfter := g.DecideWord(tat, now, n)
	d.Allowed = retryAfter == 0
	d.Limit = limit
	d.Remaining = rem
	d.RetryAfter = retryAfter
	d.ResetAfter = resetAfter
	d.Delay = 0
	return next
}

// DecideWord is the step on the theoretical arrival time with the
// decision's fields returned one by one, in registers (Allowed is
// retryAfter == 0, Delay is 0): StepWord is it, and memstore steps the
// token bucket through it where it holds no lock (its one-word read path),
// with no memory to lend for a Decision. (A Decision returned by value
// goes through memory at each call boundary; separate results do not.)
func (g *gcra) DecideWord(tat, now, n int64) (next, limit, remaining int64, retryAfter, resetAfter time.Duration) {
	tat = g.normalise(tat, now)
	var wait int64
	switch {
	case n < 0: // refund
		tat = max(now, tat+n*g.t)
	case n > 0:
		newTat := tat + n*g.t
		if allowAt := newTat - g.tau; allowAt > now {
			wait = allowAt - now
		} else {
			tat = newTat
		}
	}
	// Remaining is (tau - (tat - now)) / t within 0..burst; the division
	// is made only when a token is left (a drained bucket, the usual
	// denial, skips it).
	if left := g.tau - (tat - now); left >= g.t {
		remaining = min(left/g.t, g.burst)
	}
	return tat, g.burst, remaining, micros.Dur(wait), micros.Dur(tat - now)
}

// normalise bounds a TAT to now..now+span. A TAT in the past is a full
// bucket. Reservations may hold the TAT up to span ahead of now; a TAT
// farther ahead can only come from a clock that went backwards, and is
// re-based to "empty at now", which credits nothing.
func (g *gcra) normalise(tat, now int64) int64 {
	if tat < now {
		return now
	}
	if tat-now > g.span {
		return now + g.tau
	}
	return tat
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

// gcraLua is the Lua twin of gcra.Step and of its reserving twin (see
// reserve.go), then of gcra.Convert (convertLua). p = {interval, burst,
// span} for the bucket; the reserving twin appends {maxWait, resetIn}.
const gcraLua = `
-- decide is the decision of a bucket of interval t, burst and tau = t *
-- burst whose tat is x at now. (At the top level, not in step: a closure
-- made per call costs the server time on every decision.)
local function decide(x, retry, delay, now, t, burst, tau)
  local rem = math.floor((tau - (x - now)) / t)
  if rem < 0 then rem = 0 end
  if rem > burst then rem = burst end
  local allowed = 1
  if retry > 0 then allowed = 0 end
  return {allowed, burst, rem, retry, x - now, delay}
end
local function step(s, now, n, p)
  local t, burst, span = p[1], p[2], p[3]
  local tau = t * burst
  local tat = s[1] or 0
  if tat < now then tat = now end
  if tat - now > span then tat = now + tau end
  s[1] = tat
  if n <= 0 then
    if n < 0 then
      local give = -n * t
      if p[5] then
        local behind = tat - now - p[5]
        if behind >= t then give = 0
        elseif behind > 0 then give = give - behind end
      end
      if give > 0 then
        tat = tat - give
        if tat < now then tat = now end
      end
      s[1] = tat
    end
    return s, decide(tat, 0, 0, now, t, burst, tau)
  end
  local newTat = tat + n * t
  local wait = newTat - tau - now
  if p[4] then
    local horizon = span - tau
    if wait > p[4] then return s, decide(tat, wait, 0, now, t, burst, tau) end
    if wait > horizon then return s, decide(tat, wait - horizon, 0, now, t, burst, tau) end
    if wait < 0 then wait = 0 end
    s[1] = newTat
    return s, decide(newTat, 0, wait, now, t, burst, tau)
  end
  if wait > 0 then return s, decide(tat, wait, 0, now, t, burst, tau) end
  s[1] = newTat
  return s, decide(newTat, 0, 0, now, t, burst, tau)
end
` + convertLua
