package store

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

var _ floodgate.Reserver = (*Limiter)(nil)

// Reserve implements [floodgate.Reserver]: one call of the store with the
// algorithm's reserving twin ([algo.Reservable]), so that a reservation is
// atomic per key like a Take and runs on Redis as one script. maxWait is
// rounded down to whole microseconds. It returns an error wrapping
// [floodgate.ErrCannotReserve] when the algorithm cannot reserve, and the
// cost errors of Take.
func (l *Limiter) Reserve(ctx context.Context, key string, n int, maxWait time.Duration) (floodgate.Decision, error) {
	r, err := l.reservable(n)
	if err != nil {
		return floodgate.Decision{}, err
	}
	return l.store.Apply(ctx, key, r.Reserve(floorMicros(max(maxWait, 0))), int64(n))
}

// CancelReservation implements [floodgate.Reserver]: one call of the store
// with the algorithm's cancelling twin. resetIn is rounded down to whole
// microseconds, so that an error of rounding gives back less, never more.
func (l *Limiter) CancelReservation(ctx context.Context, key string, n int, resetIn time.Duration) error {
	r, err := l.reservable(n)
	if err != nil {
		return err
	}
	_, err = l.store.Apply(ctx, key, r.Cancel(floorMicros(resetIn)), -int64(n))
	return err
}

func (l *Limiter) reservable(n int) (algo.Reservable, error) {
	r, ok := l.alg.(algo.Reservable)
	if !ok {
		return nil, fmt.Errorf("%w: %s", floodgate.ErrCannotReserve, l.describe())
	}
	if n < 1 || int64(n) > l.capacity {
		return nil, l.costError(n)
	}
	return r, nil
}

// floorMicros is d in whole microseconds, rounded down (toward -inf).
func floorMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond < 0 {
		us--
	}
	return us
}
