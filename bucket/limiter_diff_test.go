package bucket

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The differential test runs floodgate's Limiter and x/time/rate's side by
// side on random sequences with explicit, non-decreasing times and requires
// the same decisions and the same delays.
//
// Two kinds of difference are expected and checked for what they are:
//   - boundary cases: the tokens exist within about 1 ns of the request
//     (x/time/rate truncates its waits to whole nanoseconds and so admits up
//     to 1 ns early; floodgate rounds up). Delays may differ by 1 ns, plus the
//     float64 rounding of the magnitudes involved (see tolerance). When the
//     two disagree on a decision at a boundary the pair is rebuilt fresh,
//     since their states then differ by the tokens of that request;
//   - documented differences: a reservation that could never be served
//     (limit 0, or a wait of 2^63 ns or more) is OK in x/time/rate with an
//     infinite delay and takes its tokens; floodgate refuses it and takes
//     nothing. The pair is rebuilt after it too.

// diffPair is one floodgate limiter and one x/time/rate limiter that should
// behave the same.
type diffPair struct {
	f     *Limiter
	x     *rate.Limiter
	limit float64
	burst int
	scale float64   // the largest token magnitude the pair has seen
	slack float64   // tokens the pair may have drifted apart by cancels
	res   []diffRes // reservations made since the last setter
}

type diffRes struct {
	f *Reservation
	x *rate.Reservation
}

func newDiffPair(limit float64, burst int) *diffPair {
	return &diffPair{f: NewLimiter(Limit(limit), burst), x: rate.NewLimiter(rate.Limit(limit), burst), limit: limit, burst: burst, scale: float64(burst) + 1}
}

// interval is the nanoseconds per token (for drawing time steps), 1 ms for
// the limits without one.
func interval(limit float64) float64 {
	if limit <= 0 || limit >= float64(Inf) {
		return 1e6
	}
	return 1e9 / limit
}

// tolerance is how far two delays (ns) computed with float64 by different
// formulas may honestly differ: 1 ns of rounding to whole nanoseconds, plus
// the float64 rounding of the magnitudes involved. x/time/rate keeps a token
// count, floodgate a time; both are exact to about 1e-16 of the largest
// magnitude the state has held (scale, in tokens: a burst of 400,000 leaves
// an error near 1e-10 tokens, which a later limit of 1e-9/s turns into tens
// of milliseconds), and a delay is exact to about 1e-16 of itself. Each
// cancel adds 1 ns of slack: x/time/rate computes what a cancel gives back
// from its reservation times truncated to whole nanoseconds, floodgate from
// its exact TAT (kept in tokens: 1 ns at the limit of the time).
func (p *diffPair) tolerance(delay float64) float64 {
	tol := 1 + 1e-13*math.Abs(delay)
	if p.limit > 0 && p.limit < float64(Inf) {
		tol += p.tokenTolerance() * 1e9 / p.limit
	}
	return tol
}

// tokenTolerance is the same in tokens, without the nanosecond of rounding.
func (p *diffPair) tokenTolerance() float64 { return 1e-14*p.scale + p.slack }

// atBoundary reports whether a request for n tokens when x/time/rate holds
// xTokens is a boundary case: the tokens exist within about 1 ns (or, at
// limit 0, within the float64 noise of the token count).
func (p *diffPair) atBoundary(n int, xTokens float64) bool {
	missing := float64(n) - xTokens
	switch {
	case p.limit >= float64(Inf):
		return false
	case p.limit > 0:
		wait := missing * 1e9 / p.limit
		return math.Abs(wait) <= p.tolerance(wait)
	}
	return math.Abs(missing) <= p.tokenTolerance()
}

type diffStats struct {
	ops, allows, reserves, cancels, sets int
	boundary                             int // decisions that differ within ~1 ns of the boundary
	rounding                             int // delays that differ by the rounding to whole ns
	never                                int // never-servable reservations (documented difference)
	rebuilt                              int
}

