package window

import (
	"slices"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// slidingLog is the exact sliding window: the log of the admission times
// still inside the window, one entry per unit of cost (a request of cost n at
// time t records t n times), oldest first. An entry recorded at t counts
// during [t, t+w). A request of cost n is admitted when the log plus n fits
// in the limit, so the log never holds more than limit entries.
//
// State: W[0] is the time the key is full again (the newest entry plus w),
// Log the entries. A key with an empty log is the zero State.
//
// Step never changes the entries of the log it is given (s.Log[:len]): it
// re-slices it to drop entries and appends new ones, in the slice's spare
// capacity when it has some, as Go's append does. A store steps each key's
// latest state once at a time and keeps the result, which is all this needs;
// two States stepped from the same input, though, may share that spare
// capacity, so only one of them may be kept. This keeps an admission
// amortised O(1) instead of a copy of the whole log.
type slidingLog struct{ params }

// Step is the pure step; see the package documentation for the rules. It is
// StepState on a copy of s.
func (l *slidingLog) Step(s algo.State, now int64, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	l.StepState(&s, now, n, &d)
	return s, d
}

// StepState implements [algo.StateStepper]: Step on *s in place, with the
// same rule for s.Log (its entries are never changed; the new log may use
// its spare capacity).
func (l *slidingLog) StepState(s *algo.State, now, n int64, d *floodgate.Decision) {
	now = clampNow(now)
	n = max(n, -l.limit) // a larger refund empties the log all the same
	log := clampFuture(l.live(s.Log, now), now)
	allowed, retry := false, int64(0)
	count := int64(len(log))
	switch {
	case n < 0:
		// (clampFuture again: only a log that was not in order has entries
		// after now left.)
		log = clampFuture(log[:count-min(-n, count)], now)
		allowed = true
	case n <= l.limit-count:
		if n > 0 {
			// Appends in the spare capacity when there is some (amortised
			// O(1) per unit): never over the entries of the input.
			log = slices.Grow(log, int(n))[:count+n]
			for j := count; j < count+n; j++ {
				log[j] = now
			}
		}
		allowed = true
	case n > l.limit:
		// Never admitted (store.Limiter refuses such costs): report the
		// time at which the log is empty.
		retry = l.w
		if count > 0 {
			retry = max(1, log[count-1]+l.w-now)
		}
	default:
		// Admitted once the oldest count+n-limit entries have expired.
		retry = max(1, log[count+n-l.limit-1]+l.w-now)
	}
	count = int64(len(log))
	var reset int64
	s.W[0], s.Log = 0, nil
	if count > 0 {
		s.W[0], s.Log = log[count-1]+l.w, log
		reset = s.W[0] - now
	}
	setDecision(d, allowed, l.limit, l.limit-count, retry, reset)
}

// live returns the entries of log that the window still holds at now, at
// most limit of them (the newest: more is not a state Step writes).
func (l *slidingLog) live(log []int64, now int64) []int64 {
	log = unexpired(log, now, l.w)
	if len(log) > int(l.limit) {
		log = log[len(log)-int(l.limit):]
	}
	return log
}

// unexpired returns log without its entries that a window of w has left
// behind at now (oldest first).
func unexpired(log []int64, now, w int64) []int64 {
	i := 0
	for i < len(log) && log[i] <= now-w {
		i++
	}
	return log[i:]
}

// clampFuture moves the newest entries that are after now to now: the clock
// went backwards, and this credits nothing (the count is the same). The
// entries are copied first: they belong to the input.
func clampFuture(log []int64, now int64) []int64 {
	m := len(log)
	if m == 0 || log[m-1] <= now {
		return log
	}
	log = slices.Clone(log)
	for j := m - 1; j >= 0 && log[j] > now; j-- {
		log[j] = now
	}
	return log
}

// logLua is the Lua twin of slidingLog.Step, then of slidingLog.Convert.
// p = {limit, window}; s.log is the array of entries.
const logLua = luaPrelude + `
-- live returns a copy of the entries of old that the window holds at now,
-- the newest limit of them, none after now.
local function live(old, now, limit, w)
  local m = #old
  local i = 1
  while i <= m and old[i] <= now - w do i = i + 1 end
  if m - i + 1 > limit then i = m - limit + 1 end
  local log = {}
  for j = i, m do
    local t = old[j]
    if t > now then t = now end
    log[#log + 1] = t
  end
  return log
end
local function step(s, now, n, p)
  local limit, w = p[1], p[2]
  now = clampnow(now)
  if n < -limit then n = -limit end
  local log = live(s.log or {}, now, limit, w)
  local count = #log
  local allowed, retry = 0, 0
  if n < 0 then
    local k = -n
    if k > count then k = count end
    for j = count, count - k + 1, -1 do log[j] = nil end
    allowed = 1
  elseif n <= limit - count then
    for j = count + 1, count + n do log[j] = now end
    allowed = 1
  elseif n > limit then
    retry = w
    if count > 0 then retry = log[count] + w - now end
    if retry < 1 then retry = 1 end
  else
    retry = log[count + n - limit] + w - now
    if retry < 1 then retry = 1 end
  end
  count = #log
  local reset = 0
  s[1], s.log = 0, log
  if count > 0 then
    s[1] = log[count] + w
    reset = s[1] - now
  end
  return s, {allowed, limit, limit - count, retry, reset, 0}
end
` + logConvertLua
