package bucket

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store/algo"
)

var _ algo.Reservable = (*gcra)(nil)

// reserveName is the Spec.Name of the token bucket's reserving twin.
const reserveName = "token-bucket+reserve"

// Reserve implements [algo.Reservable]: the step that admits a request for
// a time up to maxWait µs ahead. A reservation pushes the TAT as a take
// does, so the next one is scheduled after it; the request is to be served
// after Decision.Delay, when the TAT less tau reaches it. The reservation
// horizon is max(15 minutes, 64 times the time to refill the whole burst).
func (g *gcra) Reserve(maxWait int64) algo.Algorithm {
	return g.twin(min(max(maxWait, 0), algo.MaxReserveArg), algo.MaxReserveArg)
}

// Cancel implements [algo.Reservable]: the step whose refund gives back a
// reservation located by resetIn when it is the last of the key's queue,
// and nothing when later reservations pushed the TAT beyond it.
func (g *gcra) Cancel(resetIn int64) algo.Algorithm {
	return g.twin(0, min(max(resetIn, -algo.MaxReserveArg), algo.MaxReserveArg))
}

func (g *gcra) twin(maxWait, resetIn int64) *gcraTwin {
	r := &gcraTwin{g: g, maxWait: maxWait, resetIn: resetIn}
	r.spec = g.reserveSpec
	r.spec.Lua.Params = []int64{g.t, g.burst, g.span, maxWait, resetIn}
	return r
}

// gcraTwin is the reserving twin of a gcra: the same state and arithmetic,
// with reservations for n > 0 and reservation-aware refunds for n < 0.
type gcraTwin struct {
	g                *gcra
	maxWait, resetIn int64
	spec             algo.Spec
}

func (r *gcraTwin) Spec() algo.Spec { return r.spec }

// Layout implements [algo.Layout].
func (r *gcraTwin) Layout() (namespace uint64, words, maxLog int, grain int64) {
	return r.g.memNS, 1, 0, r.g.t
}

func (r *gcraTwin) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	s.W[0] = r.StepWord(s.W[0], now, n, &d)
	return s, d
}

// StepWord implements [algo.WordStepper].
func (r *gcraTwin) StepWord(tat, now, n int64, d *floodgate.Decision) int64 {
	g := r.g
	tat = g.normalise(tat, now)
	if n <= 0 {
		if n < 0 {
			// The reservation occupies the TAT up to now+resetIn; what
			// lies beyond is later reservations', which keep their
			// times. The TAT is the end of the queue: moving it back
			// at all would let newcomers be served with them, over the
			// limit (giving back n less their share, as x/time/rate's
			// CancelAt does, is wrong as soon as n > 1). So nothing
			// comes back when a later reservation is there (each
			// pushed the TAT by at least an interval); a shorter excess
			// is the caller's clock error on the last one, whose n
			// intervals come back less that.
			give := -n * g.t
			switch behind := tat - now - r.resetIn; {
			case behind >= g.t:
				give = 0
			case behind > 0:
				give -= behind
			}
			if give > 0 {
				tat = max(now, tat-give)
			}
		}
		g.decide(d, tat, now, 0)
		return tat
	}
	newTat := tat + n*g.t
	switch wait := newTat - g.tau - now; {
	case wait > r.maxWait:
		g.decide(d, tat, now, wait)
		return tat
	case wait > g.horizon:
		g.decide(d, tat, now, wait-g.horizon)
		return tat
	default:
		g.decide(d, newTat, now, 0)
		d.Delay = micros.Dur(wait)
		return newTat
	}
}
