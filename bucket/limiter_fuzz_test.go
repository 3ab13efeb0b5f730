package bucket

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The fuzz targets drive a Limiter with byte-coded operations and check the
// invariants every token bucket owes its callers. Their seed corpus runs in
// plain `go test`; `go test -fuzz FuzzLimiterInvariants ./bucket` explores.

var fuzzLimits = []Limit{1e-9, 1e-3, 1, 3, 10, 1000, 7e8, 1e9, 0, Inf}

// fuzzTrace logs every operation, to debug a failing input.
var fuzzTrace = false

const (
	fuzzYear    = 365 * 24 * time.Hour
	fuzzMaxSpan = 60 * fuzzYear // times stay within t0 +- 60 years
)

// fuzzStep decodes a time step: small steps in units of the limit's
// interval, and the clock jumps -1s, -1h and +10y (held within fuzzMaxSpan).
func fuzzStep(code byte, limit Limit, burst int, offset time.Duration) time.Duration {
	T := 1e6 // ns, for the limits without an interval
	if limit > 0 && limit < Inf {
		T = min(1e9/float64(limit), 1e17)
	}
	var d time.Duration
	switch code % 10 {
	case 0:
	case 1:
		d = 1
	case 2:
		d = time.Duration(T / 3)
	case 3:
		d = time.Duration(T)
	case 4:
		d = time.Duration(min(float64(burst)*T, 1e17))
	case 5:
		d = -time.Second
	case 6:
		d = -time.Hour
	case 7:
		d = 10 * fuzzYear
	default:
		d = time.Duration(float64(code) * T / 64)
	}
	if off := offset + d; off > fuzzMaxSpan || off < -fuzzMaxSpan {
		return 0
	}
	return d
}

// fuzzEvent is an admitted event: its time, off + delay (ns from t0; kept
// apart because the sum can overflow and float64 would round it), and size;
// res is set for reservations, which may be cancelled.
type fuzzEvent struct {
	off, delay time.Duration
	n          int
	res        *Reservation
}

// since returns e's time minus o's, in ns, computed without overflow.
func (e fuzzEvent) since(o fuzzEvent) float64 {
	return float64(e.off-o.off) + float64(e.delay-o.delay)
}

