package shadow_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func limitLive(t *testing.T) (*shadow.Recorder, *policy.Live, func(n int64)) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rec.Close() })
	mem, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	st, err := rec.Store(mem)
	require.NoError(t, err)
	cfg := func(n int64) policy.Config {
		return policy.Config{Policies: []policy.Policy{{Name: "api", Rate: floodgate.PerSecond(n)}}, DefaultPlan: "api"}
	}
	live, err := policy.NewLive(cfg(10), st)
	require.NoError(t, err)
	_, err = live.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	return rec, live, func(n int64) {
		_, err := live.Update(cfg(n), "test")
		require.NoError(t, err)
	}
}

// The report's current limit follows the running policy through changes
// that are not the tuner's, at once (no decision in between), also back
// to a limit seen before (10 -> 20 -> 10 -> 20).
func TestReportLimitFollowsLive(t *testing.T) {
	rec, live, update := limitLive(t)
	_, err := shadow.NewTuner(live, rec, shadow.TuneConfig{Policy: "api", Floor: 1, Ceiling: 100})
	require.NoError(t, err)
	d, ok := rec.Demand("api")
	require.True(t, ok)
	assert.EqualValues(t, 10, d.Report().Limit)
	for _, n := range []int64{20, 10, 20, 10, 20} {
		update(n)
		rep := d.Report()
		assert.EqualValues(t, n, rep.Limit, "after the change to %d", n)
		assert.EqualValues(t, n, rep.Recommendation.Current)
	}
}

// Recorder.Follow without a tuner: the report follows a change made
// while no decision is recorded.
func TestReportLimitFollowed(t *testing.T) {
	rec, live, update := limitLive(t)
	d, ok := rec.Demand("api")
	require.True(t, ok)
	update(20)
	assert.EqualValues(t, 10, d.Report().Limit, "not followed: the latest decision's")
	rec.Follow(live)
	rec.Follow(live)
	assert.EqualValues(t, 20, d.Report().Limit)
	update(10)
	assert.EqualValues(t, 10, d.Report().Limit)
}
