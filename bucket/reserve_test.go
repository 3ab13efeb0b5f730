package bucket_test

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/algo"
)

func mustReservable(t testing.TB, c bucket.Config) algo.Reservable {
	t.Helper()
	r, ok := mustKeyedAlg(t, c).(algo.Reservable)
	if !ok {
		t.Fatalf("%+v: the token bucket does not implement algo.Reservable", c)
	}
	return r
}

// TestReserveStepTable walks one key of a bucket of 2 refilling 1 per
// 100ms through reservations: the burst at once, then one interval apart,
// FIFO; a wait past maxWait is refused with the wait it would have had; a
// plain take queues behind the reservations; cancelling the last one gives
// it back whole, one in the middle only what nobody is scheduled on.
func TestReserveStepTable(t *testing.T) {
	const iv = 100 * time.Millisecond
	c := bucket.Config{Rate: floodgate.Rate{N: 10, Per: time.Second}, Burst: 2}
	alg := mustReservable(t, c)
	const never = algo.MaxReserveArg
	type row struct {
		name string
		at   int64 // µs after keyedEpoch
		alg  algo.Algorithm
		n    int64
		want floodgate.Decision
	}
	d := func(allowed bool, rem int64, retry, reset, delay time.Duration) floodgate.Decision {
		return floodgate.Decision{Allowed: allowed, Limit: 2, Remaining: rem, RetryAfter: retry, ResetAfter: reset, Delay: delay}
	}
	rows := []row{
		{"burst at once", 0, alg.Reserve(never), 2, d(true, 0, 0, 2*iv, 0)},
		{"first in the queue", 0, alg.Reserve(never), 1, d(true, 0, 0, 3*iv, iv)},
		{"second in the queue", 0, alg.Reserve(never), 1, d(true, 0, 0, 4*iv, 2*iv)},
		{"past maxWait: the wait it would have", 0, alg.Reserve(int64(3*iv/time.Microsecond) - 1), 1, d(false, 0, 3*iv, 4*iv, 0)},
		{"maxWait exactly", 0, alg.Reserve(int64(3 * iv / time.Microsecond)), 1, d(true, 0, 0, 5*iv, 3*iv)},
		{"a take queues behind", 0, alg, 1, d(false, 0, 4*iv, 5*iv, 0)},
		{"peek on a queue", 0, alg, 0, d(true, 0, 0, 5*iv, 0)},
		{"reserve(0) is a take", 0, alg.Reserve(0), 1, d(false, 0, 4*iv, 5*iv, 0)},
		// The last reservation (ResetAfter 5iv, made at 0) is given back
		// whole at 50ms.
		{"cancel the last", 50_000, alg.Cancel(int64(5*iv/time.Microsecond) - 50_000), -1, d(true, 0, 0, 4*iv-iv/2, 0)},
		// The first queued one (ResetAfter 3iv) has one reservation
		// behind it: it gives back nothing.
		{"cancel the first of two", 50_000, alg.Cancel(int64(3*iv/time.Microsecond) - 50_000), -1, d(true, 0, 0, 4*iv-iv/2, 0)},
		{"the next waits behind both", 50_000, alg.Reserve(never), 1, d(true, 0, 0, 5*iv-iv/2, 3*iv-iv/2)},
		{"refund through the twin", 50_000, alg.Reserve(never), -1, d(true, 0, 0, 4*iv-iv/2, 0)},
	}
	var s algo.State
	for _, r := range rows {
		var got floodgate.Decision
		s, got = r.alg.Step(s, keyedEpoch+r.at, r.n)
		if got != r.want {
			t.Fatalf("%s: got %+v, want %+v", r.name, got, r.want)
		}
	}
}

