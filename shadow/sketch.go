package shadow

import (
	"math"
	"sync/atomic"
)

// The quantile sketch: a log-bucketed histogram in the manner of DDSketch.
// A value x >= 1 falls in bin i = ceil(log_gamma(x)), gamma = (1+a)/(1-a),
// and bin i is reported as 2*gamma^i/(gamma+1), which is within a relative
// error a of every value the bin holds. With a = 1% the bins from 1 to 2^32
// are 1,110 uint64 counters (8.7 KiB); a value above 2^32 counts in the last
// bin (and the exact maximum is kept apart). Counts are weights: a sample of
// a key-window drawn with probability 2^-level counts 2^level.

// sketchRelativeError is the relative error of every quantile the sketches
// report, before sampling: a reported value v stands for a true value in
// [v/(1+e), v/(1-e)].
const sketchRelativeError = 0.01

var (
	sketchGamma   = (1 + sketchRelativeError) / (1 - sketchRelativeError)
	sketchLnGamma = math.Log(sketchGamma)
	sketchBins    = int(math.Ceil(32*math.Ln2/sketchLnGamma)) + 1
)

// sketch is safe for concurrent use: adds are atomic, and a snapshot reads
// each counter once (a snapshot taken during adds may miss the latest).
type sketch struct {
	bins  []atomic.Uint64
	max   atomic.Uint64
	total atomic.Uint64
}

func newSketch() *sketch { return &sketch{bins: make([]atomic.Uint64, sketchBins)} }

func sketchIndex(x uint64) int {
	if x <= 1 {
		return 0
	}
	i := int(math.Ceil(math.Log(float64(x)) / sketchLnGamma))
	return min(i, sketchBins-1)
}

// sketchValue is the value bin i reports.
func sketchValue(i int) float64 {
	if i == 0 {
		return 1
	}
	return 2 * math.Pow(sketchGamma, float64(i)) / (sketchGamma + 1)
}

// add counts x (>= 1) with weight w.
func (s *sketch) add(x, w uint64) {
	if x == 0 || w == 0 {
		return
	}
	s.bins[sketchIndex(x)].Add(w)
	s.total.Add(w)
	for {
		m := s.max.Load()
		if x <= m || s.max.CompareAndSwap(m, x) {
			return
		}
	}
}

func (s *sketch) reset() {
	for i := range s.bins {
		s.bins[i].Store(0)
	}
	s.max.Store(0)
	s.total.Store(0)
}

// frozen is a snapshot of a sketch, for queries.
type frozen struct {
	bins  []uint64
	total uint64
	max   uint64
}

func (s *sketch) freeze() frozen {
	f := frozen{bins: make([]uint64, len(s.bins)), max: s.max.Load()}
	for i := range s.bins {
		f.bins[i] = s.bins[i].Load()
		f.total += f.bins[i]
	}
	return f
}

// quantile returns the q-quantile (0 <= q <= 1) of the values, 0 when
// there are none. It never exceeds the largest value seen.
func (f frozen) quantile(q float64) float64 {
	if f.total == 0 {
		return 0
	}
	if q >= 1 {
		return float64(f.max)
	}
	rank := uint64(q * float64(f.total-1))
	var seen uint64
	for i, c := range f.bins {
		seen += c
		if seen > rank {
			return math.Min(sketchValue(i), float64(f.max))
		}
	}
	return float64(f.max)
}

// above returns the weight of the values above x and the sum of their
// excess over x: how many key-windows a limit of x refuses something in,
// and how many units it refuses (each bin by its reported value).
func (f frozen) above(x float64) (count, excess float64) {
	for i, c := range f.bins {
		if c == 0 {
			continue
		}
		v := math.Min(sketchValue(i), float64(f.max))
		if v > x {
			count += float64(c)
			excess += float64(c) * (v - x)
		}
	}
	return count, excess
}
