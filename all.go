package floodgate

import (
	"context"
	"errors"
	"fmt"
)

// All returns a Limiter that admits a request only when every one of limiters
// admits it: "10 per second AND 1000 per hour". When one denies (or errors),
// the units already taken from the others are refunded, so a denied request
// consumes nothing anywhere.
//
// The combined Decision is the most restrictive one: Allowed only if all allow;
// Limit and Remaining from the limiter with the fewest units remaining;
// RetryAfter, ResetAfter and Delay the largest among the limiters.
//
// Every limiter must implement [Refunder]; All returns an error wrapping
// [ErrInvalidConfig] otherwise, or when limiters is empty or holds a nil.
//
// Across independent limiters the refund is not atomic: a concurrent request
// may observe the units for the short time between the take and the refund.
// Policies that must be combined atomically belong in one store call (see the
// Redis store's multi-policy limiters).
func All(limiters ...Limiter) (Limiter, error) {
	if len(limiters) == 0 {
		return nil, fmt.Errorf("%w: All needs at least one limiter", ErrInvalidConfig)
	}
	ls := make([]Limiter, len(limiters))
	rs := make([]Refunder, len(limiters))
	for i, l := range limiters {
		if l == nil {
			return nil, fmt.Errorf("%w: All: limiter %d is nil", ErrInvalidConfig, i)
		}
		r, ok := l.(Refunder)
		if !ok {
			return nil, fmt.Errorf("%w: All: limiter %d (%T) cannot refund", ErrInvalidConfig, i, l)
		}
		ls[i], rs[i] = l, r
	}
	return &all{limiters: ls, refunders: rs}, nil
}

type all struct {
	limiters  []Limiter
	refunders []Refunder
}

func (a *all) Take(ctx context.Context, key string, n int) (Decision, error) {
	var out Decision
	for i, l := range a.limiters {
		d, err := l.Take(ctx, key, n)
		if err != nil {
			if rerr := a.refund(ctx, key, n, i); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return Decision{}, err
		}
		out = merge(out, d, i == 0)
		if !d.Allowed {
			if rerr := a.refund(ctx, key, n, i); rerr != nil {
				return Decision{}, rerr
			}
			// Report the denial with what the denying limiter said, merged
			// with the others' restrictions seen so far.
			out.Allowed = false
			out.Delay = 0
			return out, nil
		}
	}
	return out, nil
}

// Refund gives n back to every limiter.
func (a *all) Refund(ctx context.Context, key string, n int) error {
	return a.refund(ctx, key, n, len(a.refunders))
}

// refund gives n back to the first k limiters.
func (a *all) refund(ctx context.Context, key string, n, k int) error {
	var errs []error
	for _, r := range a.refunders[:k] {
		if err := r.Refund(context.WithoutCancel(ctx), key, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func merge(acc, d Decision, first bool) Decision {
	if first {
		return d
	}
	acc.Allowed = acc.Allowed && d.Allowed
	if d.Remaining < acc.Remaining || (d.Remaining == acc.Remaining && d.Limit < acc.Limit) {
		acc.Limit, acc.Remaining = d.Limit, d.Remaining
	}
	acc.RetryAfter = max(acc.RetryAfter, d.RetryAfter)
	acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
	acc.Delay = max(acc.Delay, d.Delay)
	return acc
}