// A cancel in the middle of a queue gives back nothing, whatever the
// costs: the reservations behind it keep their times, and the TAT is the
// end of the queue. Here the second 4 reserved have 1 behind them; giving
// back 4 less that 1 (as the cancel once did, like x/time/rate's CancelAt)
// put the TAT at 10iv, before the 1 served at 9iv (TAT 13iv), and the first
// 4 queued then found only 2iv behind them and gave back 2 more: the next
// 4 and 1 reserved were served at 8iv and 9iv with the 1, 6 units within an
// interval, more than the burst of 4 and one interval's refill. Only the
// last of a queue comes back, in full; the holes pass unused.
func TestReserveCancelInTheMiddle(t *testing.T) {
	const iv = 100 * time.Millisecond
	c := bucket.Config{Rate: floodgate.Rate{N: 10, Per: time.Second}, Burst: 4}
	alg := mustReservable(t, c)
	const never = algo.MaxReserveArg
	in := func(x time.Duration) int64 { return int64(x / time.Microsecond) }
	d := func(reset, delay time.Duration) floodgate.Decision {
		return floodgate.Decision{Allowed: true, Limit: 4, ResetAfter: reset, Delay: delay}
	}
	var s algo.State
	for i, st := range []struct {
		alg  algo.Algorithm
		n    int64
		want floodgate.Decision
	}{
		{alg.Reserve(never), 4, d(4*iv, 0)},
		{alg.Reserve(never), 4, d(8*iv, 4*iv)},     // served at 4iv
		{alg.Reserve(never), 4, d(12*iv, 8*iv)},    // at 8iv
		{alg.Reserve(never), 1, d(13*iv, 9*iv)},    // at 9iv
		{alg.Cancel(in(12 * iv)), -4, d(13*iv, 0)}, // 1 behind it: nothing
		{alg.Cancel(in(8 * iv)), -4, d(13*iv, 0)},  // 5 behind it: nothing
		{alg.Reserve(never), 4, d(17*iv, 13*iv)},   // after the 1
		{alg.Reserve(never), 1, d(18*iv, 14*iv)},
		{alg.Cancel(in(18 * iv)), -1, d(17*iv, 0)}, // the last: in full
		// The last again, located 300µs early (the Reserve call's
		// latency on the caller's clock): all but 300µs comes back.
		{alg.Cancel(in(17*iv) - 300), -4, d(13*iv+300*time.Microsecond, 0)},
	} {
		var got floodgate.Decision
		s, got = st.alg.Step(s, keyedEpoch, st.n)
		if got != st.want {
			t.Fatalf("step %d: got %+v, want %+v", i, got, st.want)
		}
	}
}

// TestReserveHorizon: a reservation never queues beyond the horizon,
// max(15 min, 64 x burst x interval); one refused for the horizon alone
// gets a RetryAfter no longer than maxWait, when it fits. A TAT within the
// horizon survives a plain step (the reservations are kept), one beyond
// it is taken for a clock gone back and re-based to empty.
func TestReserveHorizon(t *testing.T) {
	c := bucket.Config{Rate: floodgate.PerSecond(1), Burst: 1}
	alg := mustReservable(t, c)
	const horizon = int64(15 * 60 * usSecond)
	long := alg.Reserve(2 * horizon)
	var s algo.State
	var d floodgate.Decision
	for i := range horizon/usSecond + 1 { // delays 0s .. 900s
		if s, d = long.Step(s, keyedEpoch, 1); !d.Allowed || d.Delay != time.Duration(i)*time.Second {
			t.Fatalf("reservation %d: %+v", i, d)
		}
	}
	if _, d = long.Step(s, keyedEpoch, 1); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("beyond the horizon: %+v, want refused with RetryAfter 1s", d)
	}
	if _, d = long.Step(s, keyedEpoch+usSecond, 1); !d.Allowed || d.Delay != time.Duration(horizon)*time.Microsecond {
		t.Fatalf("after RetryAfter: %+v, want admitted with the horizon's wait", d)
	}
	// A plain peek keeps the queue...
	if s2, d := alg.Step(s, keyedEpoch, 0); s2.W != s.W || !d.Allowed || d.ResetAfter != time.Duration(horizon+usSecond)*time.Microsecond {
		t.Fatalf("peek on a full queue: %+v, state %v -> %v", d, s.W[0], s2.W[0])
	}
	// ... but a TAT beyond tau+horizon is a clock gone back.
	s.W[0] += 1
	if s2, _ := alg.Step(s, keyedEpoch, 0); s2.W[0] != keyedEpoch+usSecond {
		t.Fatalf("TAT beyond the horizon: %d, want re-based to empty (%d)", s2.W[0]-keyedEpoch, usSecond)
	}
	slow := mustReservable(t, bucket.Config{Rate: floodgate.PerHour(1), Burst: 2})
	s = algo.State{}
	for range 2 + 128 { // 64 bursts of 2
		if s, d = slow.Reserve(algo.MaxReserveArg).Step(s, keyedEpoch, 1); !d.Allowed {
			t.Fatalf("slow bucket, within 64 bursts: %+v", d)
		}
	}
	if _, d = slow.Reserve(algo.MaxReserveArg).Step(s, keyedEpoch, 1); d.Allowed {
		t.Fatalf("slow bucket, beyond 64 bursts: %+v", d)
	}
}

