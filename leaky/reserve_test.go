package leaky_test

import (
	"cmp"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
)

func mustReservable(t testing.TB, c leaky.Config) algo.Reservable {
	t.Helper()
	var r algo.Reservable = mustAlg(t, c)
	return r
}

const never = algo.MaxReserveArg

// nginx's default mode ("rate=1r/s; limit_req zone=z burst=5;") queues the
// burst with Delays 0..5s and rejects the 7th. A reservation queues beyond
// the burst at the same spacing: the 7th is served after 6 s, the next one
// after it (FIFO); a wait past maxWait is refused with the wait it would
// have had; a plain request is rejected until the queue has leaked back
// under the burst. Cancelling the last reservation gives it back exactly,
// one in the middle gives back nothing (a reservation is behind it).
func TestReserveBeyondTheBurst(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 5}
	r := mustReservable(t, c)
	a := mustAlg(t, c)
	lim := func(d floodgate.Decision) floodgate.Decision { d.Limit = 6; return d }
	var s algo.State
	step := func(alg algo.Algorithm, at, n int64, want floodgate.Decision) {
		t.Helper()
		var d floodgate.Decision
		s, d = alg.Step(s, at, n)
		require.Equal(t, lim(want), d, "at t0%+dus n=%d", at-t0, n)
		checkInvariants(t, d)
	}
	for i := int64(1); i <= 6; i++ { // exactly as nginx
		step(r.Reserve(never), t0, 1, delayed(6-i, time.Duration(i)*sD, time.Duration(i-1)*sD))
	}
	step(a, t0, 1, deny(0, sD, 6*sD))                         // nginx rejects the 7th
	step(r.Reserve(never), t0, 1, delayed(0, 7*sD, 6*sD))     // a reservation queues it
	step(r.Reserve(7*sec-1), t0, 1, deny(0, 7*sD, 7*sD))      // past maxWait
	step(a, t0, 1, deny(0, 2*sD, 7*sD))                       // under the burst in 2 s
	step(a, t0+sec, 1, deny(0, sD, 6*sD))                     // ... in 1 s
	step(r.Reserve(6*sec), t0+sec, 1, delayed(0, 7*sD, 6*sD)) // served at t0+7s, after the 7th
	// Cancel the last (made at t0+1s, ResetAfter 7s) at t0+1.5s: whole.
	step(r.Cancel(7*sec-500*ms), t0+1500*ms, -1, pass(0, 5500*msD))
	// The same state as if it had never been made.
	step(a, t0+1500*ms, 0, pass(0, 5500*msD))
	step(r.Reserve(never), t0+1500*ms, 1, delayed(0, 6500*msD, 5500*msD))
	// Cancel the 7th (made at t0, ResetAfter 7s): the one just made is
	// behind it, so nothing comes back.
	step(r.Cancel(7*sec-1500*ms), t0+1500*ms, -1, pass(0, 6500*msD))
	step(a, t0+1500*ms, 0, pass(0, 6500*msD))
}

// nodelay ("rate=10r/s; burst=20 nodelay"): 21 pass at once, and
// reservations are then served 100 ms apart.
func TestReserveNoDelaySpacing(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(10), Burst: 20, NoDelay: true}
	r := mustReservable(t, c)
	var s algo.State
	var d floodgate.Decision
	for i := range 25 {
		s, d = r.Reserve(never).Step(s, t0, 1)
		require.True(t, d.Allowed)
		require.Equal(t, time.Duration(max(0, i-20))*100*msD, d.Delay, "reservation %d", i)
	}
}

// Within the burst and maxWait, a reservation decides exactly as Step: the
// same decisions and states on random sequences of plain requests.
func TestReserveWithinBurstIsStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for _, name := range slices.Sorted(maps.Keys(conformanceConfigs)) { // one rng: a fixed order
		c := conformanceConfigs[name]
		a := mustAlg(t, c)
		r := mustReservable(t, c)
		var s algo.State
		now := t0
		for i := range 5_000 {
			now += rng.Int64N(300 * ms)
			n := 1 + rng.Int64N(c.Capacity())
			s2, d := a.Step(s, now, n)
			if !d.Allowed {
				continue
			}
			rs, rd := r.Reserve(int64(d.Delay/time.Microsecond)).Step(s, now, n)
			require.Equal(t, d, rd, "%s step %d", name, i)
			require.Equal(t, s2.W, rs.W, "%s step %d", name, i)
			s = s2
		}
	}
}

