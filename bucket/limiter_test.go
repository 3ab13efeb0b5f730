package bucket

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"golang.org/x/time/rate"
)

// t0 is a wall time without a monotonic reading, far from the real clock.
var t0 = time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)

// step is one row of a table test: at t0+at, call op with n, expect want.
type step struct {
	at   time.Duration
	op   string // "allow", "reserve" (want is the delay), "tokens" (want is the count)
	n    int
	ok   bool
	want float64
}

func runSteps(t *testing.T, l *Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(s.at)
		switch s.op {
		case "allow":
			if got := l.AllowN(now, s.n); got != s.ok {
				t.Fatalf("step %d: AllowN(t0+%v, %d) = %v, want %v (tokens %v)", i, s.at, s.n, got, s.ok, l.TokensAt(now))
			}
		case "reserve":
			r := l.ReserveN(now, s.n)
			if r.OK() != s.ok {
				t.Fatalf("step %d: ReserveN(t0+%v, %d).OK() = %v, want %v", i, s.at, s.n, r.OK(), s.ok)
			}
			if d := r.DelayFrom(now); s.ok && d != time.Duration(s.want) {
				t.Fatalf("step %d: ReserveN(t0+%v, %d) delay %v, want %v", i, s.at, s.n, d, time.Duration(s.want))
			}
			if !s.ok && r.DelayFrom(now) != InfDuration {
				t.Fatalf("step %d: a refused reservation has delay %v, want InfDuration", i, r.DelayFrom(now))
			}
		case "tokens":
			if got := l.TokensAt(now); math.Abs(got-s.want) > 1e-9 {
				t.Fatalf("step %d: TokensAt(t0+%v) = %v, want %v", i, s.at, got, s.want)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
	}
}

func TestLimiterTable(t *testing.T) {
	const ms = time.Millisecond
	year := 365 * 24 * time.Hour
	tests := []struct {
		name  string
		limit Limit
		burst int
		steps []step
	}{
		{"burst then refill", 10, 3, []step{
			{0, "allow", 1, true, 0}, {0, "allow", 1, true, 0}, {0, "allow", 1, true, 0},
			{0, "allow", 1, false, 0},
			{99 * ms, "allow", 1, false, 0},
			{100 * ms, "allow", 1, true, 0}, {100 * ms, "allow", 1, false, 0},
			{time.Second, "tokens", 0, true, 3}, // capped at the burst, not 9
			{time.Second, "allow", 3, true, 0}, {time.Second, "allow", 1, false, 0},
		}},
		{"reservations queue up", 10, 2, []step{
			{0, "reserve", 2, true, 0},
			{0, "reserve", 1, true, float64(100 * ms)},
			{0, "reserve", 2, true, float64(300 * ms)},
			{0, "tokens", 0, true, -3},
			{0, "allow", 0, false, 0}, // n == 0 is refused while reservations wait
			{300 * ms, "allow", 0, true, 0},
			{300 * ms, "tokens", 0, true, 0},
		}},
		{"n above burst never", 10, 3, []step{
			{0, "allow", 4, false, 0}, {0, "reserve", 4, false, 0},
			{0, "tokens", 0, true, 3}, // nothing taken
		}},
		{"negative n refused and credits nothing", 10, 3, []step{
			{0, "allow", 3, true, 0},
			{0, "allow", -5, false, 0}, {0, "reserve", -5, false, 0},
			{0, "tokens", 0, true, 0},
		}},
		{"n zero", 10, 3, []step{
			{0, "allow", 0, true, 0}, {0, "reserve", 0, true, 0}, {0, "tokens", 0, true, 3},
		}},
		{"Inf ignores burst", Inf, 0, []step{
			{0, "allow", 1, true, 0}, {0, "allow", 1 << 40, true, 0}, {0, "reserve", 1 << 40, true, 0},
			{0, "allow", -1, false, 0},
		}},
		{"limit zero spends the burst once", 0, 2, []step{
			{0, "allow", 1, true, 0}, {0, "reserve", 1, true, 0},
			{0, "allow", 1, false, 0},
			{0, "reserve", 1, false, 0}, // never servable: refused, nothing taken
			{10 * year, "allow", 1, false, 0},
			{10 * year, "tokens", 0, true, 0},
		}},
		{"burst zero", 10, 0, []step{
			{0, "allow", 0, true, 0}, {0, "allow", 1, false, 0}, {time.Hour, "allow", 1, false, 0},
			{0, "reserve", 1, false, 0},
		}},
		{"1e-9 per second", 1e-9, 1, []step{
			{0, "allow", 1, true, 0},
			{0, "reserve", 1, true, 1e18}, // one token per 1e9 s
			{0, "reserve", 9, false, 0},   // more than 2^63 ns away: never
		}},
		{"1e9 per second", 1e9, 1, []step{
			{0, "allow", 1, true, 0}, {0, "allow", 1, false, 0},
			{1, "allow", 1, true, 0}, {1, "allow", 1, false, 0},
			{1, "reserve", 1, true, 1},
		}},
		{"non-integer interval", 3, 1, []step{
			{0, "allow", 1, true, 0},
			{0, "reserve", 1, true, 333_333_334}, // 333,333,333.3 ns rounded up
			{666_666_666, "allow", 1, false, 0},
			{666_666_667, "allow", 1, true, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, NewLimiter(tt.limit, tt.burst), tt.steps) })
	}
}

func TestBadInputSanitised(t *testing.T) {
	tests := []struct {
		limit     Limit
		burst     int
		wantLimit Limit
		wantBurst int
		allowOne  bool
	}{
		{Limit(math.NaN()), 3, 0, 3, true},
		{-5, 3, 0, 3, true},
		{Limit(math.Inf(1)), 0, Inf, 0, true},
		{Limit(math.Inf(-1)), 1, 0, 1, true},
		{10, -4, 10, 0, false},
		{1e-300, 1, 1e-300, 1, true}, // slower than 1e-241/s: no refill at all
		{Limit(math.SmallestNonzeroFloat64), 1, Limit(math.SmallestNonzeroFloat64), 1, true},
		{Limit(math.MaxFloat64 / 2), 1, Limit(math.MaxFloat64 / 2), 1, true},
	}
	for _, tt := range tests {
		l := NewLimiter(tt.limit, tt.burst)
		if l.Limit() != tt.wantLimit || l.Burst() != tt.wantBurst {
			t.Errorf("NewLimiter(%v, %d): Limit %v Burst %d, want %v %d", tt.limit, tt.burst, l.Limit(), l.Burst(), tt.wantLimit, tt.wantBurst)
		}
		if got := l.AllowN(t0, 1); got != tt.allowOne {
			t.Errorf("NewLimiter(%v, %d).AllowN(1) = %v, want %v", tt.limit, tt.burst, got, tt.allowOne)
		}
		// Whatever the input, nothing jams open: a burst's worth more is
		// refused at the same instant (except at Inf), and nothing panics.
		if tt.wantLimit != Inf && l.AllowN(t0, max(tt.wantBurst, 1)) {
			t.Errorf("NewLimiter(%v, %d): admitted more than the burst at one instant", tt.limit, tt.burst)
		}
		for _, d := range []time.Duration{math.MinInt64, -1, 0, 1, math.MaxInt64} {
			now := t0.Add(d)
			tok := l.TokensAt(now)
			if math.IsNaN(tok) || tok > float64(l.Burst()) {
				t.Errorf("NewLimiter(%v, %d).TokensAt(t0%+v) = %v", tt.limit, tt.burst, d, tok)
			}
			r := l.ReserveN(now, 1)
			if d := r.DelayFrom(now); d < 0 {
				t.Errorf("negative delay %v", d)
			}
			r.CancelAt(now)
		}
	}
	// Huge times: the zero time, year 9999, durations at the int64 edges.
	l := NewLimiter(1, 1)
	for _, now := range []time.Time{{}, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), time.Unix(math.MinInt64/2, 0), time.Unix(math.MaxInt64/2, 0)} {
		l.AllowN(now, 1)
		l.ReserveN(now, 1).CancelAt(now)
		l.SetLimitAt(now, 2)
		l.SetBurstAt(now, 2)
		if tok := l.TokensAt(now); math.IsNaN(tok) || tok > 2 {
			t.Errorf("TokensAt(%v) = %v", now, tok)
		}
	}
}

