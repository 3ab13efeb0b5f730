package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// slowed divides every rate by nodes, keeps capacities, reports durations in
// real time and keeps W[0] meaning "full from then on" in real time.
func TestSlowedDividesTheRate(t *testing.T) {
	alg := tokenBucket(t, floodgate.PerSecond(100), 10)
	slow := slowed(alg, 4)
	assert.Same(t, alg.(any), slowed(alg, 1).(any), "slowed(alg, 1) is alg")
	assert.NotEqual(t, alg.Spec().Namespace, slow.Spec().Namespace)
	assert.Empty(t, slow.Spec().Lua.Source)

	now := int64(1_700_000_000_000_000)
	var s algo.State
	admitted := 0
	const step = 1000 // µs: a request every millisecond for 10 s
	for i := range 10_000 {
		var d floodgate.Decision
		s, d = slow.Step(s, now+int64(i)*step, 1)
		if d.Allowed {
			admitted++
			continue
		}
		assert.Positive(t, d.RetryAfter)
		assert.LessOrEqual(t, d.RetryAfter, 40*time.Millisecond, "25/s: one token every 40ms")
	}
	// 10 s at 25/s plus the burst of 10.
	assert.InDelta(t, 260, admitted, 1)

	// After 400ms idle (10 tokens at 25/s) the state is full in real time.
	end := now + 10_000*step
	s2, d := slow.Step(s, end+400_000, 0)
	assert.Equal(t, int64(10), d.Remaining)
	assert.LessOrEqual(t, s2.W[0], end+400_000, "a full state must say so in real time")
	s3, d := slow.Step(s, end+200_000, 0)
	assert.Contains(t, []int64{5, 6}, d.Remaining, "200ms at 25/s: 5 tokens (6 with the part of one earned before)")
	assert.Greater(t, s3.W[0], end+200_000)
}

// With Redis gone, a multi-policy group falls back to the local store's
// ApplyAll: all-or-nothing there too.
func TestMultiFallback(t *testing.T) {
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	var outcomes []floodgate.Outcome
	obs := floodgate.ObserverFunc(func(e floodgate.Event) { outcomes = append(outcomes, e.Outcome) })
	local := newLocalStore()
	s := testStore(t, c, WithFailurePolicy(Fallback(local, 2)), WithObserver(obs), WithTimeout(50*time.Millisecond))
	perSec := tokenBucket(t, floodgate.PerSecond(10), 4)
	perHour := tokenBucket(t, floodgate.PerHour(100), 6)
	m := allOf(t, s, perSec, perHour)
	proc.kill()

	ctx := context.Background()
	d, err := m.Take(ctx, "u", 4)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = m.Take(ctx, "u", 1) // the per-second policy denies locally...
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	hd, err := local.Apply(ctx, "u", slowed(perHour, 2), 0) // ...and the hourly one was not charged
	require.NoError(t, err)
	assert.Equal(t, int64(2), hd.Remaining)
	assert.Equal(t, []floodgate.Outcome{floodgate.OutcomeFallback, floodgate.OutcomeFallback}, outcomes)
}