func TestDifferentialXRate(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if testing.Short() {
		seeds = seeds[:2]
	}
	var st diffStats
	for _, seed := range seeds {
		for i := range uint64(60) {
			if diffOnly != [2]uint64{} && diffOnly != [2]uint64{seed, i} {
				continue
			}
			t.Run("", func(t *testing.T) {
				defer func() {
					if t.Failed() {
						t.Logf("failing sequence: seed %d, index %d", seed, i)
					}
				}()
				runDiffSequence(t, rand.New(rand.NewPCG(seed, i)), &st)
			})
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	t.Logf("differential: %d ops (%d allow, %d reserve, %d cancel, %d set); %d decisions differ at a boundary within ~1 ns; %d delays differ by rounding to whole ns; %d never-servable reservations (documented difference); %d rebuilds",
		st.ops, st.allows, st.reserves, st.cancels, st.sets, st.boundary, st.rounding, st.never, st.rebuilt)
	if st.allows == 0 || st.reserves == 0 || st.cancels == 0 || st.sets == 0 {
		t.Fatalf("generator does not cover every operation: %+v", st)
	}
}

// drawLimit picks a limit: log-uniform over 1e-9..1e9 mostly, and the edge
// cases (0, Inf, whole-nanosecond intervals) sometimes.
func drawLimit(rng *rand.Rand) float64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return float64(Inf)
	case 2:
		return float64(Every(time.Duration(1 + rng.Int64N(int64(time.Second)))))
	case 3:
		return []float64{1e-9, 1e9, 1, 3, 7e8}[rng.IntN(5)]
	}
	return math.Pow(10, -9+18*rng.Float64())
}

func drawBurst(rng *rand.Rand) int {
	switch rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return 1 + rng.IntN(1_000_000)
	}
	return 1 + rng.IntN(20)
}