func TestZeroValueLimiter(t *testing.T) {
	var l Limiter
	if l.Allow() || l.AllowN(t0, 1) || l.Reserve().OK() || l.Limit() != 0 || l.Burst() != 0 || l.Tokens() != 0 {
		t.Fatal("the zero Limiter must reject every event")
	}
	if !l.AllowN(t0, 0) {
		t.Fatal("n == 0 is allowed on the zero Limiter, as in x/time/rate")
	}
	if err := l.Wait(context.Background()); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Fatalf("Wait on the zero Limiter: %v, want ErrInvalidCost", err)
	}
	l.SetBurstAt(t0, 2) // the new room is empty and refills at limit 0: nothing
	if l.AllowN(t0.Add(time.Hour), 1) {
		t.Fatal("burst without a limit admitted an event")
	}
	l.SetLimitAt(t0.Add(time.Hour), 1)
	runSteps(t, &l, []step{
		{time.Hour, "allow", 1, false, 0},
		{time.Hour + time.Second, "allow", 1, true, 0},
		{time.Hour + 3*time.Second, "tokens", 0, true, 2},
	})
}

func TestSetters(t *testing.T) {
	s := time.Second
	t.Run("SetLimitAt keeps the tokens", func(t *testing.T) {
		l := NewLimiter(1, 10)
		l.AllowN(t0, 10)
		l.SetLimitAt(t0.Add(2*s), 100) // 2 tokens gathered at 1/s
		runSteps(t, l, []step{{2 * s, "tokens", 0, true, 2}, {2*s + 10*time.Millisecond, "tokens", 0, true, 3}})
	})
	t.Run("SetBurstAt up does not fill, down caps", func(t *testing.T) {
		l := NewLimiter(1, 2)
		l.SetBurstAt(t0, 5)
		runSteps(t, l, []step{{0, "tokens", 0, true, 2}, {2 * s, "tokens", 0, true, 4}, {10 * s, "tokens", 0, true, 5}})
		l.SetBurstAt(t0.Add(10*s), 1)
		runSteps(t, l, []step{{10 * s, "tokens", 0, true, 1}, {10 * s, "allow", 1, true, 0}, {10 * s, "allow", 1, false, 0}})
	})
	t.Run("a setter's time never goes back", func(t *testing.T) {
		l := NewLimiter(1, 10)
		l.AllowN(t0, 10)
		l.SetLimitAt(t0.Add(5*s), 1)
		l.SetLimitAt(t0, 1000) // taken as t0+5s: no credit at 1000/s for those 5 s
		runSteps(t, l, []step{{5 * s, "tokens", 0, true, 5}})
	})
	t.Run("Inf and back", func(t *testing.T) {
		l := NewLimiter(1, 3)
		l.AllowN(t0, 3)
		l.SetLimitAt(t0, Inf)
		runSteps(t, l, []step{{0, "allow", 100, true, 0}})
		l.SetLimitAt(t0, 1) // same instant: the bucket is still empty
		runSteps(t, l, []step{{0, "tokens", 0, true, 0}})
		l.SetLimitAt(t0, Inf)
		l.SetLimitAt(t0.Add(1), 1) // any time at Inf fills the bucket
		runSteps(t, l, []step{{1, "tokens", 0, true, 3}})
	})
	t.Run("zero and back", func(t *testing.T) {
		l := NewLimiter(1, 3)
		l.AllowN(t0, 2)
		l.SetLimitAt(t0, 0)
		runSteps(t, l, []step{{time.Hour, "tokens", 0, true, 1}})
		l.SetLimitAt(t0.Add(time.Hour), 1)
		runSteps(t, l, []step{{time.Hour + 2*s, "tokens", 0, true, 3}})
	})
}

