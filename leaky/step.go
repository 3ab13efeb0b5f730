package leaky

import (
	"math"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store/algo"
)

// algorithm is the leaky bucket as a [algo.Algorithm]: nginx limit_req's
// arithmetic as a pure step over three words of state. Build it with
// [Config.Algorithm]. It is immutable and safe for concurrent use.
//
// State words (see the package documentation for the arithmetic):
//
//	W[0]  Unix µs at which the key is back to idle (excess fully leaked:
//	      the next request would be the first one of a fresh key)
//	W[1]  last: Unix ms of the last admitted request (nginx's lr->last)
//	W[2]  excess in milli-requests (nginx's lr->excess); a refund may take
//	      it down to -1000, one request of credit, never below; reservations
//	      (see algorithm.Reserve) may take it above the burst
type algorithm struct {
	rate        int64 // milli-requests per second
	burst       int64 // milli-requests
	delay       int64 // milli-requests served undelayed
	limit       int64 // Burst + 1
	maxExc      int64 // the most excess a key holds, reservations included
	msCap       int64 // elapsed ms beyond which every state is idle
	spec        algo.Spec
	reserveSpec algo.Spec // the reserving twin's, but for its Params
	// memNS is the namespace in memory (see algo.Lineage): spec.Namespace,
	// or the version's own once the algorithm is a Lineage, which memory
	// stores read the limit's versions (vs) through.
	memNS uint64
	vs    *algo.Versions
	grain int64 // algo.Grain(spec)
}

// reservation is the argument of a reserving twin's step: nil for the
// plain step.
type reservation struct {
	maxWait int64 // µs, 0..algo.MaxReserveArg
	resetIn int64 // µs, ±algo.MaxReserveArg
}

// Bound on |last| (ms) so that every product stays inside int64 in Go and
// exact in Lua: 2^50 ms is some 35,000 years.
const maxLastMs = int64(1) << 50

// nginx treats a clock that went back by more than this as having advanced
// by 1 ms (and re-bases), and a smaller step back as no time at all.
const backJumpMs = 60_000

// Spec implements [algo.Algorithm].
func (a *algorithm) Spec() algo.Spec { return a.spec }

// Layout implements [algo.Layout]: Spec's namespace, words and log bound,
// without copying the whole Spec.
func (a *algorithm) Layout() (namespace uint64, words, maxLog int, grain int64) {
	return a.memNS, a.spec.Words, a.spec.MaxLog, a.grain
}

// Step implements [algo.Algorithm]: a request of cost n at now (Unix µs).
// n > 0 takes, n < 0 refunds -n requests, n == 0 peeks. See the package
// documentation. It is algorithm.StepState on a copy of s.
func (a *algorithm) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	a.StepState(&s, now, n, &d)
	return s, d
}

// StepState implements [algo.StateStepper]: Step on *s in place, the
// decision written to *d (every field set).
func (a *algorithm) StepState(s *algo.State, now, n int64, d *floodgate.Decision) {
	a.step(s, now, n, d, nil)
}

// step is StepState, and with r the reserving twin's step.
func (a *algorithm) step(s *algo.State, now, n int64, d *floodgate.Decision, r *reservation) {
	n = min(max(n, -(a.limit+1)), a.limit+1)
	last, exc, nowMs, ms, leaked := a.leak(s, now)
	// base is the excess a request of cost 1 would have now: nginx's
	// "excess - rate * ms / 1000 + 1000", floored at 0.
	base := max(0, leaked+milli)

	var e1 int64
	switch {
	case n > 0:
		// n requests arriving together: the first as in nginx, the n-1
		// others in the same millisecond (+1000 each).
		e1 = base + (n-1)*milli
		var retry int64
		switch {
		case r != nil:
			retry = a.reserveRetry(last, exc, n, now, e1, r.maxWait)
		case e1 > a.burst:
			retry = a.retryAfter(last, exc, n, now, a.burst)
		}
		if retry > 0 {
			a.hold(s, last, exc, base, now, retry, d)
			return
		}
	case n < 0:
		// Refund: give back exactly the n*1000 milli-requests a take adds,
		// never more than one request of credit below empty; a cancelled
		// reservation gives back nothing when a later one is scheduled
		// beyond it (see given).
		give := -n * milli
		if r != nil {
			if give = a.given(last, exc, now, -n, r.resetIn); give == 0 {
				a.hold(s, last, exc, base, now, 0, d)
				return
			}
		}
		e1 = max(-milli, leaked-give)
	default:
		a.hold(s, last, exc, base, now, 0, d)
		return
	}
	if ms != 0 { // nginx moves last only when time moved
		last = nowMs
	}
	idle := a.idleAt(last, e1)
	s.W[0], s.W[1], s.W[2] = idle, last, e1
	// A request of cost 1 now would have excess e1+1000.
	var rem int64
	if b := max(0, e1+milli); b <= a.burst {
		rem = (a.burst-b)/milli + 1
	}
	var reset, delay int64
	if rem < a.limit {
		reset = satSub(idle, now)
	}
	if n > 0 && e1 > a.delay {
		delay = (e1 - a.delay) * milli / a.rate * 1000
	}
	// Field by field, not a composite literal (see bucket's decide).
	d.Allowed = true
	d.Limit = a.limit
	d.Remaining = rem
	d.RetryAfter = 0
	d.ResetAfter = micros.Dur(reset)
	d.Delay = micros.Dur(delay)
}

