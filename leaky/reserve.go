package leaky

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

var _ algo.Reservable = (*algorithm)(nil)

// reserveName is the Spec.Name of the leaky bucket's reserving twin.
const reserveName = "leaky-bucket+reserve"

// Reserve implements [algo.Reservable]: the step that admits a request when
// it can be served within maxWait µs. A reservation adds its excess as an
// admitted request does, past the burst if need be, so the next one is
// served after it; its Delay is nginx's, (excess - delay*1000) * 1000 / rate
// ms, which in default and delay=N modes includes the shaping delay. Within
// the burst and maxWait it decides exactly as Step. The reservation horizon
// is the excess bound of the package documentation.
func (a *algorithm) Reserve(maxWait int64) algo.Algorithm {
	return a.twin(min(max(maxWait, 0), algo.MaxReserveArg), algo.MaxReserveArg)
}

// Cancel implements [algo.Reservable]: the step whose refund gives back a
// reservation located by resetIn when it is the last of the key's queue,
// and nothing when later reservations are scheduled beyond it.
func (a *algorithm) Cancel(resetIn int64) algo.Algorithm {
	return a.twin(0, min(max(resetIn, -algo.MaxReserveArg), algo.MaxReserveArg))
}

func (a *algorithm) twin(maxWait, resetIn int64) *twin {
	t := &twin{a: a, r: reservation{maxWait: maxWait, resetIn: resetIn}}
	t.spec = a.reserveSpec
	t.spec.Lua.Params = append(append(make([]int64, 0, 8), a.spec.Lua.Params...), maxWait, resetIn)
	return t
}

// twin is the reserving twin of an algorithm: the same state and
// arithmetic, with reservations for n > 0 and reservation-aware refunds for
// n < 0.
type twin struct {
	a    *algorithm
	r    reservation
	spec algo.Spec
}

func (t *twin) Spec() algo.Spec { return t.spec }

// Layout implements [algo.Layout].
func (t *twin) Layout() (namespace uint64, words, maxLog int, grain int64) {
	return t.a.memNS, t.spec.Words, t.spec.MaxLog, t.a.grain
}

func (t *twin) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	t.a.step(&s, now, n, &d, &t.r)
	return s, d
}

// StepState implements [algo.StateStepper].
func (t *twin) StepState(s *algo.State, now, n int64, d *floodgate.Decision) {
	t.a.step(s, now, n, d, &t.r)
}

// reserveRetry is 0 when a reservation of cost n whose excess would be e1
// is admitted within maxWait µs, and otherwise the RetryAfter (µs) of its
// denial: the wait it would have had when that is beyond maxWait, or the
// time until it fits within the horizon (maxExc).
func (a *algorithm) reserveRetry(last, exc, n, now, e1, maxWait int64) int64 {
	var wait int64
	if e1 > a.delay {
		wait = (e1 - a.delay) * milli / a.rate * 1000
	}
	switch {
	case wait > maxWait:
		return wait
	case e1 > a.maxExc:
		return a.retryAfter(last, exc, n, now, a.maxExc)
	}
	return 0
}

// given is what a cancel of a reservation of k requests located by resetIn
// gives back, in milli-requests: all k when the key's time to idle ends at
// resetIn, and nothing when a later reservation is scheduled beyond it.
// Those keep their times and the excess is one number, the end of the
// queue: giving back any of it would move that end before them, and the
// next reservations would be served with them, over the limit (giving back
// k less their share, as x/time/rate does, is wrong as soon as k > 1). A
// later reservation moves the time to idle by at least one request's leak
// less the 1 ms idleAt may round up, so a shorter excess (rounded up to
// whole ms) is the error of the caller's clock on the last one: k requests
// less that excess come back. It is 0 or in (k-1)*1000..k*1000.
func (a *algorithm) given(last, exc, now, k, resetIn int64) int64 {
	us := satSub(satSub(a.idleAt(last, exc), now), resetIn)
	if us <= 0 {
		return k * milli
	}
	ms := us / 1000
	if us%1000 != 0 {
		ms++
	}
	if ms >= milli*milli/a.rate { // ms+1 > 1e6/rate: one request's leak
		return 0
	}
	return k*milli - ceilDiv(ms*a.rate, milli)
}