func TestReservationCancel(t *testing.T) {
	ms := time.Millisecond
	t.Run("LIFO cancels restore everything", func(t *testing.T) {
		l := NewLimiter(10, 2)
		rs := []*Reservation{l.ReserveN(t0, 2), l.ReserveN(t0, 1), l.ReserveN(t0, 2)}
		runSteps(t, l, []step{{0, "tokens", 0, true, -3}})
		for i := len(rs) - 1; i >= 0; i-- {
			rs[i].CancelAt(t0)
		}
		runSteps(t, l, []step{{0, "tokens", 0, true, 2}})
	})
	t.Run("once only", func(t *testing.T) {
		l := NewLimiter(10, 2)
		l.AllowN(t0, 2)
		r := l.ReserveN(t0, 1)
		r.CancelAt(t0)
		r.CancelAt(t0) // x/time/rate would credit again
		r.Cancel()
		runSteps(t, l, []step{{0, "tokens", 0, true, 0}})
	})
	t.Run("never above the burst", func(t *testing.T) {
		l := NewLimiter(10, 2)
		r := l.ReserveN(t0, 2)
		r.CancelAt(t0)
		runSteps(t, l, []step{{0, "tokens", 0, true, 2}, {time.Second, "tokens", 0, true, 2}})
	})
	t.Run("after its time nothing", func(t *testing.T) {
		l := NewLimiter(10, 1)
		l.AllowN(t0, 1)
		r := l.ReserveN(t0, 1) // acts at 100ms
		r.CancelAt(t0.Add(101 * ms))
		runSteps(t, l, []step{{101 * ms, "tokens", 0, true, 0.01}})
	})
	t.Run("later reservations behind it keep their share", func(t *testing.T) {
		l := NewLimiter(10, 1)
		l.AllowN(t0, 1)
		r1 := l.ReserveN(t0, 1) // acts at 100ms
		l.ReserveN(t0, 1)       // acts at 200ms, scheduled behind r1
		r1.CancelAt(t0)
		runSteps(t, l, []step{{0, "tokens", 0, true, -2}, {0, "reserve", 1, true, float64(300 * ms)}})
	})
	t.Run("after a setter nothing", func(t *testing.T) {
		l := NewLimiter(10, 1)
		l.AllowN(t0, 1)
		r := l.ReserveN(t0, 1)
		l.SetBurstAt(t0, 1)
		r.CancelAt(t0)
		runSteps(t, l, []step{{0, "tokens", 0, true, -1}})
	})
	t.Run("refused and zero value", func(t *testing.T) {
		l := NewLimiter(10, 1)
		l.ReserveN(t0, 5).CancelAt(t0)
		var zero Reservation
		zero.Cancel()
		if zero.OK() || zero.Delay() != InfDuration {
			t.Fatal("zero Reservation must be not OK with an infinite delay")
		}
		runSteps(t, l, []step{{0, "tokens", 0, true, 1}})
	})
	t.Run("limit zero", func(t *testing.T) {
		l := NewLimiter(0, 3)
		r := l.ReserveN(t0, 2)
		r.CancelAt(t0)
		runSteps(t, l, []step{{0, "tokens", 0, true, 3}})
	})
}