// leak normalises s at now: last and exc bounded, the milliseconds elapsed
// since last (ms, bounded; nowMs is now in ms), and leaked, the excess left
// now before any request, which may be negative (the bucket has been idle
// for a while). A clock gone back by more than a minute re-bases last.
func (a *algorithm) leak(s *algo.State, now int64) (last, exc, nowMs, ms, leaked int64) {
	last = min(max(s.W[1], -maxLastMs), maxLastMs)
	exc = min(max(s.W[2], -milli), a.maxExc)
	nowMs = min(max(floorDiv(now, milli), -maxLastMs), maxLastMs)
	ms = nowMs - last
	switch {
	case s.W[1] == 0 && s.W[2] == 0:
		ms = a.msCap // the zero State: a fresh key, whatever the time
	case ms < -backJumpMs:
		// nginx counts 1 ms; we also re-base last (below, even on a
		// denial) so that the key leaks normally from now on instead of
		// waiting for the clock to catch up. This credits nothing now.
		last, ms = nowMs-1, 1
	case ms < 0:
		ms = 0
	case ms > a.msCap:
		ms = a.msCap
	}
	return last, exc, nowMs, ms, exc - a.rate*ms/milli
}

// hold is a peek (retry == 0) or a denial (retry > 0 µs): the state changes
// only by normalisation, which credits nothing.
func (a *algorithm) hold(s *algo.State, last, exc, base, now, retry int64, d *floodgate.Decision) {
	idle := a.idleAt(last, exc)
	s.W[0], s.W[1], s.W[2] = idle, last, exc
	var rem, reset int64
	if base <= a.burst {
		rem = (a.burst-base)/milli + 1
	}
	if rem < a.limit {
		reset = satSub(idle, now)
	}
	d.Allowed = retry == 0
	d.Limit = a.limit
	d.Remaining = rem
	d.RetryAfter = micros.Dur(retry)
	d.ResetAfter = micros.Dur(reset)
	d.Delay = 0
}

// idleAt is the Unix µs from which a state (last, exc) has fully leaked:
// rate*ms/1000 >= exc+1000.
func (a *algorithm) idleAt(last, exc int64) int64 {
	return (last + ceilDiv(milli*(exc+milli), a.rate)) * 1000
}

// retryAfter is how long (µs) until a request of cost n fits under bound
// (its excess e1 <= bound), given that it does not now.
func (a *algorithm) retryAfter(last, exc, n, now, bound int64) int64 {
	allow := bound - (n-1)*milli // the largest base that admits n
	if allow < 0 {
		// n > Capacity: never admitted; the Limiter refuses such costs.
		return max(1, satSub(a.idleAt(last, exc), now))
	}
	need := exc + milli - allow // leak needed, > 0 since denied
	at := (last + ceilDiv(need*milli, a.rate)) * 1000
	return max(1, satSub(at, now))
}

// floorDiv is floor(x/y) for y > 0 (Go's / truncates toward zero).
func floorDiv(x, y int64) int64 {
	q := x / y
	if x%y < 0 {
		q--
	}
	return q
}

// ceilDiv is ceil(x/y) for x >= 0, y > 0.
func ceilDiv(x, y int64) int64 { return (x + y - 1) / y }

