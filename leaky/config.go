package leaky

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Config is a keyed leaky bucket with the semantics of nginx's limit_req: one
// Config is one "limit_req_zone ... rate=R; limit_req burst=B [nodelay |
// delay=D];" pair. The zero value is not usable: Rate is required. Every other
// field's zero value is nginx's default.
type Config struct {
	// Name names the limit (e.g. "api-per-ip"), like a limit_req zone's
	// name: its identity in the store, the observer's label and the
	// RateLimit-Policy name. Two limiters with the same Name on one store
	// share each key's state, whatever their other parameters; unnamed
	// limiters never share state (see [algo.Identity]).
	Name string

	// Rate is the zone's rate=: floodgate.PerSecond(10) for rate=10r/s,
	// floodgate.PerMinute(30) for rate=30r/m (see [ParseNginx]). Like nginx,
	// the rate is kept as an integer number of milli-requests per second,
	// truncated: 1r/m is 16 milli-requests per second (one request per
	// 62.5 s, not 60 s), exactly as nginx computes it. The rate must be at
	// least 0.001 r/s and at most 1,000,000 r/s per key.
	Rate floodgate.Rate

	// Burst is limit_req's burst=: how many requests may be in excess of the
	// rate. Default 0. Note the nginx arithmetic: from idle, Burst+1 requests
	// pass at once (the first is within the rate, Burst more are excess);
	// [Config.Capacity] reports that number and it is the Decision's Limit.
	Burst int64

	// NoDelay is limit_req's nodelay: every admitted request is served at
	// once (Decision.Delay is always zero). Mutually exclusive with Delay.
	NoDelay bool

	// Delay is limit_req's delay=N: the first N excess requests are served
	// at once, the following ones (up to Burst) are delayed so that they
	// leave at Rate. 0 (nginx's default) delays every excess request; Delay
	// == Burst is the same as NoDelay. Delay <= Burst.
	Delay int64
}

// nginx keeps rates, bursts and excess in thousandths of a request.
const milli = 1000

// Bounds that keep every integer the step (and its Lua twin) computes exactly
// representable in a double.
const (
	maxMilliRate = 1_000_000_000  // 1,000,000 r/s
	maxBurst     = 1_000_000_000  // requests
	maxDrainMs   = int64(1) << 40 // ~35 years to drain a full bucket
)

// Capacity is how many requests of cost 1 pass at once from an idle key:
// Burst + 1, exactly as in nginx (the first request is within the rate and
// Burst more are allowed in excess). It is the Limit of every [floodgate.Decision] and
// the largest cost a single request may have.
func (c Config) Capacity() int64 { return c.Burst + 1 }

// undelayedCapacity is how many requests of cost 1 pass from an idle key
// without being delayed: Capacity() with NoDelay, Delay + 1 otherwise (1 in
// nginx's default mode, where every excess request is delayed).
func (c Config) undelayedCapacity() int64 { return c.delayMilli()/milli + 1 }

// milliRate returns the rate the way nginx keeps it: an integer number of
// thousandths of a request per second, truncated (10r/s is 10000, 1r/m is
// 16). It returns an error wrapping [floodgate.ErrInvalidConfig] when the rate
// is out of range.
func (c Config) milliRate() (int64, error) {
	if err := c.Rate.Validate(); err != nil {
		return 0, err
	}
	// N * 1e12 / Per(ns) without overflow.
	hi, lo := bits.Mul64(uint64(c.Rate.N), uint64(milli*time.Second))
	if hi >= uint64(c.Rate.Per) {
		return 0, fmt.Errorf("%w: leaky bucket rate %v is above %d r/s", floodgate.ErrInvalidConfig, c.Rate, maxMilliRate/milli)
	}
	q, _ := bits.Div64(hi, lo, uint64(c.Rate.Per))
	switch {
	case q > maxMilliRate:
		return 0, fmt.Errorf("%w: leaky bucket rate %v is above %d r/s", floodgate.ErrInvalidConfig, c.Rate, maxMilliRate/milli)
	case q < 1:
		return 0, fmt.Errorf("%w: leaky bucket rate %v is below nginx's resolution of 0.001 r/s", floodgate.ErrInvalidConfig, c.Rate)
	}
	return int64(q), nil
}

// delayMilli is the number of excess milli-requests served undelayed.
func (c Config) delayMilli() int64 {
	if c.NoDelay {
		return c.Burst * milli
	}
	return c.Delay * milli
}

// validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// configuration cannot work: a rate out of range, a negative burst or delay, a
// delay above the burst, both NoDelay and Delay, or values so large that the
// arithmetic would overflow.
func (c Config) validate() error {
	r, err := c.milliRate()
	if err != nil {
		return err
	}
	if c.Burst < 0 || c.Burst > maxBurst {
		return fmt.Errorf("%w: leaky bucket burst must be in 0..%d, got %d", floodgate.ErrInvalidConfig, maxBurst, c.Burst)
	}
	if c.Delay < 0 {
		return fmt.Errorf("%w: leaky bucket delay must be >= 0, got %d", floodgate.ErrInvalidConfig, c.Delay)
	}
	if c.Delay > c.Burst {
		return fmt.Errorf("%w: leaky bucket delay %d is above burst %d", floodgate.ErrInvalidConfig, c.Delay, c.Burst)
	}
	if c.NoDelay && c.Delay > 0 {
		return fmt.Errorf("%w: leaky bucket has both NoDelay and Delay=%d; choose one", floodgate.ErrInvalidConfig, c.Delay)
	}
	if drain := (c.Burst + 1) * milli * milli / r; drain > maxDrainMs {
		return fmt.Errorf("%w: leaky bucket burst %d at rate %v takes %dms to drain, above %dms", floodgate.ErrInvalidConfig, c.Burst, c.Rate, drain, maxDrainMs)
	}
	return nil
}

