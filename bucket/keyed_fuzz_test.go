package bucket_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/algo"
)

const (
	usSecond   = int64(time.Second / time.Microsecond)
	usHour     = 3600 * usSecond
	usTenYears = 10 * 365 * 24 * usHour
	// keyedMaxNow keeps fuzzed times where the Lua twin is exact (< 2^53).
	keyedMaxNow = int64(1) << 53
)

// keyedEvent is one call of a fuzzed sequence, as the admission bound needs it.
type keyedEvent struct {
	elapsed int64 // sum of the forward clock moves since the start (µs)
	net     int64 // units admitted by the call (negative for a refund)
}

// FuzzKeyedInvariants drives one key of a fuzzed token bucket through a
// fuzzed sequence of clock moves (including jumps of -1s, -1h and +10y) and
// costs (takes, peeks and refunds), and checks on every step:
//
//   - 0 <= Remaining <= Limit == Burst, and no negative duration;
//   - RetryAfter == 0 exactly when allowed; peeks and refunds are allowed;
//   - a denial changes nothing a later call could see as credit, and a retry
//     at now+RetryAfter is admitted while one at now+RetryAfter-1µs is not;
//   - over every interval of calls, the units admitted net of refunds are at
//     most burst + rate x elapsed, where elapsed counts only the time the
//     clock moved forward (a clock going back must not credit anything).
func FuzzKeyedInvariants(f *testing.F) {
	f.Add(uint16(3), uint32(100_000), uint16(1), []byte{0, 1, 0, 1, 0, 1, 0, 1, 3, 1, 0})
	f.Add(uint16(1), uint32(1), uint16(1), []byte{0, 1, 1, 1, 2, 1, 0, 1})
	f.Add(uint16(10), uint32(1_000_000), uint16(3), []byte{0, 10, 9, 1, 0, 1, 10, 1, 0, 5, 11, 2, 0, 10, 12, 1})
	f.Add(uint16(5), uint32(7), uint16(1000), []byte{0, 5, 9, 0, 0, 3, 10, 0, 0, 3, 4, 2, 0x80, 2, 12, 0})
	f.Add(uint16(1000), uint32(4_000_000_000), uint16(1), []byte{0, 255, 13, 7, 6, 200, 9, 9, 0x85, 100, 1, 1})
	f.Fuzz(func(t *testing.T, burst uint16, per uint32, rateN uint16, ops []byte) {
		c := bucket.Config{
			Rate:  floodgate.Rate{N: int64(rateN%1000) + 1, Per: time.Duration(per) * time.Microsecond},
			Burst: int64(burst%1000) + 1,
		}
		alg, err := c.Algorithm()
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidConfig) {
				t.Fatalf("%+v: error %v does not wrap ErrInvalidConfig", c, err)
			}
			return
		}
		// The effective interval, from the state a single take leaves.
		s1, _ := alg.Step(algo.State{}, keyedEpoch, 1)
		interval := s1.W[0] - keyedEpoch
		if written := int64(per) / (int64(rateN%1000) + 1); interval < written || interval > written+1 {
			t.Fatalf("%+v: interval %dus, want ceil of %d/%d", c, interval, per, rateN%1000+1)
		}
		tau := interval * c.Burst

		var (
			s       algo.State
			now     = keyedEpoch
			elapsed int64
			events  []keyedEvent
		)
		for len(ops) >= 4 {
			op := ops[:4]
			ops = ops[4:]
			delta := keyedTimeStep(op[2], op[3], interval)
			if now+delta < 0 || now+delta >= keyedMaxNow {
				delta = 0
			}
			now += delta
			elapsed += max(delta, 0)
			n := int64(op[1]) % (c.Burst + 1) // 0 (peek) .. burst
			if op[0]&0x80 != 0 {
				n = -1 - int64(op[1])%c.Burst // refund 1 .. burst
			}

			before := s
			next, d := alg.Step(s, now, n)
			checkKeyedDecision(t, c, d)
			if n <= 0 && !d.Allowed {
				t.Fatalf("n=%d denied: %+v", n, d)
			}
			if !d.Allowed {
				if got := keyedRem(before, now, interval, tau, c.Burst); got != d.Remaining {
					t.Fatalf("denial: Remaining %d, but the state holds %d", d.Remaining, got)
				}
				ra := int64(d.RetryAfter / time.Microsecond)
				if time.Duration(ra)*time.Microsecond != d.RetryAfter {
					t.Fatalf("RetryAfter %v is not whole microseconds", d.RetryAfter)
				}
				if _, d2 := alg.Step(next, now+ra, n); !d2.Allowed {
					t.Fatalf("retry of n=%d at now+RetryAfter (%v) denied: %+v", n, d.RetryAfter, d2)
				}
				if _, d2 := alg.Step(next, now+ra-1, n); d2.Allowed {
					t.Fatalf("retry of n=%d 1µs before RetryAfter (%v) admitted: RetryAfter is not exact", n, d.RetryAfter)
				}
			}
			net := int64(0)
			if d.Allowed {
				net = n
			}
			events = append(events, keyedEvent{elapsed: elapsed, net: net})
			s = next
		}
		// Admission bound over every interval of calls [i, j].
		for i := range events {
			sum := int64(0)
			for j := i; j < len(events); j++ {
				sum += events[j].net
				if span := events[j].elapsed - events[i].elapsed; sum*interval > tau+span {
					t.Fatalf("calls %d..%d admitted %d net units in %dus: more than burst %d + rate x elapsed", i, j, sum, span, c.Burst)
				}
			}
		}
	})
}

