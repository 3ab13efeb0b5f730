package leaky

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Shape is nginx's queueing for callers who want it: it takes n from limiter
// for key and, when the request is admitted with a Delay, waits that long
// before returning, so that requests leave at the limiter's rate. It is the
// only place in this package that sleeps.
//
// A denial is returned as a Decision with a nil error, at once (nginx rejects,
// it does not queue beyond the burst). Shape never sleeps past the context's
// deadline: when the Delay would end after it, Shape refunds the request and
// returns at once an error wrapping [floodgate.ErrWouldExceedDeadline] and
// [context.DeadlineExceeded]; when the context ends during the wait, it
// refunds and returns the context's error. Either way the abandoned request is
// not charged. limiter must implement [floodgate.Refunder] (the limiter
// [NewKeyed] returns and [floodgate.All] of them do); otherwise Shape returns an error wrapping
// [floodgate.ErrInvalidConfig] without taking anything.
//
// On success the returned Decision is the admitting one, its Delay already
// waited. With an error from an abandoned wait, it is the admitting decision
// whose units were given back (for logging); with any other error it is the
// zero value.
func Shape(ctx context.Context, limiter floodgate.Limiter, key string, n int) (floodgate.Decision, error) {
	refunder, ok := limiter.(floodgate.Refunder)
	if !ok {
		return floodgate.Decision{}, fmt.Errorf("%w: Shape needs a limiter that can refund, got %T", floodgate.ErrInvalidConfig, limiter)
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	d, err := limiter.Take(ctx, key, n)
	if err != nil || !d.Allowed || d.Delay <= 0 {
		return d, err
	}
	abandon := func(cause error) (floodgate.Decision, error) {
		if rerr := refunder.Refund(context.WithoutCancel(ctx), key, n); rerr != nil {
			cause = errors.Join(cause, rerr)
		}
		return d, cause
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.Delay {
		return abandon(fmt.Errorf("%w: delay %v", floodgate.ErrWouldExceedDeadline, d.Delay))
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return abandon(ctx.Err())
	case <-t.C:
		return d, nil
	}
}