// TestTimeJumps: a caller with an older time sees fewer tokens, never more,
// and moves nothing back; the same calls credit x/time/rate again and again
// (Go issues 71360, 65508).
func TestTimeJumps(t *testing.T) {
	for _, back := range []time.Duration{time.Nanosecond, time.Second, time.Hour} {
		l := NewLimiter(10, 5)
		x := rate.NewLimiter(10, 5)
		admitted, xAdmitted := 0, 0
		// Two callers, one a step behind the other, alternate for 1 s.
		for i := range 1000 {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			for _, at := range []time.Time{now, now.Add(-back)} {
				if l.AllowN(at, 1) {
					admitted++
				}
				if x.AllowN(at, 1) {
					xAdmitted++
				}
			}
		}
		// Over [t0-back, t0+999ms]: at most burst + rate x elapsed.
		bound := 5 + 10*(999*time.Millisecond+back).Seconds()
		if float64(admitted) > bound {
			t.Errorf("back %v: admitted %d > %v", back, admitted, bound)
		}
		if admitted < 14 {
			t.Errorf("back %v: admitted %d, want the 15 the present caller alone gets", back, admitted)
		}
		t.Logf("callers %v apart: floodgate admitted %d (bound %.0f), x/time/rate %d", back, admitted, bound, xAdmitted)
	}

	t.Run("backwards", func(t *testing.T) {
		l := NewLimiter(1, 2)
		l.AllowN(t0, 2)
		runSteps(t, l, []step{
			{-time.Second, "allow", 1, false, 0}, {-time.Hour, "allow", 1, false, 0},
			{-time.Hour, "tokens", 0, true, -3600},
			{-time.Hour, "reserve", 1, true, float64(time.Hour + time.Second)}, // acts at t0+1s, like a present caller
			{2 * time.Second, "tokens", 0, true, 1},
		})
	})
	t.Run("forward ten years", func(t *testing.T) {
		l := NewLimiter(1, 2)
		year := 365 * 24 * time.Hour
		runSteps(t, l, []step{
			{10 * year, "allow", 2, true, 0},
			{10*year + time.Second, "tokens", 0, true, 1},
			// Back in the present, the schedule is ten years ahead: no
			// credit, the limiter is in debt until the clock gets there.
			{time.Second, "allow", 1, false, 0},
			{0, "tokens", 0, true, 2 - float64(10*year/time.Second) - 2},
			{10*year + 2*time.Second, "allow", 2, true, 0},
		})
	})
	t.Run("re-basing far apart keeps nanosecond decisions", func(t *testing.T) {
		year := 365 * 24 * time.Hour
		// Far forwards the limiter always re-bases; far backwards (t0-40y
		// is years before the limiter was made) only with a full bucket,
		// which is exact. Either way 1 token per ns, to the nanosecond.
		l := NewLimiter(1e9, 1)
		for _, at := range []time.Duration{-40 * year, -40*year + time.Hour, 0, time.Hour, 3000 * time.Hour, 100 * year} {
			runSteps(t, l, []step{
				{at, "allow", 1, true, 0}, {at, "allow", 1, false, 0},
				{at + 1, "allow", 1, true, 0}, {at + 1, "allow", 1, false, 0},
				{at + 1, "reserve", 1, true, 1},
			})
		}
	})
}

