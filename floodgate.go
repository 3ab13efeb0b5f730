package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Decision is the verdict of a limiter on one request. It carries everything a
// caller needs to act on the verdict and to write honest response headers without
// recomputing anything.
//
// A denial is a Decision with Allowed false, never an error: an error from a
// [Limiter] means that the limiter could not decide.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool

	// Fallback is set when the shared store could not decide and its
	// failure policy did instead: a local fallback limiter (the decision
	// is the local one's, Limit and Remaining included), or a blanket
	// fail-open or fail-closed answer (Limit is then 0: there is no quota
	// to advertise, and a transport answers as for its own fail mode).
	Fallback bool

	// Limit is the capacity of the policy that decided, in units of cost: the
	// burst of a token bucket, the number of requests of a window.
	Limit int64

	// Remaining is how many units could still be taken right now, after this
	// decision. It is always between 0 and Limit.
	Remaining int64

	// RetryAfter is how long to wait before the same request could be admitted.
	// It is zero exactly when Allowed is true.
	RetryAfter time.Duration

	// ResetAfter is how long until the policy is back to its full capacity if no
	// other request arrives (Remaining == Limit). Zero means already full.
	ResetAfter time.Duration

	// Delay is set by shaping policies (the leaky bucket in delay mode): the
	// request is admitted but should be served only after Delay. It is zero for
	// every other policy and for every denial.
	Delay time.Duration
}

// Limiter is a keyed rate limiter: the common interface of every algorithm in
// floodgate running on any store.
//
// Implementations are safe for concurrent use.
type Limiter interface {
	// Take checks whether n units of cost are available for key and, when they
	// are, consumes them. A denial consumes nothing.
	//
	// The error is non-nil only when the limiter could not decide (store
	// unavailable, context done, invalid n): the caller's fail mode decides what
	// happens to such a request. With a non-nil error the Decision is the zero
	// value.
	Take(ctx context.Context, key string, n int) (Decision, error)
}

// Description describes a limit the way a transport advertises it (the
// RateLimit-Policy field, Envoy's current_limit).
type Description struct {
	// Name is the limit's name, "" when it has none.
	Name string
	// Quota is how many units the limit grants per Window: a rate's N per
	// Per, a window's limit per its length.
	Quota int64
	// Window is the period of Quota.
	Window time.Duration
	// Capacity is the most units that pass at once from full, and the
	// largest cost one request may have (a burst, a window's limit).
	Capacity int64
	// Undelayed is how many of Capacity pass without a shaping delay
	// (Capacity, except for a leaky bucket in delay mode).
	Undelayed int64
}

// Describer is implemented by limiters that can describe their limit, so
// that transports derive what they advertise from the limiter itself.
type Describer interface {
	Describe() Description
}

// Refunder is implemented by limiters that can give back units taken earlier,
// which [All] needs to keep its all-or-nothing promise across limiters.
type Refunder interface {
	// Refund returns n units to key, as if a Take of n had not happened. It never
	// credits more than the policy's capacity.
	Refund(ctx context.Context, key string, n int) error
}

// LimiterFunc adapts a function to the [Limiter] interface.
type LimiterFunc func(ctx context.Context, key string, n int) (Decision, error)

// Take calls f(ctx, key, n).
func (f LimiterFunc) Take(ctx context.Context, key string, n int) (Decision, error) {
	return f(ctx, key, n)
}

// Sentinel errors. Errors returned by floodgate wrap one of these (test with
// errors.Is) and add the detail.
var (
	// ErrInvalidConfig is wrapped by every construction-time validation error:
	// a rate that is zero, negative or NaN, a negative burst, an unknown option.
	ErrInvalidConfig = errors.New("floodgate: invalid configuration")

	// ErrInvalidCost is returned when a request's cost n is below 1 (Take,
	// Refund, a check of TakeAll, an op of a store's ApplyAll). A cost
	// larger than the policy's capacity returns [ErrCostExceedsCapacity],
	// which wraps this one, except in bucket.Limiter's WaitN (x/time/rate's
	// API: n above the burst) and redisstore's Grant (a claim outside
	// 1..capacity), which return ErrInvalidCost itself.
	ErrInvalidCost = errors.New("floodgate: invalid cost")

	// ErrCostExceedsCapacity is returned when a request's cost is larger
	// than the policy's capacity (its burst, its window's limit): such a
	// request can never be admitted, however long it waits, and a transport
	// says so instead of sending a Retry-After. It wraps [ErrInvalidCost].
	ErrCostExceedsCapacity = fmt.Errorf("%w: cost exceeds the policy's capacity", ErrInvalidCost)

	// ErrInvalidKey is returned for a key a store refuses.
	ErrInvalidKey = errors.New("floodgate: invalid key")

	// ErrStoreUnavailable is wrapped when the state store could not answer.
	ErrStoreUnavailable = errors.New("floodgate: store unavailable")

	// ErrClosed is returned by a limiter or store used after Close.
	ErrClosed = errors.New("floodgate: closed")

	// ErrWouldExceedDeadline is returned by [Wait] when admission would come
	// after the context's deadline. It wraps [context.DeadlineExceeded].
	ErrWouldExceedDeadline = &deadlineError{}
)

type deadlineError struct{}

func (*deadlineError) Error() string {
	return "floodgate: wait would exceed the context deadline"
}

func (*deadlineError) Unwrap() error { return context.DeadlineExceeded }

// Clock tells the time. Limiters and stores accept a Clock so that tests can
// drive time explicitly; the default is the system clock, read from Go's
// monotonic clock (offset to wall time once, at program start), so that it
// never goes backwards even when the wall clock is stepped.
//
// A Clock must be safe for concurrent use. It may go backwards (wall clocks
// do): every algorithm in floodgate treats a time earlier than the last one it
// saw as equal to it.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to the [Clock] interface.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }
