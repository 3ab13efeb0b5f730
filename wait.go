package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

var errNoRetryAfter = errors.New("floodgate: limiter denied without a RetryAfter")

// Wait blocks until limiter admits n units for key, or returns an error.
//
// When limiter is a [Reserver] whose policy can reserve (the token bucket
// and the leaky bucket of the store package), Wait makes one reservation
// and sleeps until its time: one store call, no polling, and waiters are
// served in the order they reserved (first in, first out), at the policy's
// rate. The wait is as exact as the timers of the Go runtime and the
// store's clock (microseconds, whole milliseconds for the leaky bucket). A
// wait that is abandoned (the context ends while waiting) gives its
// reservation back with [Reserver.CancelReservation]: in full when no one
// reserved after it, not at all otherwise (later waiters keep their times). A request that would queue beyond the
// policy's reservation horizon is refused without charge until it fits,
// then reserves.
//
// Otherwise (a window, or a composition such as [All]) Wait takes from
// limiter, and when denied sleeps for the decision's RetryAfter and tries
// again. A denial consumes nothing, so a wait that is abandoned never
// charges the key; waiters woken together race for the units, in no order.
//
// Wait fails fast: when the admission (or the reservation's time) lies past
// the context's deadline it returns at once, having charged nothing, an
// error wrapping both [ErrWouldExceedDeadline] and
// [context.DeadlineExceeded], instead of sleeping into the deadline, with
// the denial that told it so. When the context is cancelled it returns the
// context's error. An error from the limiter is returned as it is.
//
// The Decision returned on success is the admitting one. After a
// reservation its Delay has been waited and is zero, and its ResetAfter
// counts from Wait's return; otherwise a shaping limiter's Delay (the leaky
// bucket's, through All) is left to the caller.
func Wait(ctx context.Context, limiter Limiter, key string, n int) (Decision, error) {
	var w waiter
	defer w.stop()
	if r, ok := limiter.(Reserver); ok {
		d, err := w.reserve(ctx, r, key, n)
		if !errors.Is(err, ErrCannotReserve) {
			return d, err
		}
	}
	return w.poll(ctx, limiter, key, n)
}

// waiter holds the timer of one Wait, made on first use.
type waiter struct{ timer *time.Timer }

func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// sleep waits for d or the end of ctx. It reports whether d passed; when
// both happen at once, d wins.
func (w *waiter) sleep(ctx context.Context, d time.Duration) bool {
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-w.timer.C:
		return true
	case <-ctx.Done():
		// Stop reports false when the timer has already fired: its time
		// came with the context's end.
		return !w.timer.Stop()
	}
}

// tooLate reports whether a wait of d would end past ctx's deadline.
func tooLate(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < d
}

// reserve is Wait with a Reserver.
func (w *waiter) reserve(ctx context.Context, r Reserver, key string, n int) (Decision, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		start := time.Now()
		maxWait := time.Duration(math.MaxInt64)
		if deadline, ok := ctx.Deadline(); ok {
			maxWait = max(0, deadline.Sub(start))
		}
		d, err := r.Reserve(ctx, key, n, maxWait)
		if err != nil {
			return Decision{}, err
		}
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				return d, errNoRetryAfter
			}
			if tooLate(ctx, d.RetryAfter) {
				return d, fmt.Errorf("%w: next admission in %v", ErrWouldExceedDeadline, d.RetryAfter)
			}
			// Refused only because the queue reaches beyond the policy's
			// horizon: join it when it fits.
			if !w.sleep(ctx, d.RetryAfter) {
				return Decision{}, ctx.Err()
			}
			continue
		}
		if d.Delay <= 0 {
			return d, nil
		}
		giveBack := func(cause error) (Decision, error) {
			resetIn := d.ResetAfter - time.Since(start)
			if err := r.CancelReservation(context.WithoutCancel(ctx), key, n, resetIn); err != nil {
				cause = errors.Join(cause, err)
			}
			return Decision{}, cause
		}
		// The store's clock may have run on during the call: check the
		// reservation's time against the deadline once more.
		if tooLate(ctx, d.Delay) {
			return giveBack(fmt.Errorf("%w: admission in %v", ErrWouldExceedDeadline, d.Delay))
		}
		if !w.sleep(ctx, d.Delay) {
			return giveBack(ctx.Err())
		}
		d.ResetAfter = max(0, d.ResetAfter-d.Delay)
		d.Delay = 0
		return d, nil
	}
}

// poll is Wait with a Limiter that cannot reserve.
func (w *waiter) poll(ctx context.Context, limiter Limiter, key string, n int) (Decision, error) {
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
		if tooLate(ctx, wait) {
			return d, fmt.Errorf("%w: next admission in %v", ErrWouldExceedDeadline, wait)
		}
		if !w.sleep(ctx, wait) {
			return Decision{}, ctx.Err()
		}
	}
}
