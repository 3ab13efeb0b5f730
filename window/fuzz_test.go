package window

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store/algo"
)

var fuzzWindows = []int64{1, 7, 1000, second, hour}

// FuzzWindows drives one algorithm through a sequence of (time step, cost)
// decoded from ops and checks, after every step, the decision invariants
// (checkDecision: 0 <= Remaining <= Limit, RetryAfter == 0 exactly when
// allowed, the same request admitted at now+RetryAfter and not a µs earlier,
// W[0] the time to full) and the volume bound of the algorithm over the
// admissions since the last backwards clock jump: at most Limit per aligned
// window (fixed), per window-long interval (log), and at most 2 x Limit - 1
// per window-long interval (counter). Clock jumps of -1s, -1h and +10y are
// among the time steps.
func FuzzWindows(f *testing.F) {
	f.Add(uint8(0), uint16(3), uint8(3), []byte{0, 1, 0, 1, 0, 1, 0, 1, 3, 2, 2, 2})
	f.Add(uint8(1), uint16(3), uint8(3), []byte{0, 1, 0, 1, 0, 1, 2, 1, 1, 1, 7, 1, 8, 2, 9, 3})
	f.Add(uint8(2), uint16(10), uint8(3), []byte{2, 11, 1, 1, 5, 1, 5, 2, 0, 0, 0xf0, 30, 12, 4})
	f.Add(uint8(2), uint16(5), uint8(1), []byte{0, 5, 6, 1, 6, 1, 0x76, 1, 0x36, 2, 3, 1, 4, 1})
	f.Add(uint8(0), uint16(1), uint8(0), []byte{0, 1, 1, 1, 1, 1, 7, 1, 0, 255})
	f.Add(uint8(1), uint16(63), uint8(2), []byte{10, 60, 11, 9, 12, 9, 13, 9, 14, 9, 15, 9, 8, 9, 9, 9})
	f.Add(uint8(2), uint16(2), uint8(4), []byte{2, 3, 1, 3, 0, 3, 0xf5, 9, 5, 2, 5, 2})
	f.Fuzz(func(t *testing.T, which uint8, limit16 uint16, wsel uint8, ops []byte) {
		limit := 1 + int64(limit16%64)
		w := fuzzWindows[int(wsel)%len(fuzzWindows)]
		c := Config{Limit: limit, Window: time.Duration(w) * time.Microsecond}
		alg := algs(t, c)[[]string{"fixed", "log", "counter"}[which%3]]
		fuzzRun(t, alg, limit, w, ops)
	})
}

type admission struct{ at, units int64 }

func fuzzRun(t *testing.T, alg algo.Algorithm, limit, w int64, ops []byte) {
	name := alg.Spec().Name
	now := t0 + 12345%w
	var s algo.State
	var hist []admission
	for i := 0; i+1 < len(ops); i += 2 {
		a, b := ops[i], ops[i+1]
		prev := now
		switch a & 15 {
		case 0:
		case 1:
			now++
		case 2:
			now += w - 1
		case 3:
			now += w
		case 4:
			now += w + 1
		case 5:
			now += w / 2
		case 6:
			now += int64(a>>4) * w / 16
		case 7:
			now -= second
		case 8:
			now -= hour
		case 9:
			now += 10 * year
		default:
			now += int64(b) * w / 256
		}
		n := int64(b)%(limit+2) - 1
		switch {
		case b == 255:
			n = limit + 1 // never admitted
		case a>>4 == 15:
			n = -int64(b) // a large refund
		}
		if now < prev {
			hist = hist[:0] // volume bounds are over monotone time
		}
		in := slices.Clone(s.Log)
		s2, dec := alg.Step(s, now, n)
		if !slices.Equal(in, s.Log) {
			t.Fatalf("%s: step wrote into its input log", name)
		}
		checkDecision(t, alg, s2, now, n, dec)
		s = s2
		switch {
		case n > 0 && dec.Allowed:
			hist = append(hist, admission{now, n})
		case n < 0:
			for back := -n; back > 0 && len(hist) > 0; {
				last := &hist[len(hist)-1]
				took := min(back, last.units)
				last.units -= took
				back -= took
				if last.units == 0 {
					hist = hist[:len(hist)-1]
				}
			}
		}
		if !dec.Allowed || n <= 0 {
			continue
		}
		from, bound := now-w+1, limit // (now-w, now]
		switch name {
		case "fixed-window":
			from = windowStart(now, w)
		case "sliding-counter":
			bound = 2*limit - 1
		}
		var sum int64
		for j := len(hist) - 1; j >= 0 && hist[j].at >= from; j-- {
			sum += hist[j].units
		}
		if sum > bound {
			t.Fatalf("%s: %d units admitted in [%d, %d], bound %d", name, sum, from, now, bound)
		}
	}
}

// FuzzStepAnyState feeds every algorithm arbitrary states, times and costs
// (none of which a store would pass: unaligned windows, counts above the
// limit, unsorted logs, times at the ends of int64) and requires a valid
// decision and no panic.
func FuzzStepAnyState(f *testing.F) {
	f.Add(uint8(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1), []byte{})
	f.Add(uint8(1), int64(math.MaxInt64), int64(-5), int64(99), int64(3), int64(math.MinInt64), int64(math.MinInt64), []byte{1, 2, 3})
	f.Add(uint8(2), t0+hour, t0, int64(9), int64(9), t0, int64(math.MaxInt64), []byte{9, 9, 9, 0, 255})
	f.Add(uint8(2), t0, t0+7*second, int64(-3), int64(12), t0-1, int64(-1), []byte{})
	f.Fuzz(func(t *testing.T, which uint8, w0, w1, w2, w3, now, n int64, logSeed []byte) {
		c := Config{Limit: 5, Window: time.Second}
		alg := algs(t, c)[[]string{"fixed", "log", "counter"}[which%3]]
		s := algo.State{W: [algo.MaxWords]int64{w0, w1, w2, w3}}
		for i, b := range logSeed {
			s.Log = append(s.Log, now+int64(b-128)*int64(i+1)*second/64)
		}
		s2, d := alg.Step(s, now, n)
		switch {
		case d.Limit != 5 || d.Remaining < 0 || d.Remaining > 5:
			t.Fatalf("remaining %d of %d", d.Remaining, d.Limit)
		case d.Allowed != (d.RetryAfter == 0):
			t.Fatalf("allowed %v, retry %v", d.Allowed, d.RetryAfter)
		case n < 0 && !d.Allowed:
			t.Fatal("refund denied")
		case d.ResetAfter < 0 || d.ResetAfter > 2*time.Second || d.Delay != 0:
			t.Fatalf("reset %v delay %v", d.ResetAfter, d.Delay)
		case alg.Spec().MaxLog > 0 && len(s2.Log) > 5:
			t.Fatalf("log of %d", len(s2.Log))
		}
	})
}
