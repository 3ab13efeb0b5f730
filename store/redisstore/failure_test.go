package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// run steps alg with one request every step µs for d µs from now and
// returns how many it admitted.
func run(alg algo.Algorithm, s *algo.State, now, step, d int64) int {
	admitted := 0
	for t := now; t < now+d; t += step {
		var dec floodgate.Decision
		*s, dec = alg.Step(*s, t, 1)
		if dec.Allowed {
			admitted++
		}
	}
	return admitted
}

// divided divides the rate and the burst by nodes, starts drained, reports
// durations in real time and keeps W[0] meaning "full from then on" in
// real time.
func TestDividedDividesRateAndBurst(t *testing.T) {
	alg := tokenBucket(t, floodgate.PerSecond(100), 40)
	div := divided(alg, 4)
	assert.NotEqual(t, alg.Spec().Namespace, div.Spec().Namespace)
	assert.Empty(t, div.Spec().Lua.Source)
	assert.Equal(t, int64(10), div.Spec().Capacity)

	now := int64(1_700_000_000_000_000)
	var s algo.State
	s2, d := div.Step(s, now, 1)
	assert.False(t, d.Allowed, "drained at the switch: no burst")
	assert.Equal(t, int64(10), d.Limit, "a quarter of the burst")
	assert.InDelta(t, 40*time.Millisecond, d.RetryAfter, float64(time.Millisecond), "25/s: one token every 40ms")
	s = s2
	// A request every millisecond for 10 s: 25/s, no burst.
	assert.InDelta(t, 250, run(div, &s, now+1000, 1000, 10_000_000), 1)

	// After 400ms idle (10 tokens at 25/s) the state is full in real time.
	end := now + 10_001_000
	s3, d := div.Step(s, end+400_000, 0)
	assert.Equal(t, int64(10), d.Remaining)
	assert.LessOrEqual(t, s3.W[0], end+400_000, "a full state must say so in real time")
	_, d = div.Step(s, end+200_000, 0)
	assert.Contains(t, []int64{4, 5}, d.Remaining, "200ms at 25/s: 5 tokens")

	// A key first seen a local time-to-full after the switch is full.
	_, d = div.Step(algo.State{}, end+300_000, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(9), d.Remaining)

	// A request costing more than a node's share needs the whole share.
	s4, d := div.Step(s3, end+400_000, 11)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(0), d.Remaining)
	_, d = div.Step(s4, end+400_000+40_000*10-1, 11)
	assert.False(t, d.Allowed, "not full yet")

	// After more than a local time-to-full without any local step, the
	// next one is a new switch: fresh keys start drained again.
	_, d = div.Step(algo.State{}, end+5_000_000, 1)
	assert.False(t, d.Allowed)
}

// A burst smaller than the node count: one request per node, the clock
// slowed by nodes/burst so that the rate is still divided by nodes.
func TestDividedSmallBurst(t *testing.T) {
	div := divided(tokenBucket(t, floodgate.PerSecond(100), 2), 4)
	assert.Equal(t, int64(1), div.Spec().Capacity)
	now := int64(1_700_000_000_000_000)
	var s algo.State
	assert.InDelta(t, 250, run(div, &s, now, 1000, 10_000_000), 1)
	// One node's state: one request every 40ms, never two at once.
	s2, d := div.Step(s, now+10_500_000, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.Limit)
	_, d = div.Step(s2, now+10_500_000, 1)
	assert.False(t, d.Allowed)
	assert.InDelta(t, 40*time.Millisecond, d.RetryAfter, float64(time.Millisecond))
}

// The windows: the limit per window divided by nodes; in the window of the
// switch, what is left of it at an even pace.
func TestDividedWindows(t *testing.T) {
	cfg := window.Config{Limit: 60, Window: time.Minute}
	algs := map[string]func() (algo.Algorithm, error){
		"fixed": cfg.FixedAlgorithm, "sliding-log": cfg.SlidingLogAlgorithm, "sliding-counter": cfg.SlidingCounterAlgorithm,
	}
	for name, mk := range algs {
		t.Run(name, func(t *testing.T) {
			w, err := mk()
			require.NoError(t, err)
			div := divided(w, 4)
			now := int64(1_699_999_980_000_000 + 30_000_000) // the middle of a minute
			var s algo.State
			rest := run(div, &s, now, 10_000, 30_000_000)
			next := run(div, &s, now+30_000_000, 10_000, 60_000_000)
			after := run(div, &s, now+90_000_000, 10_000, 60_000_000)
			t.Logf("%s: %d in the rest of the switch's window, %d and %d in the next two", name, rest, next, after)
			assert.InDelta(t, 7, rest, 1, "half the window left: half of 15")
			assert.LessOrEqual(t, next, 15, "a quarter of 60 per minute")
			assert.InDelta(t, 15, after, 1, "the sliding counter's estimate may round down")
		})
	}
}

