package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
)

// countingClient is a client to addr whose every connection attempt is
// counted in dials.
func countingClient(t *testing.T, addr string, dials *atomic.Int64) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableCache: true,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, "tcp", dst)
		},
	})
	require.NoError(t, err)
	return c
}

// While Redis is down, the store does not dial on every decision: one probe
// at a time, with back-off, at most about 20 connection attempts per second
// whatever the load (32 goroutines here); decisions meanwhile go straight to
// the failure policy. Once Redis answers again, decisions are served by it
// within 100ms.
func TestDialsBoundedWhileRedisDown(t *testing.T) {
	baseline := runtime.NumGoroutine()
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	var dials atomic.Int64
	c := countingClient(t, proc.addr, &dials)
	s, err := New(c, WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	require.NoError(t, err)
	lag := startLagProbe()
	defer lag.stop()

	var served, failed, wrong atomic.Int64
	var up atomic.Int64        // time (ns) Redis answered again, 0 before
	var recovered atomic.Int64 // time (ns) of the first decision served by Redis after up
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := l.Take(context.Background(), "k", 1)
				switch {
				case err == nil:
					served.Add(1)
					if u := up.Load(); u != 0 {
						recovered.CompareAndSwap(0, time.Now().UnixNano())
					}
				case errorIsUnavailable(err):
					failed.Add(1)
				default:
					wrong.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	require.Positive(t, served.Load(), "no decision from Redis before the kill")

	proc.kill()
	time.Sleep(100 * time.Millisecond) // the calls in flight fail
	d0, f0 := dials.Load(), failed.Load()
	const down = time.Second
	time.Sleep(down)
	outage := dials.Load() - d0
	decided := failed.Load() - f0

	require.NoError(t, proc.restart()) // returns once the server accepts connections
	up.Store(time.Now().UnixNano())
	time.Sleep(300 * time.Millisecond)
	stop()
	wg.Wait()
	lag.stop()

	perSec := float64(outage) / down.Seconds()
	t.Logf("Redis down %v: %d connection attempts (%.1f/s) for %d decisions", down, outage, perSec, decided)
	assert.Positive(t, decided, "no decision while Redis was down")
	assert.LessOrEqual(t, perSec, 25.0, "connection attempts per second while Redis is down")
	assert.Zero(t, wrong.Load(), "errors that do not wrap ErrStoreUnavailable")
	if rec := recovered.Load(); assert.NotZero(t, rec, "never served by Redis again") {
		back := time.Duration(rec - up.Load())
		maxLag := time.Duration(lag.max.Load())
		t.Logf("served by Redis again %v after it answered (scheduler lag up to %v)", back.Round(100*time.Microsecond), maxLag.Round(100*time.Microsecond))
		assert.LessOrEqual(t, back, 250*time.Millisecond+maxLag, "recovery after Redis answered (a probe back-off of at most 50 ms, a probe timeout of 50 ms, and a loaded machine)")
	}
	c.Close()
	requireNoGoroutineLeak(t, baseline)
}

func errorIsUnavailable(err error) bool { return errors.Is(err, floodgate.ErrStoreUnavailable) }

// The breaker's states on a manual clock: a connection error opens it, one
// probe at a time goes after the back-off, which doubles up to maxProbeWait;
// an answer from Redis (a result or an error reply) closes it; timeouts and
// answers do not open it; a probe whose caller gave up leaves the back-off
// as it was.
func TestBreakerStates(t *testing.T) {
	var now int64
	b := &breaker{clock: func() int64 { return now }}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	mustAdmit := func(wantProbe bool) {
		t.Helper()
		probe, err := b.admit()
		require.NoError(t, err)
		require.Equal(t, wantProbe, probe)
	}
	mustRefuse := func() {
		t.Helper()
		_, err := b.admit()
		require.ErrorIs(t, err, errOpen)
	}

	mustAdmit(false)
	b.done(false, context.DeadlineExceeded, false)
	b.done(false, &rueidis.RedisError{}, false)
	b.done(false, refused, true) // the caller cancelled: nothing learnt
	mustAdmit(false)

	b.done(false, refused, false)
	mustRefuse()
	_, err := b.admit()
	require.ErrorIs(t, err, refused, "refusals carry the connection error")
	waits := []time.Duration{}
	for range 6 {
		start := now
		for {
			probe, err := b.admit()
			if err == nil {
				require.True(t, probe)
				break
			}
			now += int64(time.Millisecond)
		}
		waits = append(waits, time.Duration(now-start))
		mustRefuse() // one probe at a time
		b.done(false, refused, false)
		b.done(true, refused, false)
	}
	assert.Equal(t, []time.Duration{5, 10, 20, 40, 50, 50}, func() []time.Duration {
		ms := make([]time.Duration, len(waits))
		for i, w := range waits {
			ms[i] = w / time.Millisecond
		}
		return ms
	}(), "back-off in ms")

	now += int64(maxProbeWait)
	mustAdmit(true)
	b.done(true, context.Canceled, true) // the probe's caller gave up
	mustAdmit(true)
	b.done(true, context.DeadlineExceeded, false) // no answer: still open
	mustRefuse()
	now += int64(maxProbeWait)
	mustAdmit(true)
	b.done(true, &rueidis.RedisError{}, false) // an error reply is an answer
	mustAdmit(false)
	mustAdmit(false)
}
