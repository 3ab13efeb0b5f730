package grpclimit

import (
	"context"
	"errors"
	"github.com/floodgate-go/floodgate/middleware"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
)

// adaptiveAcquirer is the small adapter that plugs an adaptive.Gate into
// Shed: a rejection is a shed, a token's end reports success or drop.
func adaptiveAcquirer(l *adaptive.Gate) middleware.Acquirer {
	return middleware.AcquirerFunc(func(ctx context.Context) (func(bool), bool, error) {
		tok, err := l.Acquire(ctx)
		switch {
		case errors.Is(err, adaptive.ErrLimitExceeded):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		return func(ok bool) {
			if ok {
				tok.Success()
			} else {
				tok.Dropped()
			}
		}, true, nil
	})
}

// TestShedderWithAdaptiveLimiter: a concurrency limit of 1 from the adaptive
// package sheds the second concurrent call over a real connection.
func TestShedderWithAdaptiveLimiter(t *testing.T) {
	alg, err := adaptive.NewConstant(1)
	require.NoError(t, err)
	lim, err := adaptive.NewGate(alg)
	require.NoError(t, err)
	obs := &events{}
	hc, ctx, cancel := shedWithWatch(t, adaptiveAcquirer(lim), WithName("adaptive"), WithObserver(obs))

	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	_, ok := RetryDelay(err)
	assert.True(t, ok)

	cancel()
	require.Eventually(t, func() bool {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil
	}, 5*time.Second, time.Millisecond, "the slot comes back when the watch ends")
	// Checks made before the watch's slot was back were shed too.
	assert.GreaterOrEqual(t, obs.count(floodgate.OutcomeShed), 1)
	assert.Equal(t, 2, obs.count(floodgate.OutcomeAllowed))
}