// TestConcurrentFrozenTime: 1000 goroutines call AllowN at one fixed time, so
// nothing refills: exactly burst are admitted.
func TestConcurrentFrozenTime(t *testing.T) {
	for _, burst := range []int{0, 1, 100, 999, 1000, 5000} {
		l := NewLimiter(1, burst)
		var admitted atomic.Int64
		var start, done sync.WaitGroup
		start.Add(1)
		for range 1000 {
			done.Go(func() {
				start.Wait()
				if l.AllowN(t0, 1) {
					admitted.Add(1)
				}
			})
		}
		start.Done()
		done.Wait()
		if want := min(int64(burst), 1000); admitted.Load() != want {
			t.Errorf("burst %d: admitted %d, want %d", burst, admitted.Load(), want)
		}
	}
}

// TestAllowOnTheClock drives Allow, which reads floodgate's clock, inside a
// synctest bubble where time only moves on sleeps: the same decisions as
// AllowN at explicit times, and 1000 concurrent calls at one instant admit
// exactly the burst.
func TestAllowOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, burst := range []int{1, 3, 100} {
			l, twin := NewLimiter(10, burst), NewLimiter(10, burst)
			start := time.Now()
			for i := range 200 {
				if i%7 == 0 {
					time.Sleep(time.Duration(i%5) * 40 * time.Millisecond)
				}
				got, want := l.Allow(), twin.AllowN(time.Now(), 1)
				if got != want {
					t.Fatalf("burst %d, call %d at +%v: Allow %v, AllowN %v", burst, i, time.Since(start), got, want)
				}
			}
		}
		for _, burst := range []int{0, 1, 100, 999, 1000} {
			l := NewLimiter(1, burst)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 1000 {
				wg.Go(func() {
					if l.Allow() {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if admitted.Load() != int64(burst) {
				t.Errorf("burst %d: 1000 concurrent Allow at one instant admitted %d", burst, admitted.Load())
			}
		}
	})
}

// TestConcurrentWithSetters: readers never see a retired generation, and a
// setter racing with takers neither loses nor invents tokens beyond the
// largest burst.
func TestConcurrentWithSetters(t *testing.T) {
	l := NewLimiter(1, 50)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if l.AllowN(t0, 1) {
					admitted.Add(1)
				}
				l.TokensAt(t0)
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			l.SetBurstAt(t0, 50-i%3) // never above 50: the bucket never grows
			l.SetLimitAt(t0, Limit(1+i%5))
		}
	})
	wg.Wait()
	if admitted.Load() > 50 {
		t.Fatalf("admitted %d at a frozen time, more than the burst of 50", admitted.Load())
	}
	// Tokens are float64: a residue of rounding (7e-15 seen) is no token.
	if tok := l.TokensAt(t0); tok < 0 || float64(admitted.Load())+tok > 50+1e-9 {
		t.Fatalf("admitted %d and %v left: tokens invented", admitted.Load(), tok)
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	l := NewLimiter(1e9, 1<<30)
	if a := testing.AllocsPerRun(1000, func() { l.Allow() }); a != 0 {
		t.Errorf("Allow allocates %v times", a)
	}
	if a := testing.AllocsPerRun(1000, func() { l.AllowN(t0, 1) }); a != 0 {
		t.Errorf("AllowN allocates %v times", a)
	}
}

