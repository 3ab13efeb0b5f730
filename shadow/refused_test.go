package shadow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// shipperLive is a Live on a recording memstore with one policy, "ship":
// 50 units a second, a burst of 10, enforcing unless dry.
func shipperLive(t *testing.T, clk *fakeClock, dry bool) (*shadow.Recorder, *policy.Live) {
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rec.Close() })
	mem, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	st, err := rec.Store(mem)
	require.NoError(t, err)
	live, err := policy.NewLive(shipperConfig(dry), st)
	require.NoError(t, err)
	return rec, live
}

func shipperConfig(dry bool) policy.Config {
	return policy.Config{Policies: []policy.Policy{{Name: "ship", Rate: floodgate.PerSecond(50), Burst: 10, DryRun: dry}}, DefaultPlan: "ship"}
}

// A log shipper with one key offers 50 records a second, in a batch at
// the start of each second, through a policy enforcing 50/s with a burst
// of 10, and retries every refused record a millisecond later: it is
// refused about 800 times a second. Those retries are not demand: the
// recommendation stays near 50/s (p95 of the admitted 50 + 40%), not the
// ~1,200 that the offered units would give.
func TestLogShipperRetriesAreNotDemand(t *testing.T) {
	clk := newFakeClock()
	rec, live := shipperLive(t, clk, false)
	rec.Follow(live)
	ctx := context.Background()
	base := clk.Now().UnixNano()
	queue := 0
	for ms := range 20_000 {
		clk.Set(base + int64(ms)*int64(time.Millisecond))
		if ms%1000 == 0 {
			queue += 50
		}
		for queue > 0 {
			dec, err := live.Take(ctx, "shipper", 1)
			require.NoError(t, err)
			if !dec.Allowed {
				break // retried at the next millisecond
			}
			queue--
		}
	}
	require.Zero(t, queue, "the shipper keeps up at 50/s")
	d, ok := rec.Demand("ship")
	require.True(t, ok)
	rep := d.ReportAt(base + int64(20*time.Second))
	r := rep.Recommendation
	require.True(t, r.OK, r.Reason)
	t.Logf("%s", r)
	assert.Greater(t, rep.Demand.P95, 600.0, "offered: the retries")
	assert.InDelta(t, 50, r.Basis, 2.5, "the admitted demand")
	assert.LessOrEqual(t, r.Limit, int64(72))
	assert.Equal(t, "admitted", r.From)
	assert.LessOrEqual(t, r.Burst, r.Limit, "the offered bursts are retries too")
	assert.InDelta(t, 50, rep.Admitted.P95, 2.5)
	assert.EqualValues(t, 1000, rep.Units-rep.RefusedUnits, "admitted: 50 a second")
	assert.Greater(t, rep.RefusedUnits, 10*(rep.Units-rep.RefusedUnits))
	assert.True(t, r.FewKeys, "one key")
	require.Len(t, rep.Notes, 2)
	assert.Contains(t, rep.Notes[0], "1 key(s), fewer than the 20 that a p95 across keys needs")
	assert.Contains(t, rep.Notes[1], "refusals dominate")
	assert.Contains(t, rep.Notes[1], "admitted demand")
}

// In dry run nobody is refused and nothing is retried: a policy whose
// would-be refusals dominate keeps the offered demand as its basis, until
// it enforces (read from the followed Live at each report). Without
// Follow it is taken as enforcing.
func TestRefusalsDominateDryRunOrNot(t *testing.T) {
	clk := newFakeClock()
	rec, live := shipperLive(t, clk, true)
	d, err := rec.Track("ship", time.Second, 50)
	require.NoError(t, err)
	base := clk.Now().UnixNano()
	for w := range 5 {
		for i := range 100 {
			d.ObserveAt(base+int64(w)*int64(time.Second)+int64(i), "k", 1, i >= 40)
		}
	}
	at := base + 5*int64(time.Second)
	rep := d.ReportAt(at)
	assert.EqualValues(t, 500, rep.Units)
	assert.EqualValues(t, 300, rep.RefusedUnits)
	assert.EqualValues(t, 300, rep.Refused)
	assert.Equal(t, 100.0, rep.Demand.P95)
	assert.Equal(t, 40.0, rep.Admitted.P95)
	r := rep.Recommendation
	assert.Equal(t, "admitted", r.From, "not followed: taken as enforcing")
	assert.Equal(t, 40.0, r.Basis)
	assert.Contains(t, rep.Notes[len(rep.Notes)-1], "Recorder.Follow")

	rec.Follow(live)
	rep = d.ReportAt(at)
	assert.Equal(t, "offered", rep.Recommendation.From, "dry run")
	assert.Equal(t, 100.0, rep.Recommendation.Basis)
	assert.EqualValues(t, 140, rep.Recommendation.Limit)
	assert.Contains(t, rep.Notes[len(rep.Notes)-1], "dry run")

	_, err = live.Update(shipperConfig(false), "test")
	require.NoError(t, err)
	rep = d.ReportAt(at)
	assert.Equal(t, "admitted", rep.Recommendation.From, "enforcing")
	assert.EqualValues(t, 56, rep.Recommendation.Limit, "40 x 1.4")
	assert.Contains(t, rep.Notes[len(rep.Notes)-1], "retried refusals")
}

// A policy with fewer keys than 1/(1-Quantile) is flagged: one key, 10
// keys at p95; 40 keys are enough at p95 and not at p99. (The number of
// keys is estimated: the figures stay clear of the bounds.)
func TestFewKeysFlagged(t *testing.T) {
	for _, c := range []struct {
		keys     int
		quantile float64
		few      bool
	}{{1, 0.95, true}, {10, 0.95, true}, {40, 0.95, false}, {40, 0.99, true}, {200, 0.99, false}} {
		clk := newFakeClock()
		rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second, Quantile: c.quantile})
		require.NoError(t, err)
		d, err := rec.Track("budget", time.Second, 1000)
		require.NoError(t, err)
		for k := range c.keys {
			d.Observe(fmt.Sprint("service-", k), 10, false)
		}
		clk.Advance(time.Second)
		rep := d.Report()
		rec.Close()
		require.True(t, rep.Recommendation.OK)
		assert.Equal(t, c.few, rep.Recommendation.FewKeys, "%d keys at q %v", c.keys, c.quantile)
		if c.few {
			require.Len(t, rep.Notes, 1)
			assert.Contains(t, rep.Notes[0], fmt.Sprintf("%.0f key(s), fewer than", rep.Keys))
			assert.Contains(t, rep.Recommendation.String(), "too few for a distribution")
		} else {
			assert.Empty(t, rep.Notes)
		}
	}
}

// Refused units counted on sampled keys from several goroutines at once:
// each key's admitted units in its window are exact.
func TestConcurrentRefusedCounts(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	base := (clk.Now().UnixNano()/int64(time.Second) + 1) * int64(time.Second)
	const workers, per = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// One key; every third decision (of 2 units) is refused;
				// the sub-window changes as i grows, so both the
				// lock-free adds and the locked ones count.
				d.ObserveAt(base+int64(i)*int64(time.Second)/per, "k", 2, (w+i)%3 == 0)
			}
		}()
	}
	wg.Wait()
	rep := d.ReportAt(base + int64(time.Second))
	refused := 0
	for w := range workers {
		for i := range per {
			if (w+i)%3 == 0 {
				refused += 2
			}
		}
	}
	assert.EqualValues(t, refused, rep.RefusedUnits)
	assert.Equal(t, float64(2*workers*per), rep.Demand.Max)
	assert.Equal(t, float64(2*workers*per-refused), rep.Admitted.Max)
}
