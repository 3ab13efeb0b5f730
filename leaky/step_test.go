package leaky_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
)

const (
	msD = time.Millisecond
	sD  = time.Second
)

// repeat returns k requests of cost 1 at the same time, the i-th (1-based)
// expecting want(i).
func repeat(at int64, k int, want func(i int64) floodgate.Decision) []step {
	out := make([]step, k)
	for i := range out {
		out[i] = step{at: at, n: 1, want: want(int64(i + 1))}
	}
	return out
}

// nginx: "limit_req_zone ... rate=10r/s; limit_req zone=z burst=20 nodelay;"
// From idle 21 requests (burst+1) pass in the same millisecond; then one
// every 100 ms, at millisecond granularity.
func TestNoDelayBurstPlusOneFromIdle(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(10), Burst: 20, NoDelay: true}
	require.EqualValues(t, 21, c.Capacity())
	require.EqualValues(t, 21, leaky.UndelayedCapacity(c))
	steps := repeat(t0, 21, func(i int64) floodgate.Decision {
		return pass(21-i, time.Duration(i)*100*msD)
	})
	steps = append(steps,
		step{t0, 1, deny(0, 100*msD, 2100*msD)},
		step{t0 + 100*ms, 1, pass(0, 2100*msD)},
		// 99.999 ms later is still 99 ms for nginx: 990 milli-requests
		// leaked, not 1000. The retry is 1 µs away, at the next ms.
		step{t0 + 199_999*us, 1, deny(0, dur(1), dur(2_000_001))},
		step{t0 + 200*ms, 1, pass(0, 2100*msD)},
	)
	runSteps(t, c, steps)
}

// nginx default mode: "rate=1r/s; limit_req zone=z burst=5;" delays every
// excess request so that they leave one per second.
func TestDefaultModeDelaysEveryExcessRequest(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 5}
	require.EqualValues(t, 1, leaky.UndelayedCapacity(c))
	steps := repeat(t0, 6, func(i int64) floodgate.Decision {
		return delayed(6-i, time.Duration(i)*sD, time.Duration(i-1)*sD)
	})
	steps = append(steps,
		step{t0, 1, deny(0, sD, 6*sD)},
		// One second later one slot has leaked; the newcomer queues
		// behind the five delayed ones.
		step{t0 + sec, 1, delayed(0, 6*sD, 5*sD)},
	)
	runSteps(t, c, steps)
}

// nginx two-stage: "rate=5r/s; limit_req zone=z burst=12 delay=8;": the
// first plus 8 excess requests pass undelayed, the next 4 are delayed 200 ms
// apart, the 14th is rejected.
func TestDelayNTwoStage(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(5), Burst: 12, Delay: 8}
	require.EqualValues(t, 9, leaky.UndelayedCapacity(c))
	steps := repeat(t0, 13, func(i int64) floodgate.Decision {
		var delay time.Duration
		if i > 9 {
			delay = time.Duration(i-9) * 200 * msD
		}
		return delayed(13-i, time.Duration(i)*200*msD, delay)
	})
	steps = append(steps, step{t0, 1, deny(0, 200*msD, 2600*msD)})
	runSteps(t, c, steps)
}

// burst=0: one request per 1/rate, counted in whole milliseconds.
func TestMillisecondGranularity(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(2)}
	runSteps(t, c, []step{
		{t0, 1, pass(0, 500*msD)},
		{t0 + 1*ms, 1, deny(0, 499*msD, 499*msD)},
		// 499.999 ms is 499 ms: 998 of 1000 milli-requests leaked.
		{t0 + 499_999*us, 1, deny(0, dur(1), dur(1))},
		{t0 + 500*ms, 1, pass(0, 500*msD)},
		// Same millisecond as the last admitted request: no leak at all.
		{t0 + 500_999*us, 1, deny(0, dur(499_001), dur(499_001))},
	})
}

// nginx keeps the rate in milli-requests per second, truncated: 1r/m is
// 16, so a request every 62.5 s, not every 60 s.
func TestPerMinuteRateTruncatesLikeNginx(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerMinute(1)}
	r, err := leaky.MilliRate(c)
	require.NoError(t, err)
	require.EqualValues(t, 16, r)
	runSteps(t, c, []step{
		{t0, 1, pass(0, 62_500*msD)},
		{t0 + 60*sec, 1, deny(0, 2500*msD, 2500*msD)},
		{t0 + 62_500*ms, 1, pass(0, 62_500*msD)},
	})

	c = leaky.Config{Rate: floodgate.PerMinute(30)} // 500 milli-requests/s
	runSteps(t, c, []step{
		{t0, 1, pass(0, 2*sD)},
		{t0 + 1999*ms, 1, deny(0, msD, msD)},
		{t0 + 2*sec, 1, pass(0, 2*sD)},
	})
}

// A request of cost n is n requests in the same millisecond, all or none.
func TestCostIsRequestsInTheSameMillisecond(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 4, NoDelay: true}
	runSteps(t, c, []step{
		{t0, 5, pass(0, 5*sD)}, // Capacity() at once
		{t0, 1, deny(0, sD, 5*sD)},
		{t0 + 3*sec, 3, pass(0, 5*sD)},
		// 500 ms later, 3 more need 3000 milli-requests of room: 2.5 s.
		{t0 + 3500*ms, 3, deny(0, 2500*msD, 4500*msD)},
		{t0 + 6*sec, 3, pass(0, 5*sD)},
	})
}

