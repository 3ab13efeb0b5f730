package window

import "github.com/floodgate-go/floodgate/store/algo"

var (
	_ algo.Lineage = (*fixed)(nil)
	_ algo.Lineage = (*counter)(nil)
	_ algo.Lineage = (*slidingLog)(nil)
)

// The three windows carry a key's state over a live change by one rule (see
// the package documentation, "Live changes"): the key keeps the units it
// has left in the window at now, capped by the new limit. What it has used
// is counted in the new window holding now (for a fixed window or a
// sliding counter of another length) or kept where it was taken (the
// sliding log's entries, and the sliding counter's previous window when the
// length is the same).

// Versions implements [algo.Lineage].
func (p *params) Versions() *algo.Versions { return p.vs }

// limitNS is the namespace of the limit (not of the version in memory).
func (p *params) limitNS() uint64 { return p.spec.Namespace }

// version returns from as an earlier version of p's limit of type A, and
// whether it is one.
func version[A interface {
	algo.Algorithm
	limitNS() uint64
}](p *params, from algo.Algorithm) (A, bool) {
	o, ok := from.(A)
	return o, ok && o.limitNS() == p.spec.Namespace
}

// succeed is WithVersions on the params of a copy.
func (p *params) succeed(v *algo.Versions) {
	p.vs = v
	p.memNS = algo.VersionNamespace(p.spec)
}

// Converts implements [algo.Converter]: from is a fixed window of the same
// limit.
func (f *fixed) Converts(from algo.Algorithm) bool {
	_, ok := version[*fixed](&f.params, from)
	return ok
}

// Convert implements [algo.Converter]: the count of the old window holding
// now is the units used; the key keeps limit less that (capped by the new
// limit), used in the new window holding now.
func (f *fixed) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	o, ok := version[*fixed](&f.params, from)
	now = clampNow(now)
	if !ok || s.W[0] <= now {
		return algo.State{}
	}
	count := max(0, min(s.W[1], o.limit))
	if s.W[0] < windowStart(now, o.w)+o.w {
		count = 0 // a window that is over
	}
	used := f.limit - min(o.limit-count, f.limit)
	if used <= 0 {
		return algo.State{}
	}
	return algo.State{W: [algo.MaxWords]int64{windowStart(now, f.w) + f.w, used}}
}

// FullWithin implements [algo.Converter]: one window.
func (f *fixed) FullWithin() int64 { return f.w }

// WithVersions implements [algo.Converter]; use [algo.Succeed].
func (f *fixed) WithVersions(v *algo.Versions) algo.Lineage {
	c := *f
	c.succeed(v)
	return &c
}

// Converts implements [algo.Converter]: from is a sliding-window counter
// of the same limit.
func (k *counter) Converts(from algo.Algorithm) bool {
	_, ok := version[*counter](&k.params, from)
	return ok
}

// Convert implements [algo.Converter]: the old estimate at now gives the
// units left, which the key keeps, capped by the new limit. With the same
// window length, the previous window's count is kept (lowered only as far
// as the key must not have more left than that), and the current count is
// set so that the key has exactly that left; with another length, the units
// used are counted in the new window holding now.
func (k *counter) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	o, ok := version[*counter](&k.params, from)
	now = clampNow(now)
	if !ok || s.W[0] <= now {
		return algo.State{}
	}
	// The old step's view at now.
	start, curr, prev := o.counts(&s, now)
	rem := max(0, min(o.limit, o.limit-curr+floorDiv(-prev*(o.w-(now-start)), o.w)))
	left := min(rem, k.limit)
	// The new state: prev2 weighs at most limit-left at now, and curr2
	// makes up the rest.
	start, w := windowStart(now, k.w), k.w
	el := now - start
	var prev2 int64
	if k.w == o.w {
		prev2 = min(prev, k.limit, floorDiv((k.limit-left)*w, w-el))
	}
	curr2 := k.limit - left + floorDiv(-prev2*(w-el), w)
	if curr2 <= 0 && prev2 <= 0 {
		return algo.State{}
	}
	full := start + w
	if curr2 > 0 {
		full += w
	}
	return algo.State{W: [algo.MaxWords]int64{full, start, curr2, prev2}}
}

// FullWithin implements [algo.Converter]: two windows.
func (k *counter) FullWithin() int64 { return 2 * k.w }

// WithVersions implements [algo.Converter]; use [algo.Succeed].
func (k *counter) WithVersions(v *algo.Versions) algo.Lineage {
	c := *k
	c.succeed(v)
	return &c
}