// TestClockMapping: Allow on floodgate's clock and AllowN on time.Now see the
// same bucket.
func TestClockMapping(t *testing.T) {
	l := NewLimiter(Every(time.Hour), 1)
	if !l.Allow() || l.AllowN(time.Now(), 1) || l.Allow() {
		t.Fatal("Allow and AllowN(time.Now()) disagree about one token")
	}
	if d := l.Tokens() - l.TokensAt(time.Now()); math.Abs(d) > 1e-6 {
		t.Fatalf("Tokens and TokensAt(time.Now()) differ by %v", d)
	}
	if d := l.Reserve().Delay(); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("Reserve().Delay() = %v, want about 1h", d)
	}
	if Every(0) != Inf || Every(-1) != Inf || Every(2*time.Second) != 0.5 {
		t.Fatal("Every")
	}
}

func TestWaitN(t *testing.T) {
	t.Run("waits for the tokens", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := NewLimiter(10, 1)
			start := time.Now()
			for range 3 {
				if err := l.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got := time.Since(start); got != 200*time.Millisecond {
				t.Fatalf("3 waits at 10/s with burst 1 took %v, want 200ms", got)
			}
		})
	})
	t.Run("fails fast before the deadline and takes nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := NewLimiter(1, 1)
			l.Allow()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := l.WaitN(ctx, 1)
			if !errors.Is(err, floodgate.ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want ErrWouldExceedDeadline wrapping DeadlineExceeded", err)
			}
			if time.Since(start) != 0 {
				t.Fatal("slept before failing")
			}
			if tok := l.Tokens(); tok != 0 {
				t.Fatalf("tokens %v after a refused wait, want 0 (nothing taken)", tok)
			}
		})
	})
	t.Run("a deadline just far enough", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := NewLimiter(1, 1)
			l.Allow()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := l.WaitN(ctx, 1); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("abandoned wait gives the tokens back", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := NewLimiter(1, 2)
			l.Allow()
			l.Allow()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error)
			go func() { errc <- l.WaitN(ctx, 2) }()
			time.Sleep(500 * time.Millisecond)
			synctest.Wait()
			if tok := l.Tokens(); tok != -1.5 {
				t.Fatalf("tokens %v while waiting, want -1.5", tok)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if tok := l.Tokens(); tok != 0.5 {
				t.Fatalf("tokens %v after the abandoned wait, want 0.5", tok)
			}
		})
	})
	t.Run("bad n", func(t *testing.T) {
		l := NewLimiter(1, 2)
		for _, n := range []int{-1, 3} {
			if err := l.WaitN(context.Background(), n); !errors.Is(err, floodgate.ErrInvalidCost) {
				t.Errorf("WaitN(%d) = %v, want ErrInvalidCost", n, err)
			}
		}
		if err := NewLimiter(Inf, 0).WaitN(context.Background(), 1000); err != nil {
			t.Errorf("WaitN at Inf: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait on a cancelled context: %v", err)
		}
	})
	t.Run("limit zero pauses until a setter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := NewLimiter(0, 1)
			l.Allow()
			done := make(chan error)
			go func() { done <- l.Wait(context.Background()) }()
			time.Sleep(time.Hour)
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("Wait returned %v at limit 0", err)
			default:
			}
			l.SetLimit(10)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			l.SetLimit(0)
			if err := l.WaitN(ctx, 1); !errors.Is(err, floodgate.ErrWouldExceedDeadline) {
				t.Fatalf("WaitN at limit 0 with a deadline: %v", err)
			}
		})
	})
}