// Clocks that jump: back by less than 60 s counts as no time (nginx), back
// by more re-bases the key so that it leaks normally from there (nginx
// counts 1 ms; re-basing credits nothing), forward by years is idle.
func TestClockJumps(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(10), Burst: 2, NoDelay: true}
	runSteps(t, c, []step{
		{t0, 1, pass(2, 100*msD)},
		{t0, 1, pass(1, 200*msD)},
		{t0, 1, pass(0, 300*msD)},
		{t0, 1, deny(0, 100*msD, 300*msD)},
		{t0 - sec, 1, deny(0, 1100*msD, 1300*msD)},
		// An hour back: 1 ms of leak (10 milli-requests), then normal.
		{t0 - 3600*sec, 1, deny(0, 99*msD, 299*msD)},
		{t0 - 3600*sec + 99*ms, 1, pass(0, 300*msD)},
		// Ten years ahead: idle.
		{t0 + 10*365*24*3600*sec, 1, pass(2, 100*msD)},
	})
}

// A refund gives back exactly what the take added: right after a take the
// key decides as if the take had not happened, also from idle (where the
// refund leaves one request of credit, nginx's "first request is free").
func TestRefundRestoresExactly(t *testing.T) {
	for _, c := range []leaky.Config{
		{Rate: floodgate.PerSecond(10), Burst: 3, NoDelay: true},
		{Rate: floodgate.PerSecond(1), Burst: 0},
		{Rate: floodgate.PerSecond(2), Burst: 5, Delay: 2},
	} {
		a := mustAlg(t, c)
		// Histories leading to different states, then take+refund at now.
		for _, hist := range [][]int64{{}, {0}, {0, 0}, {0, 0, 0, 150 * ms}, {0, 1 * sec}} {
			var s algo.State
			for _, at := range hist {
				s, _ = a.Step(s, t0+at, 1)
			}
			now := t0 + 200*ms
			for n := int64(1); n <= c.Capacity(); n++ {
				before := s
				taken, d := a.Step(before, now, n)
				if !d.Allowed {
					continue
				}
				back, rd := a.Step(taken, now, -n)
				require.True(t, rd.Allowed)
				// Every later request sees the same as without the take.
				for _, later := range []int64{0, 1 * ms, 99 * ms, 100 * ms, 750 * ms, 3 * sec} {
					for m := int64(1); m <= c.Capacity(); m++ {
						_, want := a.Step(before, now+later, m)
						_, got := a.Step(back, now+later, m)
						require.Equal(t, want, got, "cfg %+v hist %v n=%d later=%d m=%d", c, hist, n, later, m)
					}
				}
			}
		}
	}
}

// A refund never credits beyond full capacity (plus nginx's free first
// request of an idle key).
func TestRefundIsBounded(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 2, NoDelay: true}
	a := mustAlg(t, c)
	s, _ := a.Step(algo.State{}, t0, 1)
	s, d := a.Step(s, t0, -3)
	require.True(t, d.Allowed)
	require.Equal(t, c.Capacity(), d.Remaining)
	require.Zero(t, d.ResetAfter)
	for i := int64(1); i <= c.Capacity(); i++ {
		s, d = a.Step(s, t0, 1)
		require.True(t, d.Allowed, "request %d", i)
	}
	_, d = a.Step(s, t0, 1)
	require.False(t, d.Allowed)
}

// Peek reports and changes nothing; a denial changes nothing.
func TestPeekAndDenialDoNotCharge(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 1, NoDelay: true}
	a := mustAlg(t, c)
	s, d := a.Step(algo.State{}, t0, 0)
	require.Equal(t, floodgate.Decision{Allowed: true, Limit: 2, Remaining: 2}, d)
	s, _ = a.Step(s, t0, 2)
	for range 5 {
		var d floodgate.Decision
		s, d = a.Step(s, t0+500*ms, 1)
		require.False(t, d.Allowed)
		require.Equal(t, 500*msD, d.RetryAfter)
	}
	_, d = a.Step(s, t0+sec, 1)
	require.True(t, d.Allowed)
	_, d = a.Step(s, t0+sec, 0)
	require.Equal(t, floodgate.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: sD}, d)
}

// The zero State is a fresh key, and W[0] is when the key is idle again.
func TestStateWords(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(4), Burst: 3, NoDelay: true}
	a := mustAlg(t, c)
	sp := a.Spec()
	require.Equal(t, "leaky-bucket", sp.Name)
	require.Equal(t, 3, sp.Words)
	require.NotEmpty(t, sp.Lua.Source)
	s, _ := a.Step(algo.State{}, t0+123_456, 2)
	// last = t0+123 ms, excess 1000: idle once 2000 milli-requests have
	// leaked at 4000/s, 500 ms later.
	require.Equal(t, [algo.MaxWords]int64{t0 + 623*ms, t0/1000 + 123, 1000}, s.W)
	other := mustAlg(t, leaky.Config{Rate: floodgate.PerSecond(4), Burst: 4, NoDelay: true})
	require.NotEqual(t, sp.Namespace, other.Spec().Namespace)

	// The zero State is fresh at any time, even for a bucket that takes 31
	// years to drain, in 2000 (testing/synctest's epoch) or before 1970.
	slow := leaky.Config{Rate: floodgate.Rate{N: 1, Per: 1000 * time.Second}, Burst: 999_999, NoDelay: true}
	sa := mustAlg(t, slow)
	for _, now := range []int64{946_684_800 * sec, 0, -3600 * sec} {
		_, d := sa.Step(algo.State{}, now, 0)
		require.Equal(t, floodgate.Decision{Allowed: true, Limit: 1_000_000, Remaining: 1_000_000}, d)
		_, d = sa.Step(algo.State{}, now, 1_000_000)
		require.True(t, d.Allowed, "now %d", now)
	}
}
