package floodgate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/window"
)

// countingStore is a memstore on the synctest bubble's clock that counts
// the store calls, to tell a reservation from polling.
type countingStore struct {
	*memstore.Store
	calls atomic.Int64
}

func newCountingStore(t *testing.T) *countingStore {
	t.Helper()
	m, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(time.Now)), memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return &countingStore{Store: m}
}

func (s *countingStore) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	s.calls.Add(1)
	return s.Store.Apply(ctx, key, alg, n)
}

func (s *countingStore) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	s.calls.Add(1)
	return s.Store.ApplyAll(ctx, ops, out, commit)
}

// tenPerSecond is a token bucket of burst 1 refilling every 100 ms.
func tenPerSecond(t *testing.T, s store.Store) *store.Limiter {
	t.Helper()
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 1})
	require.NoError(t, err)
	return l
}

// drainedTenPerSecond is tenPerSecond with key "k" drained, the key's state
// then (a peek) and the store, its count of calls reset.
func drainedTenPerSecond(t *testing.T) (*countingStore, *store.Limiter, floodgate.Decision) {
	t.Helper()
	s := newCountingStore(t)
	lim := tenPerSecond(t, s)
	_, err := lim.Take(t.Context(), "k", 1)
	require.NoError(t, err)
	before, err := lim.Peek(t.Context(), "k")
	require.NoError(t, err)
	s.calls.Store(0)
	return s, lim, before
}

// waitAll starts one Wait per cost, one after the other (each has made its
// store call before the next arrives), and returns the order in which they
// returned and when (since start).
func waitAll(t *testing.T, lim floodgate.Limiter, costs []int) ([]int, []time.Duration) {
	t.Helper()
	start := time.Now()
	var (
		mu    sync.Mutex
		order []int
		at    = make([]time.Duration, len(costs))
		wg    sync.WaitGroup
	)
	for i, n := range costs {
		wg.Go(func() {
			d, err := floodgate.Wait(t.Context(), lim, "k", n)
			assert.NoError(t, err)
			assert.True(t, d.Allowed)
			assert.Zero(t, d.Delay, "Wait returns once the delay is waited")
			mu.Lock()
			defer mu.Unlock()
			order = append(order, i)
			at[i] = time.Since(start)
		})
		synctest.Wait()
	}
	wg.Wait()
	return order, at
}

// N concurrent waiters on a token bucket are served in the order they
// arrived, one interval apart, with one store call each: a reservation, no
// polling. A cheap request that arrives behind an expensive one waits its
// turn (polling would let it pass first).
func TestWaitReservesFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCountingStore(t)
		lim := tenPerSecond(t, s)
		const n = 8
		order, at := waitAll(t, lim, []int{1, 1, 1, 1, 1, 1, 1, 1})
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order)
		for i := range n {
			require.Equal(t, time.Duration(i)*100*time.Millisecond, at[i], "waiter %d", i)
		}
		require.EqualValues(t, n, s.calls.Load(), "one store call per Wait")

		b, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 3})
		require.NoError(t, err)
		_, err = b.Take(t.Context(), "k", 3) // drained
		require.NoError(t, err)
		order, at = waitAll(t, b, []int{3, 1})
		require.Equal(t, []int{0, 1}, order)
		require.Equal(t, []time.Duration{300 * time.Millisecond, 400 * time.Millisecond}, at)
	})
}

// On a leaky bucket in nginx's default mode, Wait also waits the shaping
// Delay: ten concurrent waiters leave 100 ms apart, in order, none
// rejected (the last four queue past the burst of 5).
func TestWaitLeakyQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCountingStore(t)
		lim, err := leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerSecond(10), Burst: 5})
		require.NoError(t, err)
		costs := make([]int, 10)
		for i := range costs {
			costs[i] = 1
		}
		order, at := waitAll(t, lim, costs)
		for i := range costs {
			require.Equal(t, i, order[i])
			require.Equal(t, time.Duration(i)*100*time.Millisecond, at[i], "waiter %d", i)
		}
		require.EqualValues(t, 10, s.calls.Load())
	})
}

