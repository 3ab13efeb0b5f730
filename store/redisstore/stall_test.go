package redisstore

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
)

// sample is one decision of a load goroutine: when it started and ended
// (ns since the test's origin), and whether the failure policy made it.
type sample struct {
	start, end int64
	fallback   bool
}

// loadRun runs workers goroutines deciding on l until stop is closed,
// each recording its samples.
type loadRun struct {
	origin time.Time
	wg     sync.WaitGroup
	mu     sync.Mutex
	all    []sample
}

func runLoad(l *store.Limiter, workers int, stop <-chan struct{}) *loadRun {
	r := &loadRun{origin: time.Now()}
	for w := range workers {
		r.wg.Go(func() {
			var mine []sample
			key := "k" + string(rune('a'+w%8))
			for {
				select {
				case <-stop:
					r.mu.Lock()
					r.all = append(r.all, mine...)
					r.mu.Unlock()
					return
				default:
				}
				start := r.since()
				d, err := l.Take(context.Background(), key, 1)
				mine = append(mine, sample{start: start, end: r.since(), fallback: err != nil || d.Fallback})
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	return r
}

func (r *loadRun) since() int64 { return int64(time.Since(r.origin)) }

// between returns the latencies, sorted, of the samples that started in
// [from, to), and how many of them Redis decided.
func (r *loadRun) between(from, to int64) (lat []time.Duration, onRedis int) {
	for _, s := range r.all {
		if s.start >= from && s.start < to {
			lat = append(lat, time.Duration(s.end-s.start))
			if !s.fallback {
				onRedis++
			}
		}
	}
	slices.Sort(lat)
	return lat, onRedis
}

func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[min(len(lat)-1, int(q*float64(len(lat))))]
}

// A stalled Redis (SIGSTOP for 3s: connections stay open, nothing answers)
// under load (32 goroutines) costs the calls in flight their timeout, and
// every call after the stall is detected microseconds: the breaker opens
// on the first timeout with nothing answered since its call was sent, and
// calls then go to the failure policy at once. Over the calls that start
// during the stall the median is below 1ms and the 99th percentile below
// 5ms (plus the scheduler lag seen on a loaded machine); no call that
// starts after the detection goes to Redis (99.9% of them take less than
// half the timeout); one probe at a time is in flight; decisions are on
// Redis again within 1s of SIGCONT (90% of them from then on: a process
// starved for a timeout on a loaded machine is a stall for the store).
func TestRedisStallUnderLoad(t *testing.T) {
	baseline := runtime.NumGoroutine()
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
	require.NoError(t, err)
	s, err := New(c, WithPrefix(uniquePrefix(t)), WithFailurePolicy(FailOpen()))
	require.NoError(t, err)
	var inFlight, maxInFlight atomic.Int64
	probe := s.brk.probe
	s.brk.probe = func() error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		return probe()
	}
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	require.NoError(t, err)
	lag := startLagProbe()
	defer lag.stop()

	stop := make(chan struct{})
	r := runLoad(l, 32, stop)
	time.Sleep(300 * time.Millisecond)
	stopped := r.since()
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGSTOP))
	probes0 := s.brk.probes.Load()
	time.Sleep(3 * time.Second)
	probes := s.brk.probes.Load() - probes0
	resumed := r.since()
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGCONT))
	time.Sleep(time.Second)
	close(stop)
	r.wg.Wait()
	lag.stop()

	before, _ := r.between(0, stopped)
	require.NotEmpty(t, before, "no decision before the stall")
	// The detection: the end of the first decision of the failure policy.
	detected := int64(-1)
	for _, x := range r.all {
		if x.fallback && x.start >= stopped && (detected < 0 || x.end < detected) {
			detected = x.end
		}
	}
	require.GreaterOrEqual(t, detected, stopped, "the stall was never detected")
	stall, _ := r.between(stopped, resumed)
	afterDetection, _ := r.between(detected, resumed)
	p50, p99 := quantile(stall, 0.5), quantile(stall, 0.99)
	maxLag := time.Duration(lag.max.Load())
	t.Logf("stall of 3s: %d decisions, p50 %v, p99 %v, max %v; detected %v after SIGSTOP; after it: %d decisions, p50 %v, p99 %v, max %v; %d probes, at most %d in flight; scheduler lag up to %v",
		len(stall), p50, p99, quantile(stall, 1), time.Duration(detected-stopped).Round(time.Millisecond),
		len(afterDetection), quantile(afterDetection, 0.5), quantile(afterDetection, 0.99), quantile(afterDetection, 1),
		probes, maxInFlight.Load(), maxLag.Round(100*time.Microsecond))
	assert.Less(t, p50, time.Millisecond, "median during the stall")
	assert.Less(t, p99, 5*time.Millisecond+maxLag/4, "99th percentile during the stall")
	assert.Less(t, time.Duration(detected-stopped), s.timeout+100*time.Millisecond+maxLag, "detection")
	// A call that went to Redis during the stall would wait its timeout; a
	// pause of the process (GC, a starved CPU) makes a few calls as slow.
	assert.Less(t, quantile(afterDetection, 0.999), s.timeout/2, "99.9th percentile after the detection")
	assert.LessOrEqual(t, maxInFlight.Load(), int64(1), "probes in flight")
	assert.Positive(t, probes)
	assert.LessOrEqual(t, probes, int64(3*time.Second/maxProbeWait)+5, "probes during the stall")

	// Back on Redis: the first decision of Redis that started after SIGCONT,
	// and none by the policy among the calls that started after it.
	back := int64(-1)
	for _, x := range r.all {
		if !x.fallback && x.start >= resumed && (back < 0 || x.end < back) {
			back = x.end
		}
	}
	if assert.Positive(t, back, "never back on Redis") {
		rec := time.Duration(back - resumed)
		t.Logf("back on Redis %v after SIGCONT", rec.Round(100*time.Microsecond))
		assert.Less(t, rec, time.Second, "back on Redis")
		after, onRedis := r.between(back, r.since())
		t.Logf("%d of the %d decisions after the return on Redis", onRedis, len(after))
		assert.GreaterOrEqual(t, float64(onRedis), 0.9*float64(len(after)), "decisions on Redis after the return")
	}
	c.Close()
	requireNoGoroutineLeak(t, baseline)
}
