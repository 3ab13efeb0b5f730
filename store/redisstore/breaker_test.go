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

// The breaker's states on a manual clock: a call that times out while
// other calls are answered leaves it closed (a slow call on a busy Redis),
// so do error replies and calls whose caller gave up; a timeout with no
// answer from Redis since the call was sent (a stall) opens it, as a
// connection error does; open, every call is refused at once and one probe
// at a time is due after the back-off, which doubles up to maxProbeWait;
// an answer (to the probe or to a call still in flight) closes it.
func TestBreakerStates(t *testing.T) {
	const ms = int64(time.Millisecond)
	now := 1000 * ms
	b := &breaker{clock: func() int64 { return now }}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	mustAdmit := func() int64 {
		t.Helper()
		sent, err := b.admit()
		require.NoError(t, err)
		return sent
	}
	mustRefuse := func() {
		t.Helper()
		_, err := b.admit()
		require.ErrorIs(t, err, errOpen)
	}

	// A busy, healthy Redis: one call times out, others are answered
	// meanwhile.
	b.done(mustAdmit(), nil, false)
	slow := mustAdmit()
	now += 10 * ms
	b.done(mustAdmit(), nil, false) // answered while the slow call waits
	now += 40 * ms
	b.done(slow, context.DeadlineExceeded, false)
	b.done(mustAdmit(), &rueidis.RedisError{}, false) // an error reply is an answer
	mustAdmit()

	// A call that the caller gave up tells nothing, even after a silence.
	quiet := mustAdmit()
	now += 50 * ms
	b.done(quiet, context.DeadlineExceeded, true)
	b.done(quiet, refused, true)
	mustAdmit()

	// A stall: nothing answered since the call was sent.
	stalled := mustAdmit()
	now += 50 * ms
	b.done(stalled, context.DeadlineExceeded, false)
	mustRefuse()
	_, err := b.admit()
	require.ErrorIs(t, err, context.DeadlineExceeded, "refusals carry the failure")
	require.Zero(t, b.probes.Load(), "a probe before the back-off")
	waits := []time.Duration{}
	for range 6 {
		start, probes := now, b.probes.Load()
		for b.probes.Load() == probes {
			mustRefuse()
			now += ms
		}
		waits = append(waits, time.Duration(now-ms-start))
		mustRefuse() // one probe at a time
		require.Equal(t, probes+1, b.probes.Load())
		b.done(stalled, context.DeadlineExceeded, false) // calls in flight time out
		b.probed(context.DeadlineExceeded)
	}
	assert.Equal(t, []time.Duration{5, 10, 20, 40, 50, 50}, func() []time.Duration {
		out := make([]time.Duration, len(waits))
		for i, w := range waits {
			out[i] = w / time.Millisecond
		}
		return out
	}(), "back-off in ms")

	// A late answer to a call in flight closes it.
	b.done(stalled, nil, false)
	mustAdmit()

	// A connection error opens it; a probe answered closes it.
	b.done(mustAdmit(), refused, false)
	mustRefuse()
	_, err = b.admit()
	require.ErrorIs(t, err, refused)
	now += int64(minProbeWait)
	mustRefuse()
	b.probed(refused) // no answer: still open
	mustRefuse()
	now += int64(2 * minProbeWait)
	mustRefuse()
	b.probed(&rueidis.RedisError{}) // an error reply is an answer
	mustAdmit()
}
