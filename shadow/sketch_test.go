package shadow

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// The sketch's quantiles are within its stated relative error of the exact
// ones, over several distributions and weights.
func TestSketchRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	dists := map[string]func() uint64{
		"lognormal":  func() uint64 { return uint64(math.Max(1, math.Round(50*math.Exp(1.5*rng.NormFloat64())))) },
		"uniform":    func() uint64 { return 1 + rng.Uint64N(100000) },
		"pareto":     func() uint64 { return uint64(math.Min(1<<40, 1/math.Pow(1-rng.Float64(), 1/1.2))) },
		"small-ints": func() uint64 { return 1 + rng.Uint64N(7) },
	}
	for name, draw := range dists {
		t.Run(name, func(t *testing.T) {
			s := newSketch()
			var exact []uint64
			for range 50000 {
				x := draw()
				s.add(x, 1)
				exact = append(exact, x)
			}
			slices.Sort(exact)
			f := s.freeze()
			assert.EqualValues(t, len(exact), f.total)
			assert.Equal(t, exact[len(exact)-1], f.max)
			for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
				want := float64(exact[int(q*float64(len(exact)-1))])
				if want > 1<<32 {
					continue // beyond the sketch's range: counted in its last bin
				}
				got := f.quantile(q)
				assert.InEpsilon(t, want, got, sketchRelativeError+1e-9, "q%v", q)
			}
		})
	}
}

// Weights count as repeated values.
func TestSketchWeights(t *testing.T) {
	a, b := newSketch(), newSketch()
	for x := uint64(1); x <= 1000; x++ {
		a.add(x, 4)
		for range 4 {
			b.add(x, 1)
		}
	}
	fa, fb := a.freeze(), b.freeze()
	assert.Equal(t, fb.bins, fa.bins)
	for _, q := range []float64{0.1, 0.5, 0.95} {
		assert.Equal(t, fb.quantile(q), fa.quantile(q))
	}
	n, ex := fa.above(900)
	assert.InEpsilon(t, 400, n, 0.05)
	assert.InEpsilon(t, 4*50*101, ex, 0.05) // sum of (x-900) for x in 901..1000, x4
}

// The distinct-key estimate is within a few standard errors (3.3%).
func TestDistinctEstimate(t *testing.T) {
	for _, n := range []int{100, 5000, 200000} {
		var d distinct
		for i := range n {
			d.add(mix(uint64(i) * 0x9e3779b97f4a7c15))
		}
		assert.InEpsilon(t, n, d.estimate(), 0.1, "%d keys", n)
	}
}

// subWindow is the division it replaces, for every offset into windows of
// many lengths (multiples of 8 ns or not, shorter than 8 ns included).
func TestSubWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, win := range []int64{1, 2, 5, 7, 8, 9, 15, 17, 100, 1001, 1e9, 1e9 + 3, 86400e9 + 5} {
		d := &Demand{window: win, subLen: max(win/subWindows, 1)}
		for range 2000 {
			x := rng.Int64N(win)
			if got, want := d.subWindow(x), uint32(x/d.subLen); got != want {
				t.Fatalf("window %d, offset %d: sub-window %d, want %d", win, x, got, want)
			}
		}
		for _, x := range []int64{0, win - 1, d.subLen - 1, d.subLen, 7 * d.subLen, min(8*d.subLen, win-1)} {
			if x < 0 || x >= win {
				continue
			}
			if got, want := d.subWindow(x), uint32(x/d.subLen); got != want {
				t.Fatalf("window %d, offset %d: sub-window %d, want %d", win, x, got, want)
			}
		}
	}
}

// A key-window counts up to cntMax units, whether the lock-free adds or
// the locked ones take it there; the totals stay exact.
func TestSlotSaturates(t *testing.T) {
	r, err := New(Config{Clock: floodgate.ClockFunc(func() time.Time { return time.Unix(0, 0) })})
	require.NoError(t, err)
	defer r.Close()
	d, err := r.Track("p", time.Second, 1)
	require.NoError(t, err)
	base := int64(10 * time.Second)
	d.ObserveAt(base, "a", cntMax-5, false) // locked: a new window
	for range 10 {
		d.ObserveAt(base+1, "a", 1, false) // lock-free, crossing the bound
	}
	d.ObserveAt(base+2, "b", 1<<40, false) // one decision beyond it
	d.ObserveAt(base+int64(time.Second)/2, "b", 3, false)
	rep := d.ReportAt(base + int64(time.Second))
	assert.EqualValues(t, 13, rep.Decisions)
	assert.EqualValues(t, cntMax-5+10+1<<40+3, rep.Units)
	assert.EqualValues(t, 2, rep.KeyWindows)
	assert.EqualValues(t, cntMax, rep.Demand.Max)
	assert.EqualValues(t, cntMax, rep.Burst.Max)
	assert.EqualValues(t, cntMax, rep.Demand.P50)
}
