package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/algo"
)

// A store made with Dial while nothing listens on its port: Dial returns
// within the per-decision timeout; every decision meanwhile is the failure
// policy's, at once, with a cause wrapping ErrStoreUnavailable; Grant and
// Heartbeat fail the same way. Once a redis-server listens on the port,
// decisions are on Redis within 1s, and (nearly) every decision after the
// first one there too. Close closes the client: calls then return ErrClosed, and no
// goroutine is left.
func TestDialWhileRedisDown(t *testing.T) {
	baseline := runtime.NumGoroutine()
	port, err := freePort()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	opt := rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}
	begin := time.Now()
	s, err := Dial(opt, WithPrefix(uniquePrefix(t)), WithFailurePolicy(FailClosed(time.Second)))
	require.NoError(t, err)
	took := time.Since(begin)
	assert.Less(t, took, s.timeout+100*time.Millisecond, "Dial waited")
	plain, err := Dial(opt, WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	alg, err := bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000}.Algorithm()
	require.NoError(t, err)
	_, err = plain.Apply(context.Background(), "k", alg, 1)
	require.ErrorIs(t, err, floodgate.ErrStoreUnavailable)
	require.ErrorIs(t, err, errNotConnected)
	_, err = plain.Grant(context.Background(), "k", alg, algo.Claim{Want: 10, Least: 1})
	require.ErrorIs(t, err, floodgate.ErrStoreUnavailable)
	_, err = plain.Heartbeat(context.Background(), "g", "m", time.Second)
	require.ErrorIs(t, err, floodgate.ErrStoreUnavailable)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	require.NoError(t, err)

	var up atomic.Int64 // ns since begin when the server listens; 0 before
	var first atomic.Int64
	var downCalls, slowDown, wrong, afterBack, onRedis atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Since(begin)
				d, err := l.Take(context.Background(), "k", 1)
				end := time.Since(begin)
				switch {
				case err != nil:
					wrong.Add(1)
				case d.Fallback:
					downCalls.Add(1)
					if d.Allowed || d.RetryAfter != time.Second {
						wrong.Add(1)
					}
					if end-start >= 5*time.Millisecond {
						slowDown.Add(1)
					}
					if f := first.Load(); f != 0 && int64(start) > f {
						afterBack.Add(1)
					}
				case up.Load() != 0:
					first.CompareAndSwap(0, int64(end))
					onRedis.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	proc, err := startRedis(port) // returns once the server accepts connections
	require.NoError(t, err)
	defer proc.stop()
	up.Store(int64(time.Since(begin)))
	deadline := time.Now().Add(2 * time.Second)
	for first.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	wg.Wait()

	t.Logf("Dial returned after %v; %d decisions by the policy before Redis, %d of them 5ms or slower; %d connection attempts",
		took.Round(100*time.Microsecond), downCalls.Load(), slowDown.Load(), s.dial.tries.Load())
	assert.Positive(t, downCalls.Load(), "no decision before Redis")
	assert.Zero(t, wrong.Load(), "errors, or decisions that are not FailClosed's")
	assert.LessOrEqual(t, slowDown.Load(), downCalls.Load()/100, "decisions of the policy that waited")
	if assert.NotZero(t, first.Load(), "never on Redis") {
		back := time.Duration(first.Load() - up.Load())
		t.Logf("on Redis %v after it listened", back.Round(100*time.Microsecond))
		assert.Less(t, back, time.Second)
	}
	// A process starved for a timeout (a loaded machine, -race) is a stall
	// for the store: most, not all, decisions after the first one on Redis
	// are on Redis.
	assert.LessOrEqual(t, afterBack.Load(), onRedis.Load()/10, "decisions of the policy after the first one on Redis")
	// The other store dials on its own back-off.
	require.Eventually(t, func() bool {
		n, err := plain.Heartbeat(context.Background(), "g", "m", time.Second)
		return err == nil && n == 1
	}, 2*time.Second, 5*time.Millisecond, "the other store did not connect")

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = l.Take(context.Background(), "k", 1)
	require.ErrorIs(t, err, floodgate.ErrClosed)
	require.NoError(t, plain.Close())
	requireNoGoroutineLeak(t, baseline)
}

// Dial refuses invalid options at once, and a store dialled while Redis is
// up decides on it from its first call.
func TestDialOptions(t *testing.T) {
	_, err := Dial(rueidis.ClientOption{})
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = Dial(rueidis.ClientOption{InitAddress: []string{singleAddr}, PipelineMultiplex: 99})
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	require.ErrorIs(t, err, rueidis.ErrWrongPipelineMultiplex)
	_, err = Dial(rueidis.ClientOption{InitAddress: []string{singleAddr}}, WithTimeout(-1))
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)

	s, err := Dial(rueidis.ClientOption{InitAddress: []string{singleAddr}, DisableCache: true}, WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	defer s.Close()
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 3})
	require.NoError(t, err)
	d, err := l.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Fallback)
	assert.Equal(t, int64(2), d.Remaining)
}