// The horizon: a key holds at most min(2^42 milli-requests, 2^40 ms of
// leak) of excess; a reservation that would go beyond is refused with the
// time until it fits, within maxWait.
func TestReserveHorizon(t *testing.T) {
	c := leaky.Config{Rate: floodgate.Rate{N: 1, Per: 1000 * time.Second}, NoDelay: true} // 1 milli-request/s
	r := mustReservable(t, c)
	maxExc := min(int64(1)<<42, 1*(int64(1<<40)/1000)-1000)
	s := algo.State{W: [algo.MaxWords]int64{0, t0 / 1000, maxExc - 500}}
	_, d := r.Reserve(never).Step(s, t0, 1)
	require.False(t, d.Allowed)
	require.Equal(t, 500*time.Second, d.RetryAfter) // 500 milli-requests at 1/s
	s.W[2] = maxExc - 1000
	_, d = r.Reserve(never).Step(s, t0, 1)
	require.True(t, d.Allowed, "%+v", d)
}

// A cancel in the middle of a queue gives back nothing, whatever the
// costs: the reservations behind it keep their times, and the excess is the
// end of the queue. Here the 5 reserved second have 2 behind them; giving
// back 5 less those 2 (as the cancel once did) put the end of the queue at
// t0+9s, before the 2 served at t0+12s, and the 6 in front then found 4 s
// "behind" them (the 2, and 2 s of the hole) and gave back 2 more: the
// reservation of 5 that followed was served at t0+12s with the 2, 7
// requests at once, more than the limit of 6. Only the last of a queue
// comes back, in full; the holes pass unused.
func TestReserveCancelInTheMiddle(t *testing.T) {
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 5}
	r := mustReservable(t, c)
	var s algo.State
	for i, st := range []struct {
		alg  algo.Algorithm
		n    int64
		want floodgate.Decision
	}{
		{r.Reserve(never), 6, delayed(0, 6*sD, 5*sD)},   // served at t0+5s
		{r.Reserve(never), 5, delayed(0, 11*sD, 10*sD)}, // at t0+10s
		{r.Reserve(never), 2, delayed(0, 13*sD, 12*sD)}, // at t0+12s
		{r.Cancel(11 * sec), -5, pass(0, 13*sD)},        // 2 behind it: nothing
		{r.Cancel(6 * sec), -6, pass(0, 13*sD)},         // 7 behind it: nothing
		{r.Reserve(never), 5, delayed(0, 18*sD, 17*sD)}, // after the 2
		{r.Cancel(18 * sec), -5, pass(0, 13*sD)},        // the last: in full
		// The last again, located 300µs early (the Reserve call's
		// latency on the caller's clock): all but 1 ms of leak comes back.
		{r.Cancel(13*sec - 300*us), -2, pass(0, 11001*msD)},
	} {
		var d floodgate.Decision
		s, d = st.alg.Step(s, t0, st.n)
		st.want.Limit = 6
		require.Equal(t, st.want, d, "step %d", i)
	}
}

// leakyAct is a request as the limit sees it: n requests acted on at µs at.
type leakyAct struct{ at, n int64 }