// Algorithm returns the leaky bucket as a [algo.Algorithm], for stores and
// for composition. It returns an error when the configuration is invalid.
func (c Config) Algorithm() (algo.Algorithm, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	r, _ := c.milliRate()
	a := &algorithm{
		rate:  r,
		burst: c.Burst * milli,
		delay: c.delayMilli(),
		limit: c.Capacity(),
	}
	a.maxExc = maxExcess(r, a.burst)
	// Past msCap elapsed milliseconds any state (reservations included)
	// has leaked back to idle; capping ms keeps rate*ms small.
	a.msCap = ceilDiv(milli*(a.maxExc+milli), r) + 1
	a.spec.Name = "leaky-bucket"
	a.spec.Policy = c.Name
	a.spec.Namespace = algo.Identity("leaky-bucket", c.Name, fmt.Sprintf("%d/%d/%d", a.rate, a.burst, a.delay))
	a.spec.Capacity = a.limit
	a.spec.Undelayed = c.undelayedCapacity()
	a.spec.Quota, a.spec.Window = c.Rate.N, c.Rate.Per
	a.spec.Words = 3
	a.spec.Lua.Source = stepLua
	a.spec.Lua.Params = []int64{a.rate, a.burst, a.delay, a.msCap, a.limit, a.maxExc}
	// The state's parameters are the rate and the burst (the bounds follow
	// from them; the delay does not change what a state means): what a
	// Redis value keeps beside its state.
	a.spec.Lua.StateParams = 2
	a.memNS = a.spec.Namespace
	a.grain = algo.Grain(a.spec)
	a.reserveSpec = a.spec
	a.reserveSpec.Name = reserveName
	return a, nil
}

// maxExcess is the most excess (milli-requests) a key may hold, its
// reservations included: the reservation horizon. It keeps every product of
// the step exact in Lua's doubles: at most 2^42 milli-requests (about 4.4
// billion requests) and 2^40 ms (about 35 years) to drain, and never below
// the burst.
func maxExcess(rate, burst int64) int64 {
	const perMsDrain = maxDrainMs / milli // rate*this milli-requests drain in 2^40 ms
	return max(burst, min(int64(1)<<42, rate*perMsDrain-milli))
}

// parseRate parses an nginx rate= value: "10r/s", "30r/m", or a bare number
// of requests per second ("10"), as limit_req_zone accepts it.
func parseRate(s string) (floodgate.Rate, error) {
	num, per := s, time.Second
	switch {
	case strings.HasSuffix(s, "r/s"):
		num = strings.TrimSuffix(s, "r/s")
	case strings.HasSuffix(s, "r/m"):
		num, per = strings.TrimSuffix(s, "r/m"), time.Minute
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return floodgate.Rate{}, fmt.Errorf("%w: invalid nginx rate %q (want e.g. 10r/s or 30r/m)", floodgate.ErrInvalidConfig, s)
	}
	return floodgate.Rate{N: n, Per: per}, nil
}

// ParseNginx builds a Config from the two nginx directives it replaces: rate
// is limit_req_zone's rate= value ("10r/s", "30r/m", or a bare number of
// requests per second) and params is
// the rest of a limit_req directive ("zone=ip burst=20 nodelay", the zone=
// parameter ignored, a trailing ';' allowed). limit_req_dry_run is the
// transport's dry-run mode (httplimit.WithDryRun, grpclimit.WithDryRun). The Config is validated; errors wrap
// [floodgate.ErrInvalidConfig].
func ParseNginx(rate, params string) (Config, error) {
	r, err := parseRate(rate)
	if err != nil {
		return Config{}, err
	}
	c := Config{Rate: r}
	for _, f := range strings.Fields(strings.TrimSuffix(strings.TrimSpace(params), ";")) {
		name, val, hasVal := strings.Cut(f, "=")
		switch {
		case name == "zone" && hasVal:
		case name == "nodelay" && !hasVal:
			c.NoDelay = true
		case (name == "burst" || name == "delay") && hasVal:
			v, err := strconv.ParseInt(val, 10, 64)
			if err != nil || v <= 0 {
				return Config{}, fmt.Errorf("%w: invalid nginx %s value %q", floodgate.ErrInvalidConfig, name, val)
			}
			if name == "burst" {
				c.Burst = v
			} else {
				c.Delay = v
			}
		default:
			return Config{}, fmt.Errorf("%w: unknown limit_req parameter %q", floodgate.ErrInvalidConfig, f)
		}
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
