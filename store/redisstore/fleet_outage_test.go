package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
)

// The fleet of TestFleetFallbackHoldsTheLimit.
const (
	fleetNodes   = 4
	fleetRate    = 200                                       // per second, global; the burst too
	fleetPerNode = 3 * fleetRate / fleetNodes                // offered per node per second
	fleetOnRedis = 600 * time.Millisecond                    // drains the global burst
	fleetOutage  = 2 * time.Second                           // measured
	fleetEvery   = time.Second / time.Duration(fleetPerNode) // one node's pace
	// fleetMaxLag is the most a request may start late for a run to
	// measure the limit: a generator that stalls offers nothing meanwhile,
	// and the tokens saved then are spent after it, in another second (one
	// global bucket would do the same).
	fleetMaxLag = 50 * time.Millisecond
)

// fleetRun is what one run measured.
type fleetRun struct {
	perSecond   []int64 // admitted in each second of the outage
	local, errs int64
	maxLag      time.Duration
}

// A fleet of 4 nodes, each with Fallback(local, 4), offered 3 times a
// global limit of 200/s (burst 200) on one key: Redis decides, then is
// killed. In every second of the outage the fleet admits between 0.5x and
// 1.1x of the global rate, and no decision returns an error (which a
// FailOpen middleware would turn into an admission). A run whose load
// generator stalled (a loaded machine) did not offer more than the limit
// in every second: it is run again, up to 3 times.
func TestFleetFallbackHoldsTheLimit(t *testing.T) {
	var r fleetRun
	for attempt := 1; ; attempt++ {
		r = runFleet(t)
		t.Logf("outage seconds: %v admitted (global rate %d/s, offered %d/s), %d local decisions, %d errors, generator %v late at most",
			r.perSecond, fleetRate, 3*fleetRate, r.local, r.errs, r.maxLag.Round(time.Millisecond))
		if r.maxLag <= fleetMaxLag {
			break
		}
		if attempt == 3 {
			t.Skipf("the load generator stalled in 3 runs (%v late): no measurement on this machine now", r.maxLag)
		}
	}
	require.Zero(t, r.errs, "no decision fails at the switch")
	require.Positive(t, r.local)
	for i, n := range r.perSecond {
		if n < fleetRate/2 || n > fleetRate*11/10 {
			t.Errorf("outage second %d: %d admitted, want %d..%d", i+1, n, fleetRate/2, fleetRate*11/10)
		}
	}
}

func runFleet(t *testing.T) fleetRun {
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	prefix := uniquePrefix(t)
	alg := tokenBucket(t, floodgate.PerSecond(fleetRate), fleetRate)
	lims := make([]*store.Limiter, fleetNodes)
	for i := range lims {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
		require.NoError(t, err)
		defer c.Close()
		s, err := New(c, WithPrefix(prefix), WithTimeout(time.Second), WithFailurePolicy(Fallback(newLocalStore(), fleetNodes)))
		require.NoError(t, err)
		lims[i], err = store.NewLimiter(s, alg)
		require.NoError(t, err)
	}
	var killedAt, maxLag atomic.Int64 // Nanotime of the kill (0 before); ns
	perSecond := make([]atomic.Int64, fleetOutage/time.Second)
	var errs, local atomic.Int64
	start := time.Now()
	end := start.Add(fleetOnRedis + fleetOutage)
	var wg sync.WaitGroup
	for _, l := range lims {
		wg.Go(func() {
			for i := 0; ; i++ {
				at := start.Add(time.Duration(i) * fleetEvery)
				if at.After(end) {
					return
				}
				time.Sleep(time.Until(at))
				lag := int64(time.Since(at))
				for old := maxLag.Load(); lag > old && !maxLag.CompareAndSwap(old, lag); old = maxLag.Load() {
				}
				d, err := l.Take(context.Background(), "hot", 1)
				k := killedAt.Load()
				switch {
				case err != nil:
					errs.Add(1)
				case d.Fallback:
					local.Add(1)
				}
				if err != nil || !d.Allowed || k == 0 {
					continue
				}
				if sec := (monotime.Nanotime() - k) / int64(time.Second); sec < int64(len(perSecond)) {
					perSecond[sec].Add(1)
				}
			}
		})
	}
	time.Sleep(time.Until(start.Add(fleetOnRedis)))
	killedAt.Store(monotime.Nanotime())
	proc.kill()
	wg.Wait()
	r := fleetRun{local: local.Load(), errs: errs.Load(), maxLag: time.Duration(maxLag.Load())}
	for i := range perSecond {
		r.perSecond = append(r.perSecond, perSecond[i].Load())
	}
	return r
}