// served is a request as the limit sees it: n units acted on at time at.
type served struct {
	id, at, n int64
}

// TestReserveKeepsTheLimit runs random mixes of takes, reservations (each
// acted on at now+Delay), cancellations of pending reservations (with the
// exact resetIn) and refunds of taken units on one key, and checks that
// the units acted on over every interval of time stay within burst + rate
// x interval: reservations never over-admit, and a cancellation never
// gives back what later waiters are scheduled on. It also checks the
// decision invariants and that each reservation waits no longer than its
// maxWait.
func TestReserveKeepsTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, c := range []bucket.Config{
		{Rate: floodgate.PerSecond(10), Burst: 3},
		{Rate: floodgate.PerSecond(1), Burst: 1},
		{Rate: floodgate.Rate{N: 3, Per: 7 * time.Millisecond}, Burst: 5},
		{Rate: floodgate.PerMinute(1), Burst: 4},
	} {
		alg := mustReservable(t, c)
		s1, _ := alg.Step(algo.State{}, keyedEpoch, 1)
		iv := s1.W[0] - keyedEpoch
		tau := iv * c.Burst
		for run := range 200 {
			var (
				s       algo.State
				now     = keyedEpoch
				acts    []served
				pending []served            // reservations not yet acted on
				resets  = map[int64]int64{} // id -> the reservation's ResetAfter (µs)
				made    = map[int64]int64{} // id -> when it was made
			)
			for id := int64(0); id < 60; id++ {
				now += rng.Int64N(2 * iv)
				n := 1 + rng.Int64N(c.Burst)
				var d floodgate.Decision
				switch op := rng.IntN(10); {
				case op < 2: // take
					if s, d = alg.Step(s, now, n); d.Allowed {
						acts = append(acts, served{id, now, n})
					}
				case op < 8: // reserve
					maxWait := rng.Int64N(8 * tau)
					if s, d = alg.Reserve(maxWait).Step(s, now, n); d.Allowed {
						wait := int64(d.Delay / time.Microsecond)
						if wait > maxWait {
							t.Fatalf("%+v: waits %dus, maxWait %dus", c, wait, maxWait)
						}
						p := served{id, now + wait, n}
						if wait > 0 {
							pending = append(pending, p)
							resets[id], made[id] = int64(d.ResetAfter/time.Microsecond), now
						} else {
							acts = append(acts, p)
						}
					} else if ra := int64(d.RetryAfter / time.Microsecond); ra <= maxWait {
						t.Fatalf("%+v: refused within the horizon: %+v", c, d)
					}
				default: // cancel a pending reservation
					kept := pending[:0]
					for _, p := range pending {
						if p.at <= now {
							acts = append(acts, p) // its time came
						} else {
							kept = append(kept, p)
						}
					}
					pending = kept
					if len(pending) == 0 {
						continue
					}
					k := rng.IntN(len(pending))
					p := pending[k]
					pending = append(pending[:k], pending[k+1:]...)
					resetIn := resets[p.id] - (now - made[p.id])
					if s, d = alg.Cancel(resetIn).Step(s, now, -p.n); !d.Allowed {
						t.Fatalf("%+v: cancel denied: %+v", c, d)
					}
				}
				checkKeyedReserveDecision(t, c, d)
			}
			acts = append(acts, pending...)
			checkServedBound(t, c, run, acts, iv, tau)
		}
	}
}

