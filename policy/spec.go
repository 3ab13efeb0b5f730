package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// Kind names the algorithm of a policy, as written in config files (the
// algorithm: key).
type Kind string

// The algorithms.
const (
	TokenBucket    Kind = "token-bucket"
	LeakyBucket    Kind = "leaky-bucket"
	FixedWindow    Kind = "fixed-window"
	SlidingLog     Kind = "sliding-log"
	SlidingCounter Kind = "sliding-counter"
)

// Policy is a limit as data: a name plus an algorithm and its parameters.
// The name is the policy's identity everywhere (its state in the store, the
// observer's label, the RateLimit-Policy name): a change of parameters
// under one name keeps every key's state.
type Policy struct {
	// Name identifies the policy. Required; printable ASCII without spaces.
	Name string
	// Algorithm is the algorithm; the default is TokenBucket.
	Algorithm Kind
	// Rate is the rate of a token or leaky bucket.
	Rate floodgate.Rate
	// Burst is a token bucket's capacity (default: Rate.N) or a leaky
	// bucket's burst= (default 0).
	Burst int64
	// NoDelay and Delay are a leaky bucket's nodelay and delay=N.
	NoDelay bool
	Delay   int64
	// Limit and Window are a window algorithm's limit per window.
	Limit  int64
	Window time.Duration
	// DryRun runs the policy in shadow mode: decided, charged and reported
	// as enforcement would, never refusing.
	DryRun bool
	// Leased decides a token-bucket policy at local speed on tokens leased
	// from its global bucket (package
	// [github.com/floodgate-go/floodgate/lease]): a [Live] on a shared store
	// that grants leases (redisstore) only. The fleet still admits at most
	// what the one global bucket grants; it may admit less, by the tokens
	// the leases hold (see lease's "Bounds").
	Leased bool
	// LeaseRefresh is a leased policy's refresh period (lease.Config.Refresh,
	// 1ms..10s; default 100ms).
	LeaseRefresh time.Duration
}

// Limiter returns the policy's keyed limiter on s. Two limiters of one
// policy name on one store share each key's state. For a Leased policy it
// is the limiter deciding every request directly on the store (the global
// bucket, without leases); a [Live] decides it through its leases.
func (p Policy) Limiter(s store.Store) (*store.Limiter, error) {
	alg, err := p.build()
	if err != nil {
		return nil, err
	}
	return store.NewLimiter(s, alg)
}

// build returns the policy's algorithm.
func (p Policy) build() (algo.Algorithm, error) {
	if err := p.validateName(); err != nil {
		return nil, err
	}
	switch p.algorithm() {
	case TokenBucket:
		return p.bucket().Algorithm()
	case LeakyBucket:
		return p.leaky().Algorithm()
	case FixedWindow:
		return p.window().FixedAlgorithm()
	case SlidingLog:
		return p.window().SlidingLogAlgorithm()
	case SlidingCounter:
		return p.window().SlidingCounterAlgorithm()
	}
	return nil, fmt.Errorf("%w: policy %q: unknown algorithm %q (want token-bucket, leaky-bucket, fixed-window, sliding-log or sliding-counter)",
		floodgate.ErrInvalidConfig, p.Name, p.Algorithm)
}

// sameLimit reports whether p and q are the same limit with the same
// parameters: all but DryRun, which is the transports' business, and the
// lease options, which decide how the limit's tokens are spent, not the
// limit (its state in the store is the same).
func (p Policy) sameLimit(q Policy) bool {
	p.DryRun, q.DryRun = false, false
	p.Leased, q.Leased = false, false
	p.LeaseRefresh, q.LeaseRefresh = 0, 0
	p.Algorithm, q.Algorithm = p.algorithm(), q.algorithm()
	return p == q
}

// Validate reports an error wrapping [floodgate.ErrInvalidConfig] when the
// policy cannot work.
func (p Policy) Validate() error {
	if err := p.validateName(); err != nil {
		return err
	}
	if err := p.validateAlgorithm(); err != nil {
		return err
	}
	return p.validateFields()
}