func runDiffSequence(t *testing.T, rng *rand.Rand, st *diffStats) {
	t.Helper()
	p := newDiffPair(drawLimit(rng), drawBurst(rng))
	// A wall time without a monotonic reading, far from the real clock: both
	// limiters see exactly the same times.
	now := time.Unix(1_800_000_000+rng.Int64N(1_000_000), rng.Int64N(1e9))
	const maxStep = 1.5e16 // ns: 200 steps stay within a century
	for range 200 {
		st.ops++
		T := interval(p.limit)
		switch rng.IntN(5) {
		case 0: // same instant
		case 1:
			now = now.Add(time.Duration(rng.Int64N(3)))
		default:
			k := []float64{0.01, 0.3, 1, 3, float64(p.burst) + 1}[rng.IntN(5)]
			now = now.Add(time.Duration(min(rng.Float64()*k*T, maxStep)))
		}
		n := rng.IntN(4)
		if rng.IntN(6) == 0 {
			n = rng.IntN(p.burst + 3)
		}
		op := rng.IntN(20)
		p.scale = max(p.scale, float64(p.burst), float64(n), math.Abs(p.x.TokensAt(now)))
		if diffTrace {
			t.Logf("t=%d n=%d op=%d limit=%v burst=%d ftok=%v xtok=%v", now.UnixNano(), n, op, p.limit, p.burst, p.f.TokensAt(now), p.x.TokensAt(now))
		}
		switch {
		case op < 9:
			st.allows++
			xTokens := p.x.TokensAt(now)
			fok, xok := p.f.AllowN(now, n), p.x.AllowN(now, n)
			if fok != xok {
				if p.atBoundary(n, xTokens) {
					st.boundary++
					p = p.rebuild(st)
					continue
				}
				t.Fatalf("AllowN(%v, %d) limit %v burst %d: floodgate %v, x/time/rate %v (x tokens %v, floodgate tokens %v)",
					now, n, p.limit, p.burst, fok, xok, xTokens, p.f.TokensAt(now))
			}
		case op < 15:
			st.reserves++
			xTokens := p.x.TokensAt(now)
			fr, xr := p.f.ReserveN(now, n), p.x.ReserveN(now, n)
			xd, fd := xr.DelayFrom(now), fr.DelayFrom(now)
			if xr.OK() && xd == rate.InfDuration {
				// Documented difference: never servable.
				if fr.OK() && p.atBoundary(n, xTokens) {
					st.boundary++
					p = p.rebuild(st)
					continue
				}
				if fr.OK() {
					t.Fatalf("ReserveN(%v, %d) limit %v burst %d: x/time/rate grants an infinite wait, floodgate should refuse, got delay %v", now, n, p.limit, p.burst, fd)
				}
				st.never++
				p = p.rebuild(st)
				continue
			}
			if fr.OK() != xr.OK() && p.atBoundary(n, xTokens) {
				st.boundary++
				p = p.rebuild(st)
				continue
			}
			if fr.OK() != xr.OK() {
				t.Fatalf("ReserveN(%v, %d) limit %v burst %d: OK floodgate %v, x/time/rate %v (delays %v, %v)", now, n, p.limit, p.burst, fr.OK(), xr.OK(), fd, xd)
			}
			if !fr.OK() {
				continue
			}
			switch diff, tol := math.Abs(float64(fd-xd)), p.tolerance(float64(xd)); {
			case diff == 0:
			case diff <= tol:
				st.rounding++ // floodgate rounds up, x/time/rate truncates
			case diff <= tol+1 && nearInteger((float64(n)-xTokens)*T, tol-1):
				// The exact wait is a whole number of nanoseconds and the
				// float64 noise of the two formulas falls on either side of
				// it: truncated down by one, rounded up by one.
				st.rounding++
			default:
				t.Fatalf("ReserveN(%v, %d) limit %v burst %d: delay floodgate %v, x/time/rate %v (diff %v ns)", now, n, p.limit, p.burst, fd, xd, diff)
			}
			p.res = append(p.res, diffRes{fr, xr})
		case op < 16:
			if len(p.res) == 0 {
				continue
			}
			// Only the latest reservation, as an abandoned wait does, and
			// then no older one: after a cancel, x/time/rate moves its
			// latest scheduled time back only when it equals, to the
			// nanosecond, the cancelled reservation's truncated time, which
			// 1 ns of truncation often defeats, so chains of cancels differ
			// by design. Cancels in any order are checked by the invariant
			// tests instead.
			st.cancels++
			r := p.res[len(p.res)-1]
			p.res = nil
			// A reservation within 1 ns of its time to act is a boundary
			// case: floodgate's time is rounded up, x/time/rate's truncated,
			// so one may still cancel what the other deems acted upon.
			nearAct := r.f.DelayFrom(now) <= 1 || r.x.DelayFrom(now) <= 1
			r.f.CancelAt(now)
			r.x.CancelAt(now)
			if nearAct && math.Abs(p.f.TokensAt(now)-p.x.TokensAt(now))*T > p.tolerance(0) {
				st.boundary++
				p = p.rebuild(st)
				continue
			}
			if diffTrace {
				t.Logf("cancel: delays f %v x %v; tokens after f %v x %v", r.f.DelayFrom(now), r.x.DelayFrom(now), p.f.TokensAt(now), p.x.TokensAt(now))
			}
			if p.limit > 0 && p.limit < float64(Inf) {
				p.slack += p.limit * 1e-9
			}
		case op < 17:
			ft, xt := p.f.TokensAt(now), p.x.TokensAt(now)
			if p.limit > 0 && p.limit < float64(Inf) {
				if diff := math.Abs(ft-xt) * T; diff > p.tolerance(math.Abs(xt)*T) {
					t.Fatalf("TokensAt(%v) limit %v burst %d: floodgate %v, x/time/rate %v", now, p.limit, p.burst, ft, xt)
				}
			}
		case op < 19:
			st.sets++
			p.limit = drawLimit(rng)
			p.f.SetLimitAt(now, Limit(p.limit))
			p.x.SetLimitAt(now, rate.Limit(p.limit))
			p.res = nil
		default:
			st.sets++
			p.burst = drawBurst(rng)
			p.f.SetBurstAt(now, p.burst)
			p.x.SetBurstAt(now, p.burst)
			p.res = nil
		}
	}
}

// diffTrace and diffOnly help to debug one failing sequence.
var (
	diffTrace = false
	diffOnly  = [2]uint64{}
)

// nearInteger reports whether x is within noise (plus 1e-3) of a whole number.
func nearInteger(x, noise float64) bool {
	return math.Abs(x-math.Round(x)) <= noise+1e-3
}

func (p *diffPair) rebuild(st *diffStats) *diffPair {
	st.rebuilt++
	return newDiffPair(p.limit, p.burst)
}
