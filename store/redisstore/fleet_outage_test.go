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
	"github.com/floodgate-go/floodgate/store"
)

// A fleet of 4 nodes, each with Fallback(local, 4), offered 3 times a
// global limit of 200/s (burst 200) on one key: Redis decides, then is
// killed. In every second of the outage the fleet admits between 0.5x and
// 1.1x of the global rate, and no decision returns an error (which a
// FailOpen middleware would turn into an admission).
func TestFleetFallbackHoldsTheLimit(t *testing.T) {
	const (
		nodes   = 4
		rate    = 200                                  // per second, global
		perNode = 3 * rate / nodes                     // offered per node per second
		onRedis = 600 * time.Millisecond               // drains the global burst
		outage  = 2 * time.Second                      // measured
		every   = time.Second / time.Duration(perNode) // one node's pace
	)
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	prefix := uniquePrefix(t)
	alg := tokenBucket(t, floodgate.PerSecond(rate), rate)
	lims := make([]*store.Limiter, nodes)
	for i := range lims {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
		require.NoError(t, err)
		defer c.Close()
		s, err := New(c, WithPrefix(prefix), WithTimeout(time.Second), WithFailurePolicy(Fallback(newLocalStore(), nodes)))
		require.NoError(t, err)
		lims[i], err = store.NewLimiter(s, alg)
		require.NoError(t, err)
	}
	var killedAt atomic.Int64 // Nanotime of the kill, 0 before
	var perSecond [3]atomic.Int64
	var errs, local atomic.Int64
	start := time.Now()
	end := start.Add(onRedis + outage)
	var wg sync.WaitGroup
	for _, l := range lims {
		wg.Go(func() {
			for i := 0; ; i++ {
				at := start.Add(time.Duration(i) * every)
				if at.After(end) {
					return
				}
				time.Sleep(time.Until(at))
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
				if sec := (floodgate.Nanotime() - k) / int64(time.Second); sec < int64(len(perSecond)) {
					perSecond[sec].Add(1)
				}
			}
		})
	}
	time.Sleep(time.Until(start.Add(onRedis)))
	killedAt.Store(floodgate.Nanotime())
	proc.kill()
	wg.Wait()
	secs := int(outage / time.Second)
	got := make([]int64, secs)
	for i := range got {
		got[i] = perSecond[i].Load()
	}
	t.Logf("outage seconds: %v admitted (global rate %d/s, offered %d/s), %d local decisions, %d errors", got, rate, 3*rate, local.Load(), errs.Load())
	require.Zero(t, errs.Load(), "no decision fails at the switch")
	require.Positive(t, local.Load())
	for i, n := range got {
		if n < rate/2 || n > rate*11/10 {
			t.Errorf("outage second %d: %d admitted, want %d..%d", i+1, n, rate/2, rate*11/10)
		}
	}
}
