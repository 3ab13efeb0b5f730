package leaky_test

import (
	"math/bits"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
)

// fuzzConfig builds a valid Config from fuzz inputs, or reports false.
func fuzzConfig(rateN uint32, perSel uint8, burst uint16, mode uint8, delay uint16) (leaky.Config, bool) {
	per := []time.Duration{time.Second, time.Minute, time.Millisecond, 7 * time.Second}[perSel%4]
	c := leaky.Config{Rate: floodgate.Rate{N: int64(rateN%1_000_000) + 1, Per: per}, Burst: int64(burst % 300)}
	switch mode % 3 {
	case 1:
		c.NoDelay = true
	case 2:
		c.Delay = int64(delay) % (c.Burst + 1)
	}
	return c, validate(c) == nil
}

// Time moves by op: 0 same µs, 1 +1µs, 2 +999µs, 3 -1s, 4 -1h, 5 +10y,
// otherwise forward by up to ~4 s. monotone drops the backward jumps.
func advance(now int64, op byte, monotone bool) int64 {
	switch op % 16 {
	case 0:
	case 1:
		now++
	case 2:
		now += 999
	case 3:
		if !monotone {
			now -= sec
		}
	case 4:
		if !monotone {
			now -= 3600 * sec
		}
	case 5:
		if now < t0+40*365*24*3600*sec {
			now += 10 * 365 * 24 * 3600 * sec
		}
	default:
		now += int64(op) * int64(op) * 61
	}
	return now
}

// FuzzStep checks the invariants of every decision over arbitrary request
// sequences: 0 <= Remaining <= Limit; RetryAfter == 0 exactly when allowed;
// ResetAfter == 0 exactly when full; a retry at now+RetryAfter is admitted;
// a denial charges nothing; no wait is longer than 60 s (nginx's tolerance
// for a clock gone back) plus the time to drain a full bucket; a store that
// drops a key at W[0] decides the same; and, without refunds or backward
// jumps, at most Burst+1 + rate*elapsed requests are admitted over every
// interval.
func FuzzStep(f *testing.F) {
	f.Add(uint32(9), uint8(0), uint16(20), uint8(1), uint16(0), []byte{0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 200, 1, 9}, false)
	f.Add(uint32(0), uint8(0), uint16(5), uint8(0), uint16(0), []byte{0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0}, true)
	f.Add(uint32(4), uint8(0), uint16(12), uint8(2), uint16(8), []byte("the quick brown fox jumps over"), false)
	f.Add(uint32(0), uint8(1), uint16(0), uint8(0), uint16(0), []byte{0, 2, 2, 2, 2, 255, 255, 255, 255}, false)
	f.Add(uint32(29), uint8(1), uint16(3), uint8(1), uint16(0), []byte{0, 0, 0, 0, 3, 0, 4, 0, 5, 0, 0, 4, 3}, true)
	f.Add(uint32(999_999), uint8(2), uint16(299), uint8(2), uint16(150), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, true)
	f.Add(uint32(1), uint8(3), uint16(7), uint8(0), uint16(0), []byte{16, 0, 16, 0, 32, 0, 35, 0, 36, 0, 37}, false)
	f.Fuzz(func(t *testing.T, rateN uint32, perSel uint8, burst uint16, mode uint8, delay uint16, ops []byte, refunds bool) {
		c, ok := fuzzConfig(rateN, perSel, burst, mode, delay)
		if !ok {
			return
		}
		a := mustAlg(t, c)
		r, _ := leaky.MilliRate(c)
		limit := c.Capacity()
		drainMs := (limit*1_000_000 + r - 1) / r
		maxWait := time.Duration(60_000+drainMs+1) * time.Millisecond
		monotone := !refunds && len(ops) > 0 && ops[0]%2 == 0

		var s, dropped algo.State
		now := t0
		type admit struct{ at, n int64 }
		var admitted []admit
		for i := 0; i+1 < len(ops); i += 2 {
			now = advance(now, ops[i], monotone)
			n := int64(ops[i+1])%limit + 1 // 1..limit
			if refunds && ops[i+1]%5 == 0 {
				n = -n
			} else if ops[i+1]%7 == 0 {
				n = 0
			}
			s2, d := a.Step(s, now, n)
			checkInvariants(t, d)
			require.Equal(t, limit, d.Limit)
			require.LessOrEqual(t, d.RetryAfter, maxWait, "%+v", d)
			require.LessOrEqual(t, d.ResetAfter, maxWait, "%+v", d)
			require.LessOrEqual(t, d.Delay, d.ResetAfter, "%+v", d)
			if n <= 0 {
				require.True(t, d.Allowed)
				require.Zero(t, d.Delay)
			}
			if !d.Allowed {
				require.Equal(t, s2.W[2], min(max(s.W[2], -1000), c.Burst*1000), "a denial charged")
				_, retry := a.Step(s2, now+d.RetryAfter.Microseconds(), n)
				require.True(t, retry.Allowed, "retry at now+%v denied: %+v", d.RetryAfter, retry)
				if d.RetryAfter > time.Microsecond {
					_, early := a.Step(s2, now+d.RetryAfter.Microseconds()-1, n)
					require.False(t, early.Allowed, "admitted 1µs before RetryAfter %v", d.RetryAfter)
				}
			}
			if monotone {
				if dropped.W[0] <= now {
					dropped = algo.State{}
				}
				var dd floodgate.Decision
				dropped, dd = a.Step(dropped, now, n)
				require.Equal(t, d, dd, "dropping the key at W[0] changed a decision")
				if d.Allowed && n > 0 {
					admitted = append(admitted, admit{now, n})
				}
			}
			s = s2
		}
		// Every interval [admitted[i], admitted[j]].
		for i := range admitted {
			sum := int64(0)
			for j := i; j < len(admitted); j++ {
				sum += admitted[j].n
				elapsedMs := admitted[j].at/1000 - admitted[i].at/1000
				hi, lo := bits.Mul64(uint64(r), uint64(elapsedMs))
				if hi >= 1_000_000 {
					break // bound beyond any count
				}
				q, _ := bits.Div64(hi, lo, 1_000_000)
				bound := limit + int64(q)
				require.LessOrEqual(t, sum, bound, "admitted %d over %d ms", sum, elapsedMs)
			}
		}
	})
}

// Any state and time, even garbage, gives a valid decision without panic.
func FuzzStepAnyState(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(1))
	f.Add(int64(-1), int64(-1<<62), int64(1<<62), int64(-1<<63), int64(-1<<63))
	f.Add(int64(1<<63-1), int64(1<<63-1), int64(-5000), int64(1<<63-1), int64(1<<63-1))
	f.Add(t0, t0/1000+5, int64(999), t0, int64(3))
	f.Fuzz(func(t *testing.T, w0, w1, w2, now, n int64) {
		a := mustAlg(t, leaky.Config{Rate: floodgate.PerSecond(3), Burst: 4, Delay: 2})
		s := algo.State{W: [algo.MaxWords]int64{w0, w1, w2}}
		_, d := a.Step(s, now, n)
		checkInvariants(t, d)
		require.EqualValues(t, 5, d.Limit)
	})
}
