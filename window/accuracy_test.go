package window

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// poisson returns the arrival times (µs) of a Poisson process of the given
// rate (per µs) over [start, end), from a seeded generator.
func poisson(rng *rand.Rand, rate float64, start, end int64) []int64 {
	var out []int64
	t := float64(start)
	for {
		t += rng.ExpFloat64() / rate
		if int64(t) >= end {
			return out
		}
		out = append(out, int64(t))
	}
}

type accuracy struct {
	requests, falseAllow, falseDeny int // against the exact rule, same history
	diverge                         int // decisions that differ from an independent exact log
	admitted, admittedLog           int
	maxInterval                     int64 // most units the counter admitted in any window-long interval
}

func (a accuracy) misclassified() float64 {
	return 100 * float64(a.falseAllow+a.falseDeny) / float64(a.requests)
}

// measureCounter replays Poisson traffic of load x limit per window through
// the counter and through the exact sliding log.
func measureCounter(t *testing.T, limit int64, w int64, load float64, windows int64, seed uint64) accuracy {
	t.Helper()
	c := Config{Limit: limit, Window: time.Duration(w) * time.Microsecond}
	a := algs(t, c)
	counter, exact := a["counter"], a["log"]
	rng := rand.New(rand.NewPCG(seed, uint64(load*1000)))
	arrivals := poisson(rng, load*float64(limit)/float64(w), t0, t0+windows*w)
	var acc accuracy
	var sc, sl algo.State
	var admitted []int64 // the counter's admissions
	head := 0            // admitted[head:] are in (now-w, now]
	for _, now := range arrivals {
		var dc, dl floodgate.Decision
		sc, dc = counter.Step(sc, now, 1)
		sl, dl = exact.Step(sl, now, 1)
		dec, decLog := dc.Allowed, dl.Allowed
		// The exact rule on the counter's own history: would a sliding
		// window have admitted this request after what the counter let in?
		for head < len(admitted) && admitted[head] <= now-w {
			head++
		}
		want := int64(len(admitted)-head)+1 <= limit
		acc.requests++
		switch {
		case dec && !want:
			acc.falseAllow++
		case !dec && want:
			acc.falseDeny++
		}
		if dec != decLog {
			acc.diverge++
		}
		if dec {
			admitted = append(admitted, now)
			acc.admitted++
		}
		if decLog {
			acc.admittedLog++
		}
	}
	acc.maxInterval = maxInInterval(admitted, w)
	return acc
}

// maxInInterval is the largest number of entries of adm (ascending times)
// in any interval [t, t+w): it checks the interval starting at every entry,
// which covers them all (a busiest interval can be slid right until it
// starts at an entry).
func maxInInterval(adm []int64, w int64) int64 {
	var best int64
	j := 0
	for i := range adm {
		for j < len(adm) && adm[j] < adm[i]+w {
			j++
		}
		best = max(best, int64(j-i))
	}
	return best
}

// TestCounterAccuracy measures the sliding-window counter against the exact
// sliding log under Poisson traffic at 0.5x to 2x the limit (seeded, so the
// figures are reproducible; they are quoted in the package doc). Three
// figures per load:
//   - misclassified: the share of the counter's decisions that the exact rule
//     ("fewer than limit in (now-window, now]"), applied to the counter's own
//     admissions, would have decided the other way (false allow / false deny);
//   - diverge: the share of decisions that differ from an independent exact
//     sliding log fed the same arrivals (the histories drift apart);
//   - admitted: the counter's admitted volume against the log's.
func TestCounterAccuracy(t *testing.T) {
	cases := []struct {
		limit, windows           int64
		load                     float64
		maxMisclassified, maxVol float64 // asserted bounds, %
	}{
		{100, 400, 0.5, 0.01, 0.01},
		{100, 400, 0.8, 2, 1},
		{100, 400, 1, 20, 3},
		{100, 400, 1.2, 30, 3},
		{100, 400, 2, 50, 3},
		{1000, 60, 0.5, 0.01, 0.01},
		{1000, 60, 1, 20, 3},
		{1000, 60, 2, 50, 3},
	}
	for _, c := range cases {
		limit := c.limit
		acc := measureCounter(t, limit, second, c.load, c.windows, 1)
		vol := 100 * (float64(acc.admitted)/float64(acc.admittedLog) - 1)
		pct := func(n int) float64 { return 100 * float64(n) / float64(acc.requests) }
		t.Logf("limit %4d, load %.1fx: %6d requests, misclassified %6.3f%% (false allow %6.3f%%, false deny %6.3f%%), diverge from exact log %6.3f%%, admitted %+.2f%% vs log, busiest 1s interval %d (limit %d)",
			limit, c.load, acc.requests, acc.misclassified(), pct(acc.falseAllow), pct(acc.falseDeny),
			pct(acc.diverge), vol, acc.maxInterval, limit)
		if got := acc.misclassified(); got > c.maxMisclassified || math.IsNaN(got) {
			t.Errorf("load %.1fx: %.3f%% misclassified, bound %.2f%%", c.load, got, c.maxMisclassified)
		}
		if math.Abs(vol) > c.maxVol {
			t.Errorf("load %.1fx: admitted volume off by %.2f%%, bound %.2f%%", c.load, vol, c.maxVol)
		}
		if acc.maxInterval > 2*limit-1 {
			t.Errorf("load %.1fx: %d admitted in one window, bound %d", c.load, acc.maxInterval, 2*limit-1)
		}
	}
}