// validateAlgorithm checks the policy's parameters with its algorithm's
// own validation, and says what is missing when a required one is.
func (p Policy) validateAlgorithm() error {
	var err error
	switch p.algorithm() {
	case TokenBucket:
		_, err = p.bucket().Algorithm()
	case LeakyBucket:
		_, err = p.leaky().Algorithm()
	case FixedWindow:
		_, err = p.window().FixedAlgorithm()
	case SlidingLog:
		_, err = p.window().SlidingLogAlgorithm()
	case SlidingCounter:
		_, err = p.window().SlidingCounterAlgorithm()
	default:
		return fmt.Errorf("%w: policy %q: unknown algorithm %q (want token-bucket, leaky-bucket, fixed-window, sliding-log or sliding-counter)",
			floodgate.ErrInvalidConfig, p.Name, p.Algorithm)
	}
	switch {
	case err == nil:
		return nil
	case p.isBucket() && p.Rate == (floodgate.Rate{}):
		return fmt.Errorf("%w: policy %q: a %s needs a rate (rate: 100/s)", floodgate.ErrInvalidConfig, p.Name, p.algorithm())
	case !p.isBucket() && p.Limit == 0 && p.Window == 0:
		hint := ""
		if p.Rate != (floodgate.Rate{}) || p.Burst != 0 {
			hint = "; rate and burst belong to the buckets"
		}
		return fmt.Errorf("%w: policy %q: a %s needs a limit and a window (limit: 100, window: 1m)%s", floodgate.ErrInvalidConfig, p.Name, p.algorithm(), hint)
	}
	return fmt.Errorf("policy %q: %w", p.Name, err)
}

// validateFields refuses the fields that do not belong to the policy's
// algorithm, and a lease refresh out of range.
func (p Policy) validateFields() error {
	switch {
	case p.isBucket() && (p.Limit != 0 || p.Window != 0):
		return fmt.Errorf("%w: policy %q: limit and window belong to the window algorithms, not %s", floodgate.ErrInvalidConfig, p.Name, p.algorithm())
	case !p.isBucket() && (p.Rate != floodgate.Rate{} || p.Burst != 0):
		return fmt.Errorf("%w: policy %q: rate and burst belong to the buckets, not %s", floodgate.ErrInvalidConfig, p.Name, p.algorithm())
	case p.algorithm() != LeakyBucket && (p.NoDelay || p.Delay != 0):
		return fmt.Errorf("%w: policy %q: nodelay and delay belong to the leaky bucket", floodgate.ErrInvalidConfig, p.Name)
	}
	return p.validateLease()
}

// validateLease checks the lease fields.
func (p Policy) validateLease() error {
	switch {
	case p.Leased && p.algorithm() != TokenBucket:
		return fmt.Errorf("%w: policy %q: leased is for token-bucket policies, not %s (a lease holds tokens)", floodgate.ErrInvalidConfig, p.Name, p.algorithm())
	case p.LeaseRefresh != 0 && !p.Leased:
		return fmt.Errorf("%w: policy %q: lease_refresh needs leased: true", floodgate.ErrInvalidConfig, p.Name)
	case p.LeaseRefresh != 0 && (p.LeaseRefresh < time.Millisecond || p.LeaseRefresh > 10*time.Second):
		return fmt.Errorf("%w: policy %q: lease_refresh %v outside 1ms..10s", floodgate.ErrInvalidConfig, p.Name, p.LeaseRefresh)
	}
	return nil
}

// isBucket reports whether the policy is a token or a leaky bucket.
func (p Policy) isBucket() bool {
	return p.algorithm() == TokenBucket || p.algorithm() == LeakyBucket
}

func (p Policy) validateName() error {
	if p.Name == "" {
		return fmt.Errorf("%w: a policy needs a name", floodgate.ErrInvalidConfig)
	}
	for i := 0; i < len(p.Name); i++ {
		if c := p.Name[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return fmt.Errorf("%w: policy name %q: printable ASCII without spaces, quotes or backslashes", floodgate.ErrInvalidConfig, p.Name)
		}
	}
	return nil
}

func (p Policy) algorithm() Kind {
	if p.Algorithm == "" {
		return TokenBucket
	}
	return p.Algorithm
}

