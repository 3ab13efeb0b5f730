package window

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// fixed is the fixed window: a counter per epoch-aligned window, reset when
// the window ends.
//
// State: W[0] is the end of the window the count belongs to (the time the key
// is full again), W[1] the units taken in it. A key with nothing taken is the
// zero State.
type fixed struct{ params }

// Step is the pure step; see the package documentation for the rules. It is
// StepState on a copy of s.
func (f *fixed) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	f.StepState(&s, now, n, &d)
	return s, d
}

// StepState implements [algo.StateStepper]: Step on *s in place.
func (f *fixed) StepState(s *algo.State, now, n int64, d *floodgate.Decision) {
	now = clampNow(now)
	end := windowStart(now, f.w) + f.w
	count := max(0, min(s.W[1], f.limit))
	if s.W[0] < end {
		// The count belongs to a window that is over (or to nothing).
		count = 0
	}
	// s.W[0] > end only when the clock went backwards: the count is kept (this
	// credits nothing) and moved to the window holding now.
	allowed, retry := true, int64(0)
	switch {
	case n < 0:
		count = max(0, count+n)
	case n <= f.limit-count:
		count += n
	default:
		// Denied until the window ends (a cost above the limit is never
		// admitted; store.Limiter refuses it before it gets here).
		allowed, retry = false, end-now
	}
	var reset int64
	s.W[0], s.W[1] = 0, 0
	if count > 0 {
		s.W[0], s.W[1] = end, count
		reset = end - now
	}
	setDecision(d, allowed, f.limit, f.limit-count, retry, reset)
}

// fixedLua is the Lua twin of fixed.Step, then of fixed.Convert. p =
// {limit, window}.
const fixedLua = luaPrelude + `local function step(s, now, n, p)
  local limit, w = p[1], p[2]
  now = clampnow(now)
  local e = fdiv(now, w) * w + w
  local count = s[2] or 0
  if count < 0 then count = 0 end
  if count > limit then count = limit end
  if (s[1] or 0) < e then count = 0 end
  local allowed, retry = 1, 0
  if n < 0 then
    count = count + n
    if count < 0 then count = 0 end
  elseif n <= limit - count then
    count = count + n
  else
    allowed, retry = 0, e - now
  end
  local reset = 0
  s[1], s[2] = 0, 0
  if count > 0 then
    s[1], s[2] = e, count
    reset = e - now
  end
  return s, {allowed, limit, limit - count, retry, reset, 0}
end
` + fixedConvertLua
