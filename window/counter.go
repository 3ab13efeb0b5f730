package window

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// counter is the sliding-window counter: the counts of the current and of the
// previous epoch-aligned windows, the previous one weighted by how much of it
// the sliding window [now-w, now) still overlaps:
//
//	estimate = prev x (w - elapsed) / w + curr
//
// where elapsed = now - start of the current window. A request of cost n is
// admitted when estimate + n <= limit, compared exactly in integers:
//
//	prev x (w - elapsed) + (curr + n) x w <= limit x w
//
// State: W[0] is the time the key is full again, W[1] the start of the
// current window, W[2] its count, W[3] the previous window's count. A key
// with nothing counted is the zero State.
type counter struct{ params }

// Step is the pure step; see the package documentation for the rules. It is
// StepState on a copy of s.
func (k *counter) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	k.StepState(&s, now, n, &d)
	return s, d
}

// StepState implements [algo.StateStepper]: Step on *s in place.
func (k *counter) StepState(s *algo.State, now, n int64, d *floodgate.Decision) {
	now = clampNow(now)
	w, limit := k.w, k.limit
	n = max(n, -2*limit) // a larger refund empties both windows all the same
	start, curr, prev := k.counts(s, now)
	elapsed := now - start
	allowed, retry := false, int64(0)
	weighted := prev * (w - elapsed) // prev's share of the estimate, x w
	switch avail := limit - curr - n; {
	case n < 0:
		// Refund from the current window first, then from the previous.
		back := min(-n, curr)
		curr -= back
		prev = max(0, prev-(-n-back))
		allowed = true
	case n <= limit && avail >= 0 && weighted <= avail*w:
		curr += n
		allowed = true
	case n > limit:
		// Never admitted (store.Limiter refuses such costs): report the time
		// at which the key is certainly empty.
		retry = start + 2*w - now
	case avail >= 0:
		// curr + n fits: wait until prev's weight has decayed enough, at
		// the smallest at with prev x (w - at) <= avail x w (at == w is
		// the next window, where prev drops out and curr + n fits).
		at := w - floorDiv(avail*w, prev)
		retry = start + at - now
	default:
		// curr + n does not fit in this window: in the next one curr is the
		// previous count, admitted from the smallest at with
		// curr x (w - at) <= (limit - n) x w.
		at := w - floorDiv((limit-n)*w, curr)
		retry = start + w + at - now
	}
	weighted = prev * (w - elapsed)
	rem := max(0, min(limit, limit-curr+floorDiv(-weighted, w)))
	var reset int64
	s.W[0], s.W[1], s.W[2], s.W[3] = 0, 0, 0, 0
	if curr > 0 || prev > 0 {
		full := start + w // prev is gone when the next window starts
		if curr > 0 {
			full += w // curr is gone one window later
		}
		s.W[0], s.W[1], s.W[2], s.W[3] = full, start, curr, prev
		reset = full - now
	}
	setDecision(d, allowed, limit, rem, retry, reset)
}

// counts returns the start of the window holding now (clamped) and s's
// counts of that window and of the previous one.
func (k *counter) counts(s *algo.State, now int64) (start, curr, prev int64) {
	start = windowStart(now, k.w)
	curr = max(0, min(s.W[2], k.limit))
	prev = max(0, min(s.W[3], k.limit))
	switch c := s.W[1]; {
	case c == start:
	case c == start-k.w:
		prev, curr = curr, 0
	case c < start:
		prev, curr = 0, 0
	default:
		// The clock went backwards past the current window: fold both counts
		// into the window holding now, which credits nothing (the estimate
		// does not drop).
		curr, prev = min(k.limit, curr+prev), 0
	}
	return start, curr, prev
}

// counterLua is the Lua twin of counter.Step, then of counter.Convert. p =
// {limit, window}.
const counterLua = luaPrelude + `
local function counts(s, now, limit, w)
  local start = fdiv(now, w) * w
  local curr, prev = s[3] or 0, s[4] or 0
  if curr < 0 then curr = 0 elseif curr > limit then curr = limit end
  if prev < 0 then prev = 0 elseif prev > limit then prev = limit end
  local c = s[2] or 0
  if c == start then
  elseif c == start - w then
    prev, curr = curr, 0
  elseif c < start then
    prev, curr = 0, 0
  else
    curr, prev = curr + prev, 0
    if curr > limit then curr = limit end
  end
  return start, curr, prev
end
local function step(s, now, n, p)
  local limit, w = p[1], p[2]
  now = clampnow(now)
  if n < -2 * limit then n = -2 * limit end
  local start, curr, prev = counts(s, now, limit, w)
  local elapsed = now - start
  local allowed, retry = 0, 0
  local weighted = prev * (w - elapsed)
  local avail = limit - curr - n
  if n < 0 then
    local back = -n
    if back > curr then back = curr end
    curr = curr - back
    prev = prev - (-n - back)
    if prev < 0 then prev = 0 end
    allowed = 1
  elseif n <= limit and avail >= 0 and weighted <= avail * w then
    curr = curr + n
    allowed = 1
  elseif n > limit then
    retry = start + 2 * w - now
  elseif avail >= 0 then
    retry = start + w - fdiv(avail * w, prev) - now
  else
    retry = start + 2 * w - fdiv((limit - n) * w, curr) - now
  end
  weighted = prev * (w - elapsed)
  local rem = limit - curr + fdiv(-weighted, w)
  if rem < 0 then rem = 0 elseif rem > limit then rem = limit end
  local reset = 0
  s[1], s[2], s[3], s[4] = 0, 0, 0, 0
  if curr > 0 or prev > 0 then
    local full = start + w
    if curr > 0 then full = full + w end
    s[1], s[2], s[3], s[4] = full, start, curr, prev
    reset = full - now
  end
  return s, {allowed, limit, rem, retry, reset, 0}
end
` + counterConvertLua