// checkConformance verifies that over every interval [a, c] the events
// admitted sum to at most burst + limit x (c - a), with a token of float64
// slack per million and 1 ns of rounding.
func checkConformance(t *testing.T, events []fuzzEvent, limit Limit, burst int) {
	t.Helper()
	if limit >= Inf {
		return
	}
	slices.SortFunc(events, func(a, b fuzzEvent) int {
		// a.off+a.delay vs b.off+b.delay, exactly.
		x, y := a.off-b.off, b.delay-a.delay
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	r := float64(limit) / 1e9 // tokens per ns
	for i := range events {
		sum := 0
		for j := i; j < len(events); j++ {
			sum += events[j].n
			bound := float64(burst) + r*(events[j].since(events[i])+1)
			if float64(sum) > bound*(1+1e-9)+1e-6 {
				t.Fatalf("limit %v burst %d: %d tokens admitted over %.0f ns from %v+%v, bound %v", limit, burst, sum, events[j].since(events[i]), events[i].off, events[i].delay, bound)
			}
		}
	}
}

func checkTokens(t *testing.T, l *Limiter, now time.Time) {
	t.Helper()
	tok := l.TokensAt(now)
	if math.IsNaN(tok) || tok > float64(l.Burst())+1e-9 {
		t.Fatalf("TokensAt = %v with burst %d", tok, l.Burst())
	}
}

// FuzzLimiterInvariants: with a fixed limit and burst, any sequence of
// AllowN, ReserveN and CancelAt (in any order), at times that may jump
// backwards (-1s, -1h) and forwards (+10y), admits at most burst + limit x
// elapsed over every interval, never reports more tokens than the burst, and
// gives exact delays.
func FuzzLimiterInvariants(f *testing.F) {
	f.Add(uint8(4), uint8(3), []byte{0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 3, 1, 0, 5, 1, 0, 6, 1})
	f.Add(uint8(2), uint8(1), []byte{1, 0, 1, 1, 0, 1, 1, 0, 1, 2, 0, 0, 2, 0, 1, 0, 3, 1, 0, 5, 1, 0, 6, 1, 1, 7, 1})
	f.Add(uint8(7), uint8(5), []byte{1, 0, 5, 1, 1, 3, 1, 0, 4, 2, 1, 2, 2, 0, 0, 3, 1, 1, 3, 1, 2, 0, 1, 2})
	f.Add(uint8(0), uint8(2), []byte{0, 0, 2, 1, 0, 1, 3, 7, 1, 0, 6, 1, 1, 5, 1})
	f.Add(uint8(8), uint8(4), []byte{0, 0, 2, 1, 0, 2, 1, 0, 3, 2, 0, 1, 0, 7, 2})
	f.Add(uint8(3), uint8(9), []byte{1, 0, 9, 1, 0, 2, 1, 0, 2, 1, 9, 2, 2, 0, 1, 2, 0, 2, 3, 2, 1, 0, 6, 9, 0, 5, 9})
	f.Add(uint8(5), uint8(39), []byte{1, 0, 39, 1, 3, 20, 1, 3, 20, 2, 0, 0, 2, 0, 1, 1, 4, 39, 3, 9, 3})
	f.Add(uint8(9), uint8(0), []byte{0, 0, 100, 1, 7, 100, 0, 6, 5})
	f.Fuzz(runInvariantOps)
}

// TestInvariantsTable runs the invariant checks of FuzzLimiterInvariants on
// named sequences: steady use, clock jumps back and forward, cancels out of
// order, at the edges of the limits.
func TestInvariantsTable(t *testing.T) {
	// ops: (operation 0 allow, 1 reserve, 2 cancel, 3 probe; time step code
	// as fuzzStep; n).
	tests := []struct {
		name         string
		limit, burst uint8 // indexes into fuzzLimits, burst
		ops          []byte
	}{
		{"steady 10/s", 4, 3, []byte{0, 3, 1, 0, 3, 1, 0, 2, 1, 0, 1, 1, 0, 3, 3, 0, 4, 3, 0, 0, 1}},
		{"back 1s and 1h", 4, 5, []byte{0, 0, 5, 0, 5, 1, 0, 6, 1, 1, 5, 2, 0, 3, 1, 3, 0, 2}},
		{"forward 10y then back", 2, 4, []byte{0, 7, 4, 0, 6, 1, 1, 5, 1, 0, 3, 2, 3, 0, 1}},
		{"cancels out of order", 3, 9, []byte{1, 0, 9, 1, 0, 4, 1, 0, 4, 2, 0, 0, 2, 0, 1, 0, 3, 5, 2, 0, 2, 0, 4, 9}},
		{"stale cancel after a later charge", 3, 13, []byte{0, 8, 3, 0, 8, 3, 1, 8, 10, 0, 4, 7, 2, 6, 0, 1, 1, 10}},
		{"1e-9 per second", 0, 5, []byte{0, 0, 5, 1, 4, 3, 3, 4, 3, 0, 7, 2, 1, 6, 1}},
		{"1e9 per second", 7, 2, []byte{0, 0, 2, 0, 1, 1, 1, 1, 2, 3, 1, 1, 0, 2, 2, 0, 6, 1}},
		{"limit zero", 8, 4, []byte{0, 0, 2, 1, 7, 2, 1, 7, 1, 2, 0, 0, 0, 3, 2}},
		{"Inf", 9, 0, []byte{0, 0, 100, 1, 7, 100, 0, 6, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runInvariantOps(t, tt.limit, tt.burst, tt.ops) })
	}
}

// runInvariantOps is the body of FuzzLimiterInvariants, shared with the
// table test: ops are triples (operation, time step, n).
func runInvariantOps(t *testing.T, limitSel, burstSel uint8, ops []byte) {
	limit := fuzzLimits[int(limitSel)%len(fuzzLimits)]
	burst := int(burstSel % 40)
	l := NewLimiter(limit, burst)
	now, offset, latest := t0, time.Duration(0), time.Duration(0)
	var events []fuzzEvent
	for i := 0; i+2 < len(ops) && i < 600; i += 3 {
		d := fuzzStep(ops[i+1], limit, burst, offset)
		now, offset = now.Add(d), offset+d
		latest = max(latest, offset)
		n := int(ops[i+2] % 45)
		if fuzzTrace {
			t.Logf("t0%+v op %d n %d arg %d: tokens %v", offset, ops[i]%4, n, ops[i+2], l.TokensAt(now))
		}
		switch ops[i] % 4 {
		case 0:
			if l.AllowN(now, n) {
				events = append(events, fuzzEvent{off: offset, n: n})
			}
		case 1:
			r := l.ReserveN(now, n)
			if !r.OK() {
				if r.DelayFrom(now) != InfDuration {
					t.Fatal("refused reservation without an infinite delay")
				}
				continue
			}
			events = append(events, fuzzEvent{off: offset, delay: r.DelayFrom(now), n: n, res: r})
		case 2: // cancel any reservation, in any order
			k := -1
			for j := range events {
				if events[j].res != nil && (k < 0 || int(ops[i+2])%len(events) >= j) {
					k = j
				}
			}
			if k < 0 {
				continue
			}
			events[k].res.CancelAt(now)
			if e := events[k]; e.delay >= offset-e.off { // not acted upon yet: it will not act
				events = slices.Delete(events, k, k+1)
			} else {
				events[k].res = nil
			}
		case 3: // the delay is exact: probe, give back, then act on it
			if offset < latest {
				// A reservation at an older time may be due before the
				// present: the limiter deems it spent and gives nothing
				// back (see CancelAt). Probe from the present.
				now, offset = t0.Add(latest), latest
			}
			r := l.ReserveN(now, n)
			if !r.OK() {
				continue
			}
			wait := r.DelayFrom(now)
			r.CancelAt(now)
			if fuzzTrace {
				t.Logf("probe: wait %d, tokens after cancel %.17g", wait, l.TokensAt(now))
			}
			// Exact to 1 ns, or to the float64 precision of the state
			// when that is coarser: about 1e-15 of the bucket's span
			// (burst x interval) plus the delay; at 1e-9/s the span of
			// a burst of 39 is 3.9e19 ns.
			span := float64(wait)
			if limit > 0 && limit < Inf {
				span += float64(burst) * 1e9 / float64(limit)
			}
			slack := 1 + time.Duration(span*1e-15)
			// Rounded up to whole ns, so up to 1 ns late, plus noise.
			if early := wait - 1 - slack; early >= 0 && l.AllowN(now.Add(early), n) {
				t.Fatalf("limit %v burst %d: n=%d admitted %v before the delay %v", limit, burst, n, 1+slack, wait)
			}
			later := now.Add(wait + slack)
			if float64(offset)+float64(wait) > float64(100*fuzzYear) {
				continue // beyond the limiter's range of times (see toNS)
			}
			if !l.AllowN(later, n) {
				t.Fatalf("limit %v burst %d: n=%d refused %v after the delay %v (tokens %v)", limit, burst, n, slack, wait, l.TokensAt(later))
			}
			events = append(events, fuzzEvent{off: offset, delay: wait + slack, n: n})
			now, offset = later, offset+wait+slack // the probe moved the present
			latest = max(latest, offset)
		}
		checkTokens(t, l, now)
	}
	checkConformance(t, events, limit, burst)
}

// FuzzLimiterSetters: with SetLimitAt and SetBurstAt mixed in at
// non-decreasing times, nothing panics, the tokens stay within the current
// burst, and the events admitted over every interval stay within the largest
// burst plus the largest rate times its length.
func FuzzLimiterSetters(f *testing.F) {
	f.Add([]byte{0, 0, 5, 2, 0, 9, 0, 0, 5, 3, 1, 1, 0, 3, 2, 0, 0, 40})
	f.Add([]byte{3, 0, 8, 0, 0, 3, 2, 1, 0, 0, 2, 1, 3, 0, 9, 0, 4, 2, 1, 0, 1})
	f.Add([]byte{2, 0, 39, 0, 0, 39, 3, 0, 7, 0, 1, 1, 2, 9, 1, 0, 9, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		limit, burst := Limit(10), 5
		maxLimit, maxBurst := limit, burst
		l := NewLimiter(limit, burst)
		now, offset := t0, time.Duration(0)
		var events []fuzzEvent
		for i := 0; i+2 < len(ops) && i < 600; i += 3 {
			d := fuzzStep(ops[i+1], limit, burst, offset)
			if d < 0 || d > time.Hour {
				d = 0 // non-decreasing, and short enough to matter
			}
			now, offset = now.Add(d), offset+d
			arg := int(ops[i+2])
			switch ops[i] % 4 {
			case 0, 1:
				if n := arg % 45; l.AllowN(now, n) {
					events = append(events, fuzzEvent{off: offset, n: n})
				}
			case 2:
				burst = arg % 40
				maxBurst = max(maxBurst, burst)
				l.SetBurstAt(now, burst)
			case 3:
				limit = fuzzLimits[arg%len(fuzzLimits)]
				if limit < Inf {
					maxLimit = max(maxLimit, limit)
				} else {
					maxLimit = Inf
				}
				l.SetLimitAt(now, limit)
			}
			checkTokens(t, l, now)
			if l.Limit() < Inf && l.AllowN(now, l.Burst()+1) {
				t.Fatal("admitted more than the burst in one call")
			}
		}
		checkConformance(t, events, maxLimit, maxBurst)
	})
}