// satSub is a-b saturated to the int64 range.
func satSub(a, b int64) int64 {
	d := a - b
	if (a >= 0) != (b >= 0) && (d >= 0) != (a >= 0) {
		if a >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return d
}

// stepLua is the Lua twin of algorithm.Step and of its reserving twin, then
// of algorithm.Convert (convertLua), for stores that run scripts. p = {rate, burst, delay, msCap, limit, maxExc}
// (milli-requests, ms); the reserving twin appends {maxWait, resetIn} (µs). Every value
// stays an integer below 2^53; fdiv corrects the rounding of a/b so that it
// is the exact floor, like Go's division on the same (non-negative) values.
const stepLua = `
-- fdiv, cdiv and idleat are made once, not per call: a closure made on
-- every decision costs the server time.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b) return fdiv(a + b - 1, b) end
local function idleat(l, e, rate) return (l + cdiv(1000 * (e + 1000), rate)) * 1000 end
local function step(s, now, n, p)
  local rate, burst, dly, mscap, limit, maxexc = p[1], p[2], p[3], p[4], p[5], p[6]
  local maxwait, resetin = p[7], p[8]
  local maxlast = 1125899906842624
  local last = s[2] or 0
  if last < -maxlast then last = -maxlast elseif last > maxlast then last = maxlast end
  local exc = s[3] or 0
  if exc < -1000 then exc = -1000 elseif exc > maxexc then exc = maxexc end
  if n < -(limit + 1) then n = -(limit + 1) elseif n > limit + 1 then n = limit + 1 end
  local nowms = fdiv(now, 1000)
  if nowms < -maxlast then nowms = -maxlast elseif nowms > maxlast then nowms = maxlast end
  local ms = nowms - last
  if (s[2] or 0) == 0 and (s[3] or 0) == 0 then ms = mscap
  elseif ms < -60000 then last = nowms - 1; ms = 1
  elseif ms < 0 then ms = 0 elseif ms > mscap then ms = mscap end
  local leaked = exc - fdiv(rate * ms, 1000)
  local base = leaked + 1000
  if base < 0 then base = 0 end
  local function decide(allowed, b, l, e)
    local rem = 0
    if b <= burst then rem = fdiv(burst - b, 1000) + 1 end
    local reset = 0
    if rem < limit then
      reset = idleat(l, e, rate) - now
      if reset < 0 then reset = 0 end
    end
    return {allowed, limit, rem, 0, reset, 0}
  end
  -- retryafter: how long until a request of cost n fits under bound.
  local function retryafter(bound)
    local allow = bound - (n - 1) * 1000
    local at
    if allow < 0 then at = idleat(last, exc, rate)
    else at = (last + cdiv((exc + 1000 - allow) * 1000, rate)) * 1000 end
    local ra = at - now
    if ra < 1 then ra = 1 end
    return ra
  end
  local function hold(retry)
    s[1] = idleat(last, exc, rate)
    s[2] = last
    s[3] = exc
    if retry == 0 then return s, decide(1, base, last, exc) end
    local d = decide(0, base, last, exc)
    d[4] = retry
    return s, d
  end
  local e1
  if n > 0 then
    e1 = base + (n - 1) * 1000
    local retry = 0
    if maxwait then
      local wait = 0
      if e1 > dly then wait = fdiv((e1 - dly) * 1000, rate) * 1000 end
      if wait > maxwait then retry = wait
      elseif e1 > maxexc then retry = retryafter(maxexc) end
    elseif e1 > burst then
      retry = retryafter(burst)
    end
    if retry > 0 then return hold(retry) end
  elseif n < 0 then
    local give = -n * 1000
    if resetin then
      local us = idleat(last, exc, rate) - now - resetin
      if us > 0 then
        local bms = cdiv(us, 1000)
        if bms >= fdiv(1000000, rate) then return hold(0) end
        give = give - cdiv(bms * rate, 1000)
      end
      if give <= 0 then return hold(0) end
    end
    e1 = leaked - give
    if e1 < -1000 then e1 = -1000 end
  else
    return hold(0)
  end
  if ms ~= 0 then last = nowms end
  s[1] = idleat(last, e1, rate)
  s[2] = last
  s[3] = e1
  local b1 = e1 + 1000
  if b1 < 0 then b1 = 0 end
  local d = decide(1, b1, last, e1)
  if n > 0 and e1 > dly then d[6] = fdiv((e1 - dly) * 1000, rate) * 1000 end
  return s, d
end
` + convertLua