// keyedTimeStep turns two fuzz bytes into a clock move: small and interval-sized
// steps, and the clock jumps.
func keyedTimeStep(kind, x byte, interval int64) int64 {
	switch kind % 16 {
	case 0:
		return 0
	case 1:
		return int64(x)
	case 2:
		return interval - 1
	case 3:
		return interval
	case 4:
		return interval + 1
	case 5:
		return int64(x) * interval
	case 6:
		return int64(x) * int64(x) * 997
	case 7:
		return interval / (int64(x) + 1)
	case 8:
		return -int64(x)
	case 9:
		return -usSecond
	case 10:
		return -usHour
	case 11:
		return usTenYears
	case 12:
		return int64(x) * usSecond
	default:
		return int64(x) * 13
	}
}

// rem is the Remaining a state shows at now, from the GCRA definition.
func keyedRem(s algo.State, now, interval, tau, burst int64) int64 {
	tat := min(max(s.W[0], now), now+tau)
	return max(0, min(burst, (tau-(tat-now))/interval))
}

func checkKeyedDecision(t *testing.T, c bucket.Config, d floodgate.Decision) {
	t.Helper()
	switch {
	case d.Limit != c.Burst:
		t.Fatalf("Limit %d, want the burst %d: %+v", d.Limit, c.Burst, d)
	case d.Remaining < 0 || d.Remaining > d.Limit:
		t.Fatalf("Remaining outside 0..Limit: %+v", d)
	case d.Allowed != (d.RetryAfter == 0):
		t.Fatalf("Allowed %v with RetryAfter %v", d.Allowed, d.RetryAfter)
	case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay != 0:
		t.Fatalf("bad durations: %+v", d)
	case d.Remaining == d.Limit && d.ResetAfter >= time.Duration(c.Rate.Per):
		t.Fatalf("full bucket with ResetAfter %v: %+v", d.ResetAfter, d)
	}
}

// FuzzKeyedConfig checks that any configuration is either refused with
// ErrInvalidConfig or gives a working bucket whose burst passes from fresh
// and whose arithmetic stays exact in Lua (below 2^53) even ten years on.
func FuzzKeyedConfig(f *testing.F) {
	f.Add(int64(10), int64(time.Second), int64(5))
	f.Add(int64(0), int64(time.Second), int64(5))
	f.Add(int64(1), int64(-1), int64(1))
	f.Add(int64(1<<62), int64(1<<62), int64(1<<62))
	f.Add(int64(1), int64(1<<62), int64(1))
	f.Add(int64(1_000_000), int64(time.Second), int64(1<<30))
	f.Fuzz(func(t *testing.T, n, per, burst int64) {
		c := bucket.Config{Rate: floodgate.Rate{N: n, Per: time.Duration(per)}, Burst: burst}
		alg, err := c.Algorithm()
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidConfig) || alg != nil {
				t.Fatalf("%+v: %v, %v", c, alg, err)
			}
			return
		}
		if n <= 0 || per < 1000 || burst < 1 || n > per/1000 {
			t.Fatalf("%+v accepted", c)
		}
		now := keyedEpoch + usTenYears
		s, d := alg.Step(algo.State{}, now, burst)
		if !d.Allowed || d.Remaining != 0 || d.Limit != burst {
			t.Fatalf("%+v: the burst from fresh: %+v", c, d)
		}
		if s.W[0] >= keyedMaxNow || s.W[0] <= now {
			t.Fatalf("%+v: state %d outside (now, 2^53)", c, s.W[0])
		}
		if _, d := alg.Step(s, now, 1); d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%+v: empty bucket: %+v", c, d)
		}
	})
}