// With Redis gone, a multi-policy group falls back to the local store's
// ApplyAll: all-or-nothing there too, every decision marked Fallback.
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
	perSec := tokenBucket(t, floodgate.PerSecond(10), 4) // 5/s, burst 2 locally
	perHour := tokenBucket(t, floodgate.PerHour(100), 6) // 50/h, burst 3 locally
	m := allOf(t, s, perSec, perHour)
	alone, err := store.NewLimiter(s, perSec)
	require.NoError(t, err)
	proc.kill()

	ctx := context.Background()
	d, err := m.Take(ctx, "u", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "drained at the switch")
	assert.True(t, d.Fallback)
	time.Sleep(250 * time.Millisecond) // a local per-second token, no hourly one
	d, err = m.Take(ctx, "u", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the hourly policy denies locally...")
	assert.True(t, d.Fallback)
	d, err = alone.Take(ctx, "u", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "...and the per-second one was not charged")
	assert.Equal(t, int64(2), d.Limit)
	assert.Equal(t, []floodgate.Outcome{floodgate.OutcomeFallback, floodgate.OutcomeFallback, floodgate.OutcomeFallback}, outcomes)
}

// The leaky bucket (refusing, nginx's nodelay): a quarter of the rate and
// of the capacity (burst + 1) on each of 4 nodes, drained at the switch.
func TestDividedLeakyBucket(t *testing.T) {
	alg, err := leaky.Config{Rate: floodgate.PerSecond(100), Burst: 39, NoDelay: true}.Algorithm()
	require.NoError(t, err)
	div := divided(alg, 4)
	assert.Equal(t, int64(10), div.Spec().Capacity)
	now := int64(1_700_000_000_000_000)
	var s algo.State
	s2, d := div.Step(s, now, 1)
	assert.False(t, d.Allowed, "drained at the switch")
	s = s2
	assert.InDelta(t, 250, run(div, &s, now+1000, 1000, 10_000_000), 2, "25/s, no burst")
	// Idle until empty (not long enough for a new switch): a quarter of the
	// capacity at once, then no more.
	assert.Equal(t, 10, run(div, &s, now+10_500_000, 1, 20))
}

// Two outages close together: the local bucket drained in the first one
// regains tokens while Redis decides again; when Redis goes away a second
// time (within a second of the last local decision, and before that bucket
// is full), the breaker's opening is a switch of its own and the bucket
// starts drained again: the node does not spend the tokens it regained
// while Redis was deciding (CI saw 1.36x the global rate in the first
// second of an outage that followed a blip).
func TestFallbackSwitchesAtEachOutage(t *testing.T) {
	proc, err := startRedis(0)
	require.NoError(t, err)
	defer proc.stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proc.addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	s := testStore(t, c, WithFailurePolicy(Fallback(newLocalStore(), 4)), WithTimeout(50*time.Millisecond))
	l, err := store.NewLimiter(s, tokenBucket(t, floodgate.PerSecond(400), 400)) // 100/s, burst 100 on each of 4 nodes
	require.NoError(t, err)
	ctx := context.Background()
	burst := func() (admitted int) {
		for range 100 {
			d, err := l.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Fallback, "decided locally")
			if d.Allowed {
				admitted++
			}
		}
		return admitted
	}

	proc.kill()
	assert.LessOrEqual(t, burst(), 3, "drained at the first switch")
	require.NoError(t, proc.restart())
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := l.Take(ctx, "k", 1)
		require.NoError(t, err)
		if !d.Fallback {
			break
		}
		require.True(t, time.Now().Before(deadline), "Redis decides again within 5s")
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the local bucket regains about 30 tokens meanwhile
	proc.kill()
	assert.LessOrEqual(t, burst(), 3, "drained again at the second switch")
}