// greedy takes units of cost 1 at now until alg denies, appending the
// admission times to adm.
func greedy(alg algo.Algorithm, s algo.State, now int64, adm []int64) (algo.State, []int64) {
	for {
		s2, d := alg.Step(s, now, 1)
		if !d.Allowed {
			return s, adm
		}
		s, adm = s2, append(adm, now)
	}
}

// TestWorstCaseBurst replays adversarial traces and checks every
// window-long interval: the sliding-window counter never admits more than
// 2 x Limit - 1 in any of them (the bound is reached), the fixed window 2 x
// Limit, the sliding log Limit.
func TestWorstCaseBurst(t *testing.T) {
	const limit = 100
	w := second
	a := algs(t, Config{Limit: limit, Window: time.Second})
	bound := map[string]int64{"fixed": 2 * limit, "log": limit, "counter": 2*limit - 1}

	// The textbook trace: a full limit in the last µs of a quiet window, then
	// a greedy client 1s-1µs later, near the end of the next window (the
	// interval [t, t+1s) holds both).
	for name, alg := range a {
		var s algo.State
		var adm []int64
		s, adm = greedy(alg, s, t0+w-1, adm)
		_, adm = greedy(alg, s, t0+2*w-2, adm)
		got := maxInInterval(adm, w)
		t.Logf("%-7s edge trace: %d admitted in one %v interval (limit %d, %.2fx)", name, got, time.Second, limit, float64(got)/limit)
		want := map[string]int64{"fixed": 2 * limit, "log": limit, "counter": 2*limit - 1}[name]
		if got != want {
			t.Errorf("%s: edge trace admitted %d in a window, want %d", name, got, want)
		}
	}

	// The fixed window's own worst case: the end of one window and the start
	// of the next.
	for name, alg := range a {
		var s algo.State
		var adm []int64
		s, adm = greedy(alg, s, t0+w-1, adm)
		_, adm = greedy(alg, s, t0+w, adm)
		got := maxInInterval(adm, w)
		t.Logf("%-7s boundary trace: %d admitted in one interval (%.2fx)", name, got, float64(got)/limit)
		if got > bound[name] {
			t.Errorf("%s: boundary trace admitted %d, bound %d", name, got, bound[name])
		}
	}

	// Randomised greedy adversaries: 2000 windows of probes biased to the
	// window edges, each probe taking all it can.
	rng := rand.New(rand.NewPCG(7, 7))
	worst := map[string]int64{}
	for name, alg := range a {
		var s algo.State
		var adm []int64
		for k := range int64(2000) {
			start := t0 + k*w
			probes := []int64{start, start + w - 1, start + rng.Int64N(w), start + w - 1 - rng.Int64N(w/100)}
			slices.Sort(probes)
			for _, at := range probes {
				if rng.IntN(3) > 0 {
					s, adm = greedy(alg, s, at, adm)
				}
			}
		}
		worst[name] = maxInInterval(adm, w)
		if worst[name] > bound[name] {
			t.Errorf("%s: random adversary admitted %d in a window, bound %d", name, worst[name], bound[name])
		}
	}
	t.Logf("random greedy adversaries, busiest interval: fixed %d, log %d, counter %d (limit %d)", worst["fixed"], worst["log"], worst["counter"], limit)
}
