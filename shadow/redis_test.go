package shadow_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
)

// An enforcing policy set on a real Redis, recorded: the recording counts
// what the Redis script decided, denials included, in one script per
// decision as without it.
func TestRecordingOnRedis(t *testing.T) {
	redis := redistest.Stores(t)(t)
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second})
	require.NoError(t, err)
	defer rec.Close()
	s, err := rec.Store(redis)
	require.NoError(t, err)
	live, err := policy.NewLive(policy.Config{
		Policies:    []policy.Policy{{Name: "per-client", Rate: floodgate.PerSecond(5)}},
		DefaultPlan: "per-client",
	}, s)
	require.NoError(t, err)
	ctx := context.Background()
	denied := 0
	for range 20 {
		d, err := live.Take(ctx, "heavy", 1)
		require.NoError(t, err)
		if !d.Allowed {
			denied++
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		d, err := live.Take(ctx, k, 2)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.GreaterOrEqual(t, denied, 13, "Redis refilled at most a little while the test ran")
	clk.Advance(2 * time.Second)
	dm, ok := rec.Demand("per-client")
	require.True(t, ok)
	rep := dm.Report()
	assert.EqualValues(t, 23, rep.Decisions)
	assert.EqualValues(t, 26, rep.Units)
	assert.EqualValues(t, denied, rep.Refused, "the recording saw every denial")
	require.NotEmpty(t, rep.Top)
	assert.Equal(t, "heavy", rep.Top[0].Key)
	assert.EqualValues(t, denied, rep.Top[0].Refused)
	assert.Equal(t, 20.0, rep.Demand.Max)
	r := rep.Recommendation
	require.True(t, r.OK, r.Reason)
	assert.EqualValues(t, 5, r.Current)
}