// A waiter whose context ends gives its reservation back: the last of the
// queue in full (the next newcomer takes its slot), one in the middle only
// what nobody is scheduled on (here nothing: the waiter behind it keeps its
// time, and the newcomer queues after it).
func TestWaitCancelGivesTheReservationBack(t *testing.T) {
	t.Run("last", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, lim, before := drainedTenPerSecond(t)
			ctx := t.Context()

			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(40*time.Millisecond, cancel)
			start := time.Now()
			d, err := floodgate.Wait(cctx, lim, "k", 1) // would wait 100 ms
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, floodgate.Decision{}, d)
			require.Equal(t, 40*time.Millisecond, time.Since(start))
			require.EqualValues(t, 2, s.calls.Load(), "a reservation and its cancellation")

			after, err := lim.Peek(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, before.Remaining, after.Remaining)
			require.Equal(t, before.ResetAfter-40*time.Millisecond, after.ResetAfter, "the reservation was not given back")
			d, err = floodgate.Wait(ctx, lim, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, 100*time.Millisecond, time.Since(start))
		})
	})
	t.Run("middle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := tenPerSecond(t, newCountingStore(t))
			ctx := t.Context()
			_, err := lim.Take(ctx, "k", 1)
			require.NoError(t, err)
			start := time.Now()
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var second time.Duration
			wg.Go(func() { // first in the queue: 100 ms; abandoned at 50 ms
				_, err := floodgate.Wait(cctx, lim, "k", 1)
				assert.ErrorIs(t, err, context.Canceled)
			})
			synctest.Wait()
			wg.Go(func() { // second: 200 ms, kept
				_, err := floodgate.Wait(ctx, lim, "k", 1)
				assert.NoError(t, err)
				second = time.Since(start)
			})
			synctest.Wait()
			time.Sleep(50 * time.Millisecond)
			cancel()
			synctest.Wait()
			_, err = floodgate.Wait(ctx, lim, "k", 1) // newcomer at 50 ms
			require.NoError(t, err)
			wg.Wait()
			require.Equal(t, 200*time.Millisecond, second, "the waiter behind kept its time")
			require.Equal(t, 300*time.Millisecond, time.Since(start), "the newcomer queued after it")
		})
	})
}

// Wait fails fast: when the reservation would end past the deadline it
// returns at once, charges nothing, and makes one store call. A deadline
// the wait fits in (exactly, too) is waited for.
func TestWaitReserveDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, lim, before := drainedTenPerSecond(t)
		ctx := t.Context()

		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := floodgate.Wait(dctx, lim, "k", 1)
		require.ErrorIs(t, err, floodgate.ErrWouldExceedDeadline)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, d.Allowed)
		require.Equal(t, 100*time.Millisecond, d.RetryAfter, "the wait it would have had")
		require.Zero(t, time.Since(start), "Wait slept before refusing")
		require.EqualValues(t, 1, s.calls.Load())
		after, err := lim.Peek(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, before, after, "the refused wait was charged")

		dctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		d, err = floodgate.Wait(dctx, lim, "k", 1)
		require.NoError(t, err, "a wait that ends with the deadline")
		require.True(t, d.Allowed)
		require.Equal(t, 100*time.Millisecond, time.Since(start))
	})
}

// A request that would queue beyond the reservation horizon (15 minutes
// for a bucket of 1 per second) is refused without charge until it fits,
// then reserves: two store calls. With a deadline before its time it fails
// at once.
func TestWaitBeyondTheHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCountingStore(t)
		lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 1})
		require.NoError(t, err)
		ctx := t.Context()
		for range 901 { // 0s .. 900s: the queue reaches the horizon
			d, err := lim.Reserve(ctx, "k", 1, time.Hour)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 800*time.Second)
		defer cancel()
		_, err = floodgate.Wait(dctx, lim, "k", 1)
		require.ErrorIs(t, err, floodgate.ErrWouldExceedDeadline)
		require.Zero(t, time.Since(start))

		s.calls.Store(0)
		d, err := floodgate.Wait(ctx, lim, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, 901*time.Second, time.Since(start))
		require.EqualValues(t, 2, s.calls.Load())
	})
}

// Policies that cannot reserve (windows) say so, and Wait falls back to
// taking and sleeping.
func TestWaitFallsBackWhenThePolicyCannotReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newCountingStore(t)
		lim, err := window.NewFixed(s, window.Config{Limit: 2, Window: time.Second})
		require.NoError(t, err)
		ctx := t.Context()
		_, err = lim.Reserve(ctx, "k", 1, time.Second)
		require.ErrorIs(t, err, floodgate.ErrCannotReserve)
		require.ErrorIs(t, lim.CancelReservation(ctx, "k", 1, 0), floodgate.ErrCannotReserve)
		start := time.Now()
		for range 3 {
			d, err := floodgate.Wait(ctx, lim, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		require.Equal(t, time.Second-time.Duration(start.UnixNano()%int64(time.Second)), time.Since(start))
		require.EqualValues(t, 4, s.calls.Load(), "three takes and one retry")
	})
}

// Reserve checks the cost like Take, and passes the store's errors on.
func TestReserveErrors(t *testing.T) {
	lim := tenPerSecond(t, newCountingStore(t))
	ctx := context.Background()
	for _, n := range []int{0, -1, 2} {
		_, err := lim.Reserve(ctx, "k", n, time.Second)
		require.ErrorIs(t, err, floodgate.ErrInvalidCost, "n=%d", n)
		require.ErrorIs(t, lim.CancelReservation(ctx, "k", n, 0), floodgate.ErrInvalidCost, "n=%d", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := lim.Reserve(cctx, "k", 1, time.Second)
	require.ErrorIs(t, err, context.Canceled)
	_, err = floodgate.Wait(cctx, lim, "k", 1)
	require.ErrorIs(t, err, context.Canceled)
	d, err := lim.Reserve(ctx, "k", 1, -time.Second) // a negative maxWait is no wait
	require.NoError(t, err)
	require.True(t, d.Allowed)
}
