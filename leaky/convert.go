package leaky

import (
	"github.com/floodgate-go/floodgate/internal/luasrc"
	"github.com/floodgate-go/floodgate/store/algo"
)

var (
	_ algo.Lineage = (*algorithm)(nil)
	_ algo.Lineage = (*twin)(nil)
)

// asLeaky returns the bucket of a leaky-bucket algorithm or of one of its
// twins, or nil.
func asLeaky(x algo.Algorithm) *algorithm {
	switch v := x.(type) {
	case *algorithm:
		return v
	case *twin:
		return v.a
	}
	return nil
}

// Converts implements [algo.Converter]: from is a leaky bucket (or a
// reserving twin of one) of the same limit.
func (a *algorithm) Converts(from algo.Algorithm) bool {
	f := asLeaky(from)
	return f != nil && f.spec.Namespace == a.spec.Namespace
}

// Convert implements [algo.Converter]: the state a leaky bucket with other
// parameters (from) left, carried over to this one at now (see the package
// documentation, "Live changes"). The excess is leaked to now at the old
// rate; what the key has left, in milli-requests (the old burst less that
// excess, up to a whole request more when the bucket is empty, negative
// when reservations are queued beyond the burst), is kept, capped by the new
// capacity: the new excess is the new burst less it, within the new
// reservation bound. A state that is idle at now is fresh (the zero State).
func (a *algorithm) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	f := asLeaky(from)
	if f == nil || f.spec.Namespace != a.spec.Namespace || s.W[0] <= now {
		return algo.State{}
	}
	last, _, nowMs, ms, leaked := f.leak(&s, now)
	left := f.burst - max(leaked, -milli)
	e := min(a.burst-min(left, a.burst+milli), a.maxExc)
	if ms != 0 {
		last = nowMs
	}
	return algo.State{W: [algo.MaxWords]int64{a.idleAt(last, e), last, e}}
}

// FullWithin implements [algo.Converter]: the time to leak the most excess
// a key may hold, plus the minute of a clock gone back that a state keeps.
func (a *algorithm) FullWithin() int64 { return (a.msCap + backJumpMs) * 1000 }

// WithVersions implements [algo.Converter]; use [algo.Succeed].
func (a *algorithm) WithVersions(v *algo.Versions) algo.Lineage {
	c := *a
	c.vs = v
	c.memNS = algo.VersionNamespace(a.spec)
	return &c
}

// Versions implements [algo.Lineage].
func (a *algorithm) Versions() *algo.Versions { return a.vs }

// The reserving twins carry the bucket's lineage, so that a reservation
// reads a key's state through the bucket's versions like a take.

// Converts implements [algo.Converter] as the bucket's.
func (t *twin) Converts(from algo.Algorithm) bool { return t.a.Converts(from) }

// Convert implements [algo.Converter] as the bucket's.
func (t *twin) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	return t.a.Convert(s, now, from)
}

// FullWithin implements [algo.Converter] as the bucket's.
func (t *twin) FullWithin() int64 { return t.a.FullWithin() }

// WithVersions implements [algo.Converter]: the bucket's (not a twin).
func (t *twin) WithVersions(v *algo.Versions) algo.Lineage {
	return t.a.WithVersions(v)
}

// Versions implements [algo.Lineage] as the bucket's.
func (t *twin) Versions() *algo.Versions { return t.a.vs }

// convertLua is the Lua twin of algorithm.Convert: op = {rate, burst} of
// the old version, whose bounds it computes as maxExcess and algorithm do
// (a rate above 4000 milli-requests/s reaches 2^42 at once, so that the
// product stays exact), p the new one's Params.
const convertLua = luasrc.FloorDiv + `
local function convert(s, now, op, p)
  if (s[1] or 0) <= now then return {0, 0, 0} end
  local frate, fburst = op[1], op[2]
  local fmaxexc = 4398046511104
  if frate <= 4000 then fmaxexc = frate * 1099511627 - 1000 end
  if fmaxexc < fburst then fmaxexc = fburst end
  local fmscap = fdiv(1000 * (fmaxexc + 1000) + frate - 1, frate) + 1
  local rate, burst, maxexc = p[1], p[2], p[6]
  local maxlast = 1125899906842624
  local w1, w2 = s[2] or 0, s[3] or 0
  local last = w1
  if last < -maxlast then last = -maxlast elseif last > maxlast then last = maxlast end
  local exc = w2
  if exc < -1000 then exc = -1000 elseif exc > fmaxexc then exc = fmaxexc end
  local nowms = fdiv(now, 1000)
  if nowms < -maxlast then nowms = -maxlast elseif nowms > maxlast then nowms = maxlast end
  local ms = nowms - last
  if w1 == 0 and w2 == 0 then ms = fmscap
  elseif ms < -60000 then last = nowms - 1; ms = 1
  elseif ms < 0 then ms = 0 elseif ms > fmscap then ms = fmscap end
  local leaked = exc - fdiv(frate * ms, 1000)
  if leaked < -1000 then leaked = -1000 end
  local left = fburst - leaked
  if left > burst + 1000 then left = burst + 1000 end
  local e = burst - left
  if e > maxexc then e = maxexc end
  if ms ~= 0 then last = nowms end
  return {(last + fdiv(1000 * (e + 1000) + rate - 1, rate)) * 1000, last, e}
end
return step, convert
`