// Converts implements [algo.Converter]: from is a sliding log of the same
// limit.
func (l *slidingLog) Converts(from algo.Algorithm) bool {
	_, ok := version[*slidingLog](&l.params, from)
	return ok
}

// Convert implements [algo.Converter]: the entries of the old window at now
// are the units used; the key keeps limit less them (capped by the new
// limit). The newest entries that the new window still holds are kept, as
// many as that leaves used; when there are fewer (a raise, or a shorter
// window), entries at now make up the count, so that a drained key stays
// drained. The log is a new one: s.Log is left as it is.
func (l *slidingLog) Convert(s algo.State, now int64, from algo.Algorithm) algo.State {
	o, ok := version[*slidingLog](&l.params, from)
	now = clampNow(now)
	if !ok || s.W[0] <= now {
		return algo.State{}
	}
	// The old step's view at now: its entries, expired ones dropped.
	log := o.live(s.Log, now)
	used := l.limit - min(o.limit-int64(len(log)), l.limit)
	if used <= 0 {
		return algo.State{}
	}
	log = unexpired(log, now, l.w)
	if int64(len(log)) > used {
		log = log[int64(len(log))-used:]
	}
	out := make([]int64, used)
	n := copy(out, log)
	for j := range out {
		if j >= n || out[j] > now {
			out[j] = now // padding; or an entry from a clock gone back
		}
	}
	return algo.State{W: [algo.MaxWords]int64{out[used-1] + l.w}, Log: out}
}

// FullWithin implements [algo.Converter]: one window.
func (l *slidingLog) FullWithin() int64 { return l.w }

// WithVersions implements [algo.Converter]; use [algo.Succeed].
func (l *slidingLog) WithVersions(v *algo.Versions) algo.Lineage {
	c := *l
	c.succeed(v)
	return &c
}

// fixedConvertLua is the Lua twin of fixed.Convert: op = {limit, window} of
// the old version, p the new one's.
const fixedConvertLua = `
local function convert(s, now, op, p)
  now = clampnow(now)
  if (s[1] or 0) <= now then return {0, 0} end
  local olimit, ow, limit, w = op[1], op[2], p[1], p[2]
  local count = s[2] or 0
  if count < 0 then count = 0 elseif count > olimit then count = olimit end
  if s[1] < fdiv(now, ow) * ow + ow then count = 0 end
  local left = olimit - count
  if left > limit then left = limit end
  local used = limit - left
  if used <= 0 then return {0, 0} end
  return {fdiv(now, w) * w + w, used}
end
return step, convert
`

// counterConvertLua is the Lua twin of counter.Convert.
const counterConvertLua = `
local function convert(s, now, op, p)
  now = clampnow(now)
  if (s[1] or 0) <= now then return {0, 0, 0, 0} end
  local olimit, ow, limit, w = op[1], op[2], p[1], p[2]
  local start, curr, prev = counts(s, now, olimit, ow)
  local rem = olimit - curr + fdiv(-prev * (ow - (now - start)), ow)
  if rem < 0 then rem = 0 elseif rem > olimit then rem = olimit end
  local left = rem
  if left > limit then left = limit end
  start = fdiv(now, w) * w
  local el = now - start
  local prev2 = 0
  if w == ow then
    prev2 = prev
    if prev2 > limit then prev2 = limit end
    local cap = fdiv((limit - left) * w, w - el)
    if prev2 > cap then prev2 = cap end
  end
  local curr2 = limit - left + fdiv(-prev2 * (w - el), w)
  if curr2 <= 0 and prev2 <= 0 then return {0, 0, 0, 0} end
  local full = start + w
  if curr2 > 0 then full = full + w end
  return {full, start, curr2, prev2}
end
return step, convert
`

// logConvertLua is the Lua twin of slidingLog.Convert.
const logConvertLua = `
local function convert(s, now, op, p)
  now = clampnow(now)
  if (s[1] or 0) <= now then return {0, log = {}} end
  local olimit, ow, limit, w = op[1], op[2], p[1], p[2]
  local old = live(s.log or {}, now, olimit, ow)
  local m = #old
  local left = olimit - m
  if left > limit then left = limit end
  local used = limit - left
  if used <= 0 then return {0, log = {}} end
  local i = 1
  while i <= m and old[i] <= now - w do i = i + 1 end
  if m - i + 1 > used then i = m - used + 1 end
  local log = {}
  for j = i, m do log[#log + 1] = old[j] end
  for j = #log + 1, used do log[j] = now end
  return {log[used] + w, log = log}
end
return step, convert
`
