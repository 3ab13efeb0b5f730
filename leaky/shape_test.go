package leaky_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
)

// shapeLimiter is a default-mode leaky bucket (every excess request delayed
// 100 ms more than the previous) on a store reading the bubble's clock.
func shapeLimiter(t *testing.T) *store.Limiter {
	t.Helper()
	k, err := leaky.NewKeyed(newMemstore(t, floodgate.ClockFunc(time.Now)), leaky.Config{Rate: floodgate.PerSecond(10), Burst: 5})
	require.NoError(t, err)
	return k
}

// Shape queues like nginx: a burst of 7 leaves at 0, 100, ..., 500 ms, and
// the 7th is rejected at once.
func TestShapeSpacesRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := shapeLimiter(t)
		start := time.Now()
		var (
			mu     sync.Mutex
			served []time.Duration
			denied int
			wg     sync.WaitGroup
		)
		for range 7 {
			wg.Go(func() {
				d, err := leaky.Shape(t.Context(), k, "k", 1)
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				if !d.Allowed {
					denied++
					require.Equal(t, time.Duration(0), time.Since(start))
					return
				}
				served = append(served, time.Since(start))
			})
		}
		wg.Wait()
		slices.Sort(served)
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}
		require.Equal(t, want, served)
		require.Equal(t, 1, denied)
	})
}

// When the delay would end after the deadline, Shape returns at once with
// an error wrapping context.DeadlineExceeded and refunds the request.
func TestShapeRefusesToWaitPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		k := shapeLimiter(t)
		for range 2 { // delays 0 and 100 ms
			_, err := k.Take(ctx, "k", 1)
			require.NoError(t, err)
		}
		before, err := k.Peek(ctx, "k")
		require.NoError(t, err)

		dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := leaky.Shape(dctx, k, "k", 1) // would wait 200 ms
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, floodgate.ErrWouldExceedDeadline)
		require.Equal(t, 200*time.Millisecond, d.Delay)
		require.Zero(t, time.Since(start), "Shape slept before refusing")
		after, err := k.Peek(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, before, after, "the abandoned request was charged")

		// A deadline the delay fits in is waited for.
		dctx, cancel = context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		d, err = leaky.Shape(dctx, k, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, 200*time.Millisecond, time.Since(start))
	})
}

// A context cancelled during the wait ends it and refunds the request.
func TestShapeCancelledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		k := shapeLimiter(t)
		_, err := k.Take(ctx, "k", 1)
		require.NoError(t, err)
		before, err := k.Peek(ctx, "k")
		require.NoError(t, err)

		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(40*time.Millisecond, cancel)
		start := time.Now()
		_, err = leaky.Shape(cctx, k, "k", 1) // would wait 100 ms
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 40*time.Millisecond, time.Since(start))
		after, err := k.Peek(ctx, "k")
		require.NoError(t, err)
		// 40 ms have leaked since "before"; nothing is charged.
		require.Equal(t, before.Remaining, after.Remaining)
		require.Equal(t, before.ResetAfter-40*time.Millisecond, after.ResetAfter)

		_, err = leaky.Shape(cctx, k, "k", 1) // already done: takes nothing
		require.ErrorIs(t, err, context.Canceled)
	})
}

// Shape across several limits (floodgate.All) waits the largest delay; a
// limiter that cannot refund is refused before anything is taken.
func TestShapeAllAndNonRefunder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		a := shapeLimiter(t)
		b, err := leaky.NewKeyed(newMemstore(t, floodgate.ClockFunc(time.Now)), leaky.Config{Rate: floodgate.PerSecond(4), Burst: 5})
		require.NoError(t, err)
		both, err := floodgate.All(a, b)
		require.NoError(t, err)
		start := time.Now()
		for _, want := range []time.Duration{0, 250 * time.Millisecond} {
			d, err := leaky.Shape(ctx, both, "k", 1)
			require.NoError(t, err)
			require.Equal(t, want, d.Delay)
		}
		require.Equal(t, 250*time.Millisecond, time.Since(start))

		taken := 0
		plain := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
			taken++
			return floodgate.Decision{Allowed: true, Limit: 1, Delay: time.Second}, nil
		})
		_, err = leaky.Shape(ctx, plain, "k", 1)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
		require.Zero(t, taken)
	})
}
