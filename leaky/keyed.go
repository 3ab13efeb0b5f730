package leaky

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// Status is what limit_req did with a request, as nginx reports it in
// $limit_req_status. The zero value is not a status.
type Status uint8

// The statuses; their String forms are exactly nginx's.
const (
	// StatusPassed: admitted, to be served at once.
	StatusPassed Status = iota + 1
	// StatusDelayed: admitted, to be served after Decision.Delay.
	StatusDelayed
	// StatusRejected: denied.
	StatusRejected
	// StatusDelayedDryRun: dry run; would have been delayed, admitted
	// without delay (and charged).
	StatusDelayedDryRun
	// StatusRejectedDryRun: dry run; would have been rejected, admitted
	// (and not charged).
	StatusRejectedDryRun
)

var statusNames = [...]string{
	StatusPassed:         "PASSED",
	StatusDelayed:        "DELAYED",
	StatusRejected:       "REJECTED",
	StatusDelayedDryRun:  "DELAYED_DRY_RUN",
	StatusRejectedDryRun: "REJECTED_DRY_RUN",
}

// String returns nginx's name of the status ("PASSED", "DELAYED_DRY_RUN",
// ...), or "" for the zero Status, as $limit_req_status is empty when no
// limit applied.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// StatusOf maps the verdict of the limit (a Decision of the algorithm, before
// dry run is applied: [Result.Verdict]) to its status: REJECTED when denied,
// DELAYED when admitted with a Delay, PASSED otherwise; with dryRun the
// DELAYED and REJECTED cases become DELAYED_DRY_RUN and REJECTED_DRY_RUN.
func StatusOf(verdict floodgate.Decision, dryRun bool) Status {
	switch {
	case !verdict.Allowed && dryRun:
		return StatusRejectedDryRun
	case !verdict.Allowed:
		return StatusRejected
	case verdict.Delay > 0 && dryRun:
		return StatusDelayedDryRun
	case verdict.Delay > 0:
		return StatusDelayed
	}
	return StatusPassed
}

// Result is the outcome of [Keyed.TakeResult]: the Decision to act on, plus
// what the limit decided and its nginx status.
type Result struct {
	// Decision is what the caller acts on. Without DryRun it is Verdict;
	// with DryRun it is always Allowed, with no Delay and no RetryAfter.
	floodgate.Decision
	// Verdict is what the limit decided (the same as Decision unless
	// DryRun): its Allowed, RetryAfter and Delay tell what would have
	// happened.
	Verdict floodgate.Decision
	// Status is the nginx status ($limit_req_status) of the request.
	Status Status
}

// Keyed is a keyed leaky bucket on a [store.Store]: nginx's limit_req for
// each key. It implements [floodgate.Limiter] and [floodgate.Refunder] and is
// safe for concurrent use. Nothing in it sleeps: a delayed request is
// admitted with Decision.Delay set, and the caller (or [Shape]) waits.
//
// Two Keyed with the same Rate, Burst and delay settings on one store share
// each key's state, like two limit_req directives on one zone; limiters that
// differ in any of them never do. DryRun does not count: a dry-run limiter and
// an enforcing one with the same settings share state.
type Keyed struct {
	st      store.Store
	alg     store.Algorithm
	maxCost int64
	dryRun  bool
	cfg     Config
}

// NewKeyed returns the leaky bucket described by c, running on s. It returns
// an error wrapping [floodgate.ErrInvalidConfig] when c is invalid or s nil.
// Requests may cost 1..c.Capacity() (Burst+1); other costs are refused with
// [floodgate.ErrInvalidCost].
func NewKeyed(s store.Store, c Config) (*Keyed, error) {
	alg, err := c.Algorithm()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%w: leaky: nil store", floodgate.ErrInvalidConfig)
	}
	return &Keyed{st: s, alg: alg, maxCost: c.Capacity(), dryRun: c.DryRun, cfg: c}, nil
}

// apply validates the cost (1..Capacity) and runs one step of cost n, or -n
// for a refund.
func (k *Keyed) apply(ctx context.Context, key string, n int, refund bool) (floodgate.Decision, error) {
	if n < 1 || int64(n) > k.maxCost {
		return floodgate.Decision{}, k.costError(n)
	}
	if refund {
		return k.st.Apply(ctx, key, k.alg, -int64(n))
	}
	return k.st.Apply(ctx, key, k.alg, int64(n))
}

func (k *Keyed) costError(n int) error {
	return fmt.Errorf("%w: leaky bucket cost %d outside 1..%d (Burst+1)", floodgate.ErrInvalidCost, n, k.maxCost)
}

// Config returns the limiter's configuration.
func (k *Keyed) Config() Config { return k.cfg }

// Algorithm returns the algorithm the limiter runs.
func (k *Keyed) Algorithm() store.Algorithm { return k.alg }

// Take implements [floodgate.Limiter]: n requests for key, all or none. With
// DryRun the Decision is always Allowed without Delay; use [Keyed.TakeResult]
// to learn what would have happened.
func (k *Keyed) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if n < 1 || int64(n) > k.maxCost {
		return floodgate.Decision{}, k.costError(n)
	}
	d, err := k.st.Apply(ctx, key, k.alg, int64(n))
	if k.dryRun && err == nil {
		d.Allowed, d.RetryAfter, d.Delay = true, 0, 0
	}
	return d, err
}

// TakeResult is Take with the nginx status and, in dry run, the verdict the
// limit reached. With a non-nil error the Result is the zero value.
func (k *Keyed) TakeResult(ctx context.Context, key string, n int) (Result, error) {
	v, err := k.apply(ctx, key, n, false)
	if err != nil {
		return Result{}, err
	}
	r := Result{Decision: v, Verdict: v, Status: StatusOf(v, k.dryRun)}
	if k.dryRun {
		r.Allowed, r.RetryAfter, r.Delay = true, 0, 0
	}
	return r, nil
}

// Refund implements [floodgate.Refunder]: it gives back n requests taken
// earlier for key, exactly the excess their Take added, never more than the
// key's full capacity.
//
// With DryRun, Refund cannot tell a charged take from an uncharged would-be
// rejection: in [floodgate.All], place dry-run limiters after the enforcing
// ones, so that they are never refunded.
func (k *Keyed) Refund(ctx context.Context, key string, n int) error {
	_, err := k.apply(ctx, key, n, true)
	return err
}

// Peek reports key's state now without taking anything: Remaining is how
// many requests would pass at once.
func (k *Keyed) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return k.st.Apply(ctx, key, k.alg, 0)
}