// TestReserveKeepsTheLimit runs random mixes of plain requests, reservations
// and cancellations of pending reservations (with the exact resetIn) on one
// key, each admitted request acted on at now+Delay, and checks that over
// every interval the requests acted on stay within Burst+1 + rate x elapsed
// (in nginx's whole milliseconds), and that no reservation waits longer
// than its maxWait.
func TestReserveKeepsTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 34))
	for _, name := range slices.Sorted(maps.Keys(conformanceConfigs)) { // one rng: a fixed order
		c := conformanceConfigs[name]
		a := mustAlg(t, c)
		r := mustReservable(t, c)
		rate, _ := leaky.MilliRate(c)
		drain := (c.Capacity()*1_000_000 + rate - 1) / rate * ms
		type pend struct {
			leakyAct
			made, reset int64
		}
		for run := range 200 {
			var (
				s       algo.State
				now     = t0
				acts    []leakyAct
				pending []pend
			)
			for range 60 {
				now += rng.Int64N(drain / 4)
				n := 1 + rng.Int64N(c.Capacity())
				var d floodgate.Decision
				switch op := rng.IntN(10); {
				case op < 2:
					if s, d = a.Step(s, now, n); d.Allowed {
						acts = append(acts, leakyAct{now + d.Delay.Microseconds(), n})
					}
				case op < 8:
					maxWait := rng.Int64N(3 * drain)
					s, d = r.Reserve(maxWait).Step(s, now, n)
					if !d.Allowed {
						require.Greater(t, d.RetryAfter.Microseconds(), maxWait, "%s: refused within the horizon: %+v", name, d)
						break
					}
					require.LessOrEqual(t, d.Delay.Microseconds(), maxWait, "%s: %+v", name, d)
					p := pend{leakyAct{now + d.Delay.Microseconds(), n}, now, d.ResetAfter.Microseconds()}
					if d.Delay > 0 {
						pending = append(pending, p)
					} else {
						acts = append(acts, p.leakyAct)
					}
				default:
					pending = slices.DeleteFunc(pending, func(p pend) bool {
						if p.at <= now {
							acts = append(acts, p.leakyAct)
						}
						return p.at <= now
					})
					if len(pending) == 0 {
						continue
					}
					k := rng.IntN(len(pending))
					p := pending[k]
					pending = slices.Delete(pending, k, k+1)
					s, d = r.Cancel(p.reset-(now-p.made)).Step(s, now, -p.n)
					require.True(t, d.Allowed)
				}
				checkInvariants(t, d)
			}
			for _, p := range pending {
				acts = append(acts, p.leakyAct)
			}
			checkLeakyBound(t, name, run, acts, c.Capacity(), rate)
		}
	}
}

func checkLeakyBound(t *testing.T, name string, run int, acts []leakyAct, limit, rate int64) {
	t.Helper()
	slices.SortFunc(acts, func(a, b leakyAct) int { return cmp.Compare(a.at, b.at) })
	for i := range acts {
		sum := int64(0)
		for j := i; j < len(acts); j++ {
			sum += acts[j].n
			elapsedMs := acts[j].at/1000 - acts[i].at/1000
			hi, lo := bits.Mul64(uint64(rate), uint64(elapsedMs))
			q, _ := bits.Div64(hi, lo, 1_000_000)
			if bound := limit + int64(q); sum > bound {
				t.Fatalf("%s run %d: %d requests acted on over %d ms, more than %d", name, run, sum, elapsedMs, bound)
			}
		}
	}
}

// The twins offer the same fast paths as the Algorithm and share its state
// layout; StepState agrees exactly with Step.
func TestReserveTwinFastPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	c := leaky.Config{Name: "twins", Rate: floodgate.PerSecond(10), Burst: 5, Delay: 2}
	r := mustReservable(t, c)
	base := r.Spec()
	for i := range 20_000 {
		var tw algo.Algorithm
		if i%2 == 0 {
			tw = r.Reserve(rng.Int64N(3 * sec))
		} else {
			tw = r.Cancel(rng.Int64N(3*sec) - sec)
		}
		sp := tw.Spec()
		require.Equal(t, base.Namespace, sp.Namespace)
		require.Equal(t, "leaky-bucket+reserve", sp.Name)
		require.Equal(t, "twins", sp.Policy)
		require.Equal(t, base.Capacity, sp.Capacity)
		require.Equal(t, base.Words, sp.Words)
		require.Len(t, sp.Lua.Params, len(base.Lua.Params)+2)
		ns, w, ml, _ := tw.(algo.Layout).Layout()
		require.Equal(t, [3]any{base.Namespace, 3, 0}, [3]any{ns, w, ml})
		now := t0 + rng.Int64N(sec)
		var s algo.State
		if rng.IntN(10) != 0 {
			s.W[1] = randNear(rng, now/1000, 120_000)
			s.W[2] = randNear(rng, 0, 12_000)
			s.W[0] = randNear(rng, now, 10*sec)
		}
		n := rng.Int64N(15) - 7
		next, d := tw.Step(s, now, n)
		in := s
		var d2 floodgate.Decision
		d2.Limit = -1
		tw.(algo.StateStepper).StepState(&in, now, n, &d2)
		require.Equal(t, next.W, in.W, "step %d", i)
		require.Equal(t, d, d2, "step %d", i)
		checkInvariants(t, d)
	}
}
