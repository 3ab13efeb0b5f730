package bucket

import (
	"github.com/floodgate-go/floodgate/internal/luasrc"
	"github.com/floodgate-go/floodgate/store/algo"
)

var (
	_ algo.Lineage = (*gcra)(nil)
	_ algo.Lineage = (*gcraTwin)(nil)
)

// asGCRA returns the bucket of a token-bucket algorithm or of one of its
// twins, or nil.
func asGCRA(a algo.Algorithm) *gcra {
	switch x := a.(type) {
	case *gcra:
		return x
	case *gcraTwin:
		return x.g
	}
	return nil
}

// Converts implements [algo.Converter]: from is a token bucket (or a
// reserving twin of one) of the same limit.
func (g *gcra) Converts(from algo.Algorithm) bool {
	f := asGCRA(from)
	return f != nil && f.spec.Namespace == g.spec.Namespace
}

// Convert implements [algo.Converter]: the state a token bucket with other
// parameters (from) left, carried over to this one at now. The rule, in
// the bucket's units (see the package documentation, "Live changes"): the
// key keeps the whole tokens it has left, capped by the new burst, and the
// time until its next token, capped by the new interval; a key back to
// full is full under the new burst (as a fresh key is); a key in debt
// (reservations queued beyond the burst) keeps the whole tokens it owes,
// each at the new interval, within the new reservation horizon.
func (g *gcra) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	f := asGCRA(from)
	if f == nil || f.spec.Namespace != g.spec.Namespace {
		return algo.State{}
	}
	return algo.State{W: [algo.MaxWords]int64{g.convert(f, s.W[0], now)}}
}

// convert is Convert on the TAT.
func (g *gcra) convert(f *gcra, tat, now int64) int64 {
	if tat <= now {
		return now // full: a fresh key under the new parameters
	}
	tat = f.normalise(tat, now)
	// avail is the credit the old bucket has at now, in µs of its
	// interval: tokens x interval, negative for a debt.
	avail := f.tau - (tat - now)
	k := floorDiv(avail, f.t) // whole tokens left (< 0: owed)
	if k >= g.burst {
		return now // full under the new burst
	}
	// The token in progress arrives when the old interval says, or after
	// one new interval, whichever comes first.
	wait := min(f.t-(avail-k*f.t), g.t)
	// A debt stays within the new horizon (a TAT beyond it would read as
	// a clock gone back and be forgiven).
	k = max(k, -(g.horizon / g.t))
	return now + g.tau - k*g.t - g.t + wait
}

// floorDiv is x/y rounded toward minus infinity, for y > 0.
func floorDiv(x, y int64) int64 {
	q := x / y
	if x%y < 0 {
		q--
	}
	return q
}

// FullWithin implements [algo.Converter]: the burst and the reservation
// horizon.
func (g *gcra) FullWithin() int64 { return g.span }

// WithVersions implements [algo.Converter]; use [algo.Succeed].
func (g *gcra) WithVersions(v *algo.Versions) algo.Lineage {
	c := *g
	c.vs = v
	c.memNS = algo.VersionNamespace(g.spec)
	return &c
}

// Versions implements [algo.Lineage].
func (g *gcra) Versions() *algo.Versions { return g.vs }

// The reserving twins carry the bucket's lineage, so that a reservation
// reads a key's state through the bucket's versions like a take.

// Converts implements [algo.Converter] as the bucket's.
func (r *gcraTwin) Converts(from algo.Algorithm) bool { return r.g.Converts(from) }

// Convert implements [algo.Converter] as the bucket's.
func (r *gcraTwin) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	return r.g.Convert(s, now, from)
}

// FullWithin implements [algo.Converter] as the bucket's.
func (r *gcraTwin) FullWithin() int64 { return r.g.span }

// WithVersions implements [algo.Converter]: the bucket's (not a twin).
func (r *gcraTwin) WithVersions(v *algo.Versions) algo.Lineage {
	return r.g.WithVersions(v)
}

// Versions implements [algo.Lineage] as the bucket's.
func (r *gcraTwin) Versions() *algo.Versions { return r.g.vs }

// convertLua is the Lua twin of gcra.Convert; op = {interval, burst} of
// the old version (its span is computed as reserveHorizon does: 64 x tau
// is exact, a power of two times an integer below 2^50), p the new one's
// Params.
const convertLua = luasrc.FloorDiv + `
local function convert(s, now, op, p)
  local ft, ftau = op[1], op[1] * op[2]
  local h = 64 * ftau
  if h < 900000000 then h = 900000000 end
  if h > 1125899906842624 then h = 1125899906842624 end
  local fspan = ftau + h
  local t, burst, span = p[1], p[2], p[3]
  local tau = t * burst
  local tat = s[1] or 0
  if tat <= now then return {now} end
  if tat - now > fspan then tat = now + ftau end
  local avail = ftau - (tat - now)
  local k = fdiv(avail, ft)
  if k >= burst then return {now} end
  local wait = ft - (avail - k * ft)
  if wait > t then wait = t end
  local h = fdiv(span - tau, t)
  if k < -h then k = -h end
  return {now + tau - k * t - t + wait}
end
return step, convert
`