func (p Policy) bucket() bucket.Config {
	burst := p.Burst
	if burst == 0 {
		burst = p.Rate.N
	}
	return bucket.Config{Name: p.Name, Rate: p.Rate, Burst: burst}
}

func (p Policy) leaky() leaky.Config {
	return leaky.Config{Name: p.Name, Rate: p.Rate, Burst: p.Burst, NoDelay: p.NoDelay, Delay: p.Delay}
}

func (p Policy) window() window.Config {
	return window.Config{Name: p.Name, Limit: p.Limit, Window: p.Window}
}

// String describes the policy on one line: its name, its algorithm and its
// parameters, a bucket's rate as config files write it ("100/s", "5/30s"), as
// in "pro: token-bucket 100/s burst 100", a window's limit per duration, as
// in "daily: fixed-window 1000 per 1h0m0s"; then "leased" and "(dry run)"
// when set.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(p.Name)
	b.WriteString(": ")
	b.WriteString(string(p.algorithm()))
	switch p.algorithm() {
	case TokenBucket, LeakyBucket:
		b.WriteString(" " + formatRate(p.Rate))
		if burst := p.bucket().Burst; p.algorithm() == TokenBucket {
			b.WriteString(" burst " + strconv.FormatInt(burst, 10))
		} else if p.Burst > 0 {
			b.WriteString(" burst " + strconv.FormatInt(p.Burst, 10))
		}
	default:
		b.WriteString(" " + strconv.FormatInt(p.Limit, 10) + " per " + p.Window.String())
	}
	if p.Leased {
		b.WriteString(" leased")
		if p.LeaseRefresh != 0 {
			b.WriteString(" every " + p.LeaseRefresh.String())
		}
	}
	if p.DryRun {
		b.WriteString(" (dry run)")
	}
	return b.String()
}

// parseRate parses a rate as config files write it: "100/s", "30/m",
// "1000/h", "2/d", "1/ms", "5/30s" (N per a duration), or "10r/s" as nginx
// writes it. N is at least 1.
func parseRate(s string) (floodgate.Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	n = strings.TrimSuffix(n, "r")
	count, err := strconv.ParseInt(n, 10, 64)
	switch {
	case !ok || err != nil:
		return floodgate.Rate{}, fmt.Errorf("%w: rate %q: want N/unit, e.g. 100/s, 30/m, 5/30s", floodgate.ErrInvalidConfig, s)
	case count <= 0:
		return floodgate.Rate{}, fmt.Errorf("%w: rate %q: N must be at least 1 (to stop traffic, refuse it; to stop limiting, remove the rule)", floodgate.ErrInvalidConfig, s)
	}
	var d time.Duration
	switch per {
	case "ms":
		d = time.Millisecond
	case "s", "sec", "second":
		d = time.Second
	case "m", "min", "minute":
		d = time.Minute
	case "h", "hour":
		d = time.Hour
	case "d", "day":
		d = 24 * time.Hour
	default:
		d, err = time.ParseDuration(per)
		switch {
		case err != nil:
			return floodgate.Rate{}, fmt.Errorf("%w: rate %q: unknown unit %q (want ms, s, m, h, d, or a duration such as 30s or 5m)", floodgate.ErrInvalidConfig, s, per)
		case d <= 0:
			return floodgate.Rate{}, fmt.Errorf("%w: rate %q: the period %q must be longer than zero", floodgate.ErrInvalidConfig, s, per)
		}
	}
	return floodgate.Rate{N: count, Per: d}, nil
}

// formatRate writes a rate the way parseRate reads it.
func formatRate(r floodgate.Rate) string {
	switch r.Per {
	case time.Second:
		return strconv.FormatInt(r.N, 10) + "/s"
	case time.Minute:
		return strconv.FormatInt(r.N, 10) + "/m"
	case time.Hour:
		return strconv.FormatInt(r.N, 10) + "/h"
	case 24 * time.Hour:
		return strconv.FormatInt(r.N, 10) + "/d"
	}
	return strconv.FormatInt(r.N, 10) + "/" + r.Per.String()
}