// checkServedBound fails when the units acted on in some interval of time
// exceed burst + interval/iv.
func checkServedBound(t *testing.T, c bucket.Config, run int, acts []served, iv, tau int64) {
	t.Helper()
	slices.SortFunc(acts, func(a, b served) int { return cmp.Compare(a.at, b.at) })
	for i := range acts {
		sum := int64(0)
		for j := i; j < len(acts); j++ {
			sum += acts[j].n
			if span := acts[j].at - acts[i].at; sum*iv > tau+span {
				t.Fatalf("%+v run %d: %d units acted on in [%d, %d]us, more than burst + rate x %dus", c, run, sum, acts[i].at-keyedEpoch, acts[j].at-keyedEpoch, span)
			}
		}
	}
}

func checkKeyedReserveDecision(t *testing.T, c bucket.Config, d floodgate.Decision) {
	t.Helper()
	switch {
	case d.Limit != c.Burst || d.Remaining < 0 || d.Remaining > d.Limit:
		t.Fatalf("Limit or Remaining: %+v", d)
	case d.Allowed != (d.RetryAfter == 0):
		t.Fatalf("Allowed %v with RetryAfter %v", d.Allowed, d.RetryAfter)
	case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 || d.Delay > d.ResetAfter:
		t.Fatalf("bad durations: %+v", d)
	case !d.Allowed && d.Delay != 0:
		t.Fatalf("denied with a Delay: %+v", d)
	}
}

// The twins offer the same fast paths as the bucket; each must agree
// exactly with Spec and Step, and share the bucket's state layout.
func TestReserveTwinFastPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 17))
	c := bucket.Config{Name: "twins", Rate: floodgate.PerSecond(10), Burst: 20}
	alg := mustReservable(t, c)
	base := alg.Spec()
	for i := range 5_000 {
		var tw algo.Algorithm
		if i%2 == 0 {
			tw = alg.Reserve(rng.Int64N(10 * usSecond))
		} else {
			tw = alg.Cancel(rng.Int64N(10*usSecond) - usSecond)
		}
		sp := tw.Spec()
		if sp.Namespace != base.Namespace || sp.Words != 1 || sp.MaxLog != 0 || sp.Capacity != base.Capacity || sp.Policy != "twins" || sp.Name != "token-bucket+reserve" || len(sp.Lua.Params) != 5 {
			t.Fatalf("twin Spec %+v, bucket Spec %+v", sp, base)
		}
		if ns, w, ml, _ := tw.(algo.Layout).Layout(); ns != sp.Namespace || w != 1 || ml != 0 {
			t.Fatalf("Layout() = %x, %d, %d", ns, w, ml)
		}
		tat := keyedEpoch + rng.Int64N(40*usSecond) - 20*usSecond
		now := keyedEpoch
		n := rng.Int64N(2*c.Burst+1) - c.Burst
		next, d := tw.Step(algo.State{W: [algo.MaxWords]int64{tat}}, now, n)
		var dw floodgate.Decision
		if w := tw.(algo.WordStepper).StepWord(tat, now, n, &dw); w != next.W[0] || dw != d {
			t.Fatalf("StepWord = (%d, %+v), Step = (%d, %+v)", w, dw, next.W[0], d)
		}
	}
}
