package floodgate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counter is a tiny fixed-window limiter for tests: limit units per key per
// window of real (or synctest) time. It records takes and refunds.
type counter struct {
	mu      sync.Mutex
	limit   int64
	window  time.Duration
	start   time.Time
	used    map[string]int64
	takes   int
	refunds int
	err     error
}

func newCounter(limit int64, window time.Duration) *counter {
	return &counter{limit: limit, window: window, start: time.Now(), used: map[string]int64{}}
}

func (c *counter) Take(_ context.Context, key string, n int) (floodgate.Decision, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return floodgate.Decision{}, c.err
	}
	c.takes++
	now := time.Now()
	if now.Sub(c.start) >= c.window {
		c.start = now
		clear(c.used)
	}
	reset := c.window - now.Sub(c.start)
	if c.used[key]+int64(n) > c.limit {
		return floodgate.Decision{Limit: c.limit, Remaining: c.limit - c.used[key], RetryAfter: reset, ResetAfter: reset}, nil
	}
	c.used[key] += int64(n)
	return floodgate.Decision{Allowed: true, Limit: c.limit, Remaining: c.limit - c.used[key], ResetAfter: reset}, nil
}

func (c *counter) Refund(_ context.Context, key string, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refunds++
	c.used[key] = max(0, c.used[key]-int64(n))
	return nil
}

func TestWaitAdmitsAfterRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCounter(2, time.Second)
		ctx := context.Background()
		start := time.Now()
		for i := 0; i < 5; i++ {
			d, err := floodgate.Wait(ctx, c, "k", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed)
		}
		// 2 per second: the 5th unit is admitted in the third window.
		assert.Equal(t, 2*time.Second, time.Since(start))
	})
}

func TestWaitFailsFastBeforeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCounter(1, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := floodgate.Wait(ctx, c, "k", 1)
		require.NoError(t, err)
		start := time.Now()
		d, err := floodgate.Wait(ctx, c, "k", 1)
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, err, floodgate.ErrWouldExceedDeadline)
		assert.False(t, d.Allowed)
		assert.Zero(t, time.Since(start), "must not sleep into the deadline")
		// The abandoned wait charged nothing.
		assert.Equal(t, int64(1), c.used["k"])
	})
}

func TestWaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCounter(1, time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		_, err := floodgate.Wait(ctx, c, "k", 1)
		require.NoError(t, err)
		go func() {
			time.Sleep(10 * time.Second)
			cancel()
		}()
		_, err = floodgate.Wait(ctx, c, "k", 1)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, int64(1), c.used["k"])
	})
}

func TestWaitPropagatesLimiterError(t *testing.T) {
	boom := errors.New("boom")
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{}, boom
	})
	_, err := floodgate.Wait(context.Background(), l, "k", 1)
	assert.ErrorIs(t, err, boom)
}

func TestWaitRejectsDenialWithoutRetryAfter(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: false}, nil
	})
	_, err := floodgate.Wait(context.Background(), l, "k", 1)
	assert.Error(t, err)
}

func TestAllConsumesNothingWhenOneDenies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		perSec := newCounter(10, time.Second)
		perHour := newCounter(3, time.Hour)
		l, err := floodgate.All(perSec, perHour)
		require.NoError(t, err)
		ctx := context.Background()
		for i := 0; i < 3; i++ {
			d, err := l.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.Equal(t, int64(3), d.Limit, "the tighter policy reports")
			assert.Equal(t, int64(2-i), d.Remaining)
		}
		d, err := l.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, time.Hour, d.RetryAfter)
		assert.Equal(t, int64(3), perSec.used["k"], "the per-second budget was refunded")
		assert.Equal(t, 1, perSec.refunds)

		// The other order: the first limiter denies; the second is asked
		// too (its RetryAfter counts), and refunded.
		l2, err := floodgate.All(perHour, perSec)
		require.NoError(t, err)
		d, err = l2.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, time.Hour, d.RetryAfter)
		assert.Equal(t, 5, perSec.takes)
		assert.Equal(t, int64(3), perSec.used["k"])
	})
}

func TestAllErrorRefunds(t *testing.T) {
	a := newCounter(10, time.Second)
	b := newCounter(10, time.Second)
	b.err = floodgate.ErrStoreUnavailable
	l, err := floodgate.All(a, b)
	require.NoError(t, err)
	_, err = l.Take(context.Background(), "k", 2)
	assert.ErrorIs(t, err, floodgate.ErrStoreUnavailable)
	assert.Equal(t, int64(0), a.used["k"])
}

func TestAllRefund(t *testing.T) {
	a := newCounter(10, time.Hour)
	b := newCounter(10, time.Hour)
	l, err := floodgate.All(a, b)
	require.NoError(t, err)
	_, err = l.Take(context.Background(), "k", 4)
	require.NoError(t, err)
	require.NoError(t, l.(floodgate.Refunder).Refund(context.Background(), "k", 4))
	assert.Zero(t, a.used["k"])
	assert.Zero(t, b.used["k"])
}

func TestAllBadInput(t *testing.T) {
	_, err := floodgate.All()
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = floodgate.All(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	noRefund := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true}, nil
	})
	_, err = floodgate.All(newCounter(1, time.Second), noRefund)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

func TestRateValidate(t *testing.T) {
	assert.NoError(t, floodgate.PerSecond(10).Validate())
	assert.ErrorIs(t, floodgate.Rate{N: 0, Per: time.Second}.Validate(), floodgate.ErrInvalidConfig)
	assert.ErrorIs(t, floodgate.Rate{N: 1, Per: 0}.Validate(), floodgate.ErrInvalidConfig)
	assert.ErrorIs(t, floodgate.Rate{N: -1, Per: time.Second}.Validate(), floodgate.ErrInvalidConfig)
	assert.Equal(t, "100/1m0s", floodgate.PerMinute(100).String())
}

func TestOutcomeStrings(t *testing.T) {
	want := map[floodgate.Outcome]string{
		floodgate.OutcomeAllowed: "allowed", floodgate.OutcomeDenied: "denied",
		floodgate.OutcomeWouldDeny: "would_deny", floodgate.OutcomeErrorOpen: "error_open",
		floodgate.OutcomeErrorClosed: "error_closed", floodgate.OutcomeFallback: "fallback",
		floodgate.OutcomeShed: "shed", floodgate.OutcomeDelayed: "delayed",
		floodgate.Outcome(0): "unknown", floodgate.Outcome(200): "unknown",
	}
	for o, s := range want {
		assert.Equal(t, s, o.String())
	}
}

func TestDeadlineErrorUnwraps(t *testing.T) {
	assert.ErrorIs(t, floodgate.ErrWouldExceedDeadline, context.DeadlineExceeded)
}
