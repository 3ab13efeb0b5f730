package floodgate

import (
	"context"
	"errors"
	"time"
)

// ErrCannotReserve is returned by [Reserver.Reserve] and
// [Reserver.CancelReservation] when the limiter's policy cannot reserve (a
// window, for instance); [Wait] then falls back to taking and sleeping.
var ErrCannotReserve = errors.New("floodgate: the policy cannot reserve")

// Reserver is implemented by limiters that can reserve: admit a request now
// for a time in the future, as the token bucket and the leaky bucket can.
// Each reservation pushes the key's state further, so that the next one is
// scheduled after it: callers that reserve are served in the order of their
// reservations (first in, first out), each after its own Decision.Delay, in
// one call each and without polling. [Wait] reserves when it can.
//
// The keyed limiters of the store package implement Reserver; for the
// policies that cannot reserve their methods return an error wrapping
// [ErrCannotReserve].
type Reserver interface {
	Limiter

	// Reserve admits n units for key when the request can be served within
	// maxWait: the Decision is Allowed with Delay the wait before acting
	// (zero when it can act at once), and the units are charged now, so
	// that later requests are scheduled after it. A policy bounds how far
	// ahead it reserves (its horizon, documented by the policy) and takes a
	// longer maxWait as that bound.
	//
	// Otherwise the Decision is a denial, nothing is charged, and
	// RetryAfter tells when to try again: more than maxWait when the request
	// cannot be served within maxWait (RetryAfter is then the wait it would
	// have had); at most maxWait when it was refused only because it would
	// queue beyond the horizon (RetryAfter is then how long until it fits,
	// when a Reserve with maxWait less that time would admit it, if nobody
	// else came first). A caller with a deadline gives up in the first case
	// and retries after RetryAfter in the second.
	//
	// Errors are those of Take.
	Reserve(ctx context.Context, key string, n int, maxWait time.Duration) (Decision, error)

	// CancelReservation gives back a reservation of n units on key that
	// will not be used. resetIn locates the reservation in the key's
	// queue: the reservation's Decision.ResetAfter less the time elapsed
	// since Reserve was called (measured from before the call). The last
	// reservation of a queue is given back in full; one with later
	// reservations behind it is not given back at all, whatever the
	// costs: they keep their times, and giving back any of it would let a
	// newcomer be served with them and exceed the limit. The slot it
	// leaves is then served to nobody. resetIn is measured on the caller's
	// clock, not the store's: what comes back errs by the store calls'
	// latency (more by up to this call's, less by up to Reserve's), and is
	// nothing when that error reaches one unit's interval.
	CancelReservation(ctx context.Context, key string, n int, resetIn time.Duration) error
}
