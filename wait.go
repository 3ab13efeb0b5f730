package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var errNoRetryAfter = errors.New("floodgate: limiter denied without a RetryAfter")

// Wait blocks until limiter admits n units for key, or returns an error.
//
// It takes from limiter, and when denied sleeps for the decision's RetryAfter
// and tries again. A denial consumes nothing, so a wait that is abandoned (the
// context ends, or the deadline is too close) never charges the key.
//
// Wait fails fast: when the next possible admission lies past the context's
// deadline it returns at once an error wrapping both [ErrWouldExceedDeadline]
// and [context.DeadlineExceeded], instead of sleeping into the deadline. When
// the context is cancelled it returns the context's error. An error from the
// limiter is returned as it is.
//
// The Decision returned on success is the admitting one; a shaping limiter's
// Delay is left to the caller.
func Wait(ctx context.Context, limiter Limiter, key string, n int) (Decision, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		d, err := limiter.Take(ctx, key, n)
		if err != nil {
			return Decision{}, err
		}
		if d.Allowed {
			return d, nil
		}
		wait := d.RetryAfter
		if wait <= 0 {
			// A limiter that denies without a retry time breaks the Decision
			// contract; waiting on it would spin.
			return d, errNoRetryAfter
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return d, fmt.Errorf("%w: next admission in %v", ErrWouldExceedDeadline, wait)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		case <-timer.C:
		}
	}
}
