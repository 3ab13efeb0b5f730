package ratehdr

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func TestQuota(t *testing.T) {
	year := 365 * 24 * time.Hour
	for _, tc := range []struct {
		p    floodgate.Description
		q, w int64
	}{
		{floodgate.Description{Quota: 10, Window: time.Second, Capacity: 20}, 20, 2},
		{floodgate.Description{Quota: 10, Window: time.Second, Capacity: 5}, 10, 1},
		{floodgate.Description{Quota: 10, Window: time.Second, Capacity: 15}, 20, 2},
		{floodgate.Description{Quota: 5, Window: 500 * time.Millisecond, Capacity: 3}, 10, 1},
		{floodgate.Description{Quota: 1, Window: 700 * time.Millisecond, Capacity: 1}, 10, 7},
		{floodgate.Description{Quota: 3, Window: time.Minute, Capacity: 7}, 9, 180},
		{floodgate.Description{Quota: 100, Window: time.Hour, Capacity: 100}, 100, 3600},
		{floodgate.Description{Quota: 5, Capacity: 7}, 10, 0},
		{floodgate.Description{Window: time.Second, Capacity: 7}, 0, 0},
		// No whole factor within 15 digits: the capacity per its refill
		// time, rounded up (the rate understated, never overstated).
		{floodgate.Description{Quota: 1e14, Window: 7, Capacity: 1e14}, 1e14, 1},
		{floodgate.Description{Quota: 1, Window: 200 * year, Capacity: 100}, 100, 100 * int64(200*year/time.Second)},
	} {
		q, w := Quota(tc.p)
		if q != tc.q || w != tc.w {
			t.Errorf("Quota(%+v) = q=%d;w=%d, want q=%d;w=%d", tc.p, q, w, tc.q, tc.w)
		}
		if q > 0 && q < tc.p.Capacity {
			t.Errorf("Quota(%+v): q=%d below the capacity", tc.p, q)
		}
		if q > 0 && w > 0 && float64(q)/float64(w) > float64(tc.p.Quota)/tc.p.Window.Seconds()*(1+1e-12) {
			t.Errorf("Quota(%+v): q/w = %d/%d overstates the rate", tc.p, q, w)
		}
	}
}

func TestMember(t *testing.T) {
	admitted := floodgate.Decision{Allowed: true, Limit: 7, Remaining: 9, ResetAfter: 1500 * time.Millisecond}
	if r, tt, send := Member(admitted, 5, 0, false); r != 5 || tt != 2 || !send {
		t.Errorf("admitted: r=%d t=%d send=%v, want r=5 (clamped to q) t=2", r, tt, send)
	}
	if _, _, send := Member(admitted, 10, 4*time.Second, false); send {
		t.Error("a limit that admitted is sent on a refusal")
	}
	refused := floodgate.Decision{Limit: 7, RetryAfter: 6 * time.Second, ResetAfter: 9 * time.Second}
	if r, tt, send := Member(refused, 10, 4*time.Second, false); r != 0 || tt != 4 || !send {
		t.Errorf("refused: r=%d t=%d send=%v, want t clamped to the retry's 4", r, tt, send)
	}
	delayed := floodgate.Decision{Allowed: true, Limit: 7, Remaining: 3, Delay: 2 * time.Second}
	if r, tt, send := Member(delayed, 10, 2*time.Second, true); r != 0 || tt != 2 || !send {
		t.Errorf("delay refused: r=%d t=%d send=%v, want r=0 t=2", r, tt, send)
	}
}
