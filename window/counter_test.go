package window

import (
	"testing"
	"time"
)

func TestSlidingCounterTable(t *testing.T) {
	alg, err := Config{Limit: 10, Window: time.Second}.SlidingCounterAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	S := second
	runTable(t, alg, 10, []step{
		{at: 0, n: 10, allowed: true, rem: 0, rset: 2 * S},
		// curr + 1 > limit: wait for the next window, until prev's weight
		// 10 x (1s - e)/1s <= 9, i.e. e = 100ms.
		{at: S / 2, n: 1, rem: 0, retry: S + S/10 - S/2, rset: 2*S - S/2},
		{at: S + S/10 - 1, n: 1, rem: 0, retry: 1, rset: S - S/10 + 1},
		{at: S + S/10, n: 1, allowed: true, rem: 0, rset: 2*S - S/10},
		// curr + 1 fits but prev still weighs 9: 10 x (1s - e)/1s <= 8 at
		// e = 200ms.
		{at: S + S/10, n: 1, rem: 0, retry: S / 10, rset: 2*S - S/10},
		{at: S + 2*S/10, n: 1, allowed: true, rem: 0, rset: 2*S - 2*S/10},
		// Peeks: the weight of prev is rounded up, Remaining never promises
		// more than the estimate allows.
		{at: S + S/2, n: 0, allowed: true, rem: 3, rset: 3 * S / 2},
		{at: S + S/2 + 1, n: 0, allowed: true, rem: 3, rset: 3*S/2 - 1},
		{at: S + 6*S/10, n: 0, allowed: true, rem: 4, rset: 14 * S / 10},
		// Refunds come off the current window first, then the previous one.
		{at: S + 6*S/10, n: -2, allowed: true, rem: 6, rset: 4 * S / 10},
		{at: S + 6*S/10, n: -3, allowed: true, rem: 7, rset: 4 * S / 10},
		{at: S + 6*S/10, n: -20, allowed: true, rem: 10},
		// The boundary burst is smoothed: 10 at the end of a window leave
		// almost nothing at the start of the next.
		{at: 4*S - 1, n: 10, allowed: true, rem: 0, rset: S + 1},
		{at: 4 * S, n: 1, rem: 0, retry: S / 10, rset: S},
		{at: 4*S + S/2, n: 5, allowed: true, rem: 0, rset: 3 * S / 2},
		// The clock goes back 1h: both counts fold into the window holding
		// now (credits nothing).
		{at: 4*S - hour, n: 1, rem: 0, retry: S + S/10, rset: 2 * S},
		{at: 6*S - hour, n: 10, allowed: true, rem: 0, rset: 2 * S},
		{at: 10 * year, n: 1, allowed: true, rem: 9, rset: 2 * S},
	})
}

func TestSlidingCounterRetryIsExactAcrossShapes(t *testing.T) {
	// Exhaustive over small shapes: every (prev, curr, elapsed, n) with a
	// 7µs window, where rounding would show.
	const w = 7
	alg, err := Config{Limit: 5, Window: w * time.Microsecond}.SlidingCounterAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	base := t0 - t0%w
	checked := 0
	for prev := int64(0); prev <= 5; prev++ {
		for curr := int64(0); curr <= 5; curr++ {
			for e := int64(0); e < w; e++ {
				if prev*(w-e)+curr*w > 5*w {
					continue // not reachable: curr was admitted no later than now
				}
				s := zeroState()
				if curr > 0 || prev > 0 {
					s.W[0], s.W[1], s.W[2], s.W[3] = base+2*w, base, curr, prev
					if curr > 0 {
						s.W[0] += w
					}
				}
				for n := int64(-6); n <= 6; n++ {
					now := base + e
					s2, dec := alg.Step(s, now, n)
					checkDecision(t, alg, s2, now, n, dec)
					checked++
				}
			}
		}
	}
	if checked < 500 {
		t.Fatalf("only %d shapes checked", checked)
	}
}
