package redisstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// The scripts of the store. Each embeds the Lua twins it runs ([algo.Lua])
// and does, in one round trip and atomically: read the time (Redis TIME in
// microseconds, or the time a test injects in ARGV), load each key's state
// (a fresh key is the zero state), step, write every state back with a TTL
// equal to its time to full (State.W[0] - now) or delete the key when the
// state is full, and return the decisions {allowed, limit, remaining,
// retry_after_us, reset_after_us, delay_us}.
//
// State encoding in a key: the words as decimal integers joined by ",",
// then, for algorithms with a log, ";" and the log entries joined by ",",
// then "|" and the parameters the state was written with (the algorithm's
// algo.StateParams, joined by ","). A state read with other parameters
// than the caller's (a live change, which another process may not have
// picked up yet) is converted by the twin's convert (algo.Converter)
// before it is stepped; a value without "|" (written before parameters
// were kept) is taken as written with the caller's. Redis 5 and later
// replicate the effects of scripts (not the scripts), so calling TIME
// before writing is allowed.
//
// There are six bodies:
//
//   - scriptOneWord: one call of an algorithm whose state is one word (the
//     token bucket), written out for speed;
//   - scriptGroupBody: any number of ops (key, policy, cost) stepped in
//     order, each key's ops on the state the previous one left: every
//     multi-word Apply (one op) and every ApplyAll (a group of ops, all or
//     nothing);
//   - scriptBatchBody (coalesce.go): independent calls of one algorithm
//     (scriptBatchWordBody when its state is one word);
//   - scriptGroupsBody: the groups of several ApplyAll calls, coalesced
//     (groupcoalesce.go), each run as scriptGroupBody runs one;
//   - scriptTwinBody: the twin alone on states passed in ARGV, touching no
//     key (StepTwin, for the conformance suite).
//
// Scripts are shared by every Store of the process and keyed by the twins
// they embed, never by parameters (which travel in ARGV): a thousand token
// buckets with different rates share one script. Each is a prelude (the
// twins, luaCommon: definitions only) and a body; the store runs it as a
// Redis function whose library runs the prelude once, or as an EVAL script
// of prelude then body (functions.go). Every body is written for the
// server's time per call, which is the throughput of a busy limiter (Redis
// runs one script at a time): one argument per policy, parsed once by a
// library (luaPolicy), states read and written with one match and one
// format (luaShapes), small integers looked up (smallint), no closure
// created per call by a library, tables sized when made (newtab), a
// group's keys read with one MGET.

// luaPolicy defines policy, which turns the description of a policy in
// ARGV into the table the bodies use.
// It needs locals steps and converts (the twins, by index), and library
// (functions.go).
var luaPolicy = luaPolicyPatterns() + `
-- policy returns the policy of twin t (a string: its index in steps) that
-- desc describes (see policyArgs): {step, words, maxlog, params, pstr,
-- convert, vf}, vf the format of a value of the policy without a log (its
-- words, then "|" and pstr: one string.format writes it), else false. A function library keeps what it parsed from one call to the
-- next (at most 256 descriptions, then it starts afresh); a script parses
-- again on every call, with one match (ppat) for up to 9 params. Nothing
-- changes a policy's table once made: the twins do not write to their
-- params.
local pcache, pcount = {}, 0
local function policy(t, desc)
  local c
  if library then
    c = pcache[t]
    if c == nil then
      c = {}
      pcache[t] = c
    end
    local q = c[desc]
    if q then return q end
  end
  local n = string.byte(desc) - 48
  local f, pstr
  local pat = ppat(n)
  if pat then
    f = {string.match(desc, pat)}
    pstr = f[n + 3]
    f[n + 3] = nil
    for j = 1, n + 2 do f[j] = tonumber(f[j]) end
  else
    local head
    head, pstr = string.match(desc, '^.:([^|]*)|(.*)$')
    f = {}
    for x in string.gmatch(head, '[^,]+') do f[#f + 1] = tonumber(x) end
  end
  local p = {}
  for j = 3, #f do p[j - 2] = f[j] end
  local i = tonumber(t)
  local vf = false
  if f[2] == 0 then vf = wfmt[f[1]] .. pstr end
  local q = {steps[i], f[1], f[2], p, pstr, converts[i], vf}
  if library then
    if pcount >= 256 then
      pcache, pcount = {}, 0
      c = {}
      pcache[t] = c
    end
    c[desc] = q
    pcount = pcount + 1
  end
  return q
end
`

// luaParams defines params, policy's counterpart for scriptOneWord, which
// needs only the Params and the state's parameters of its one policy: it
// returns them, and builds and converts nothing else, which a script (that
// parses on every call) feels.
var luaParams = luaPolicyPatterns() + `
local pcache, pcount = {}, 0
local function params(desc)
  if library then
    local e = pcache[desc]
    if e then return e[1], e[2] end
  end
  local n = string.byte(desc) - 48
  local pat = ppat(n)
  local p, pstr
  if pat then
    local f = {string.match(desc, pat)}
    pstr = f[n + 3]
    p = {}
    for j = 1, n do p[j] = tonumber(f[j + 2]) end
  else
    local head
    head, pstr = string.match(desc, '^.:([^|]*)|(.*)$')
    local j = -1
    p = {}
    for x in string.gmatch(head, '[^,]+') do
      if j > 0 then p[j] = tonumber(x) end
      j = j + 1
    end
  end
  if library then
    if pcount >= 256 then pcache, pcount = {}, 0 end
    pcache[desc] = {p, pstr}
    pcount = pcount + 1
  end
  return p, pstr
end
`

// maxPatternParams is the most Params a policy description is parsed with
// one pattern for (ppat); beyond, policy splits it.
const maxPatternParams = 9

// luaPolicyPatterns defines ppat: ppat(n) is the pattern that captures
// the words, maxlog, n Params and the state's parameters of a description
// with n Params (nil beyond maxPatternParams). A function, not a table: a
// script would build the table on every call.
func luaPolicyPatterns() string {
	var b strings.Builder
	b.WriteString("\nlocal function ppat(n)\n")
	for n := range maxPatternParams + 1 {
		if n == 0 {
			b.WriteString("  if")
		} else {
			b.WriteString("  elseif")
		}
		fmt.Fprintf(&b, " n == %d then return '^%%d:(%%d+),(%%d+)%s|(.*)$'\n", n, strings.Repeat(",(%-?%d+)", n))
	}
	b.WriteString("  end\nend\n")
	return b.String()
}

// luaCommon follows the twins in every script but scriptOneWord: the clock,
// the policies, and the encoding of a state in its key.
var luaCommon = luaShapes() + luaNewTab() + luaPolicy + `
-- clock returns (injected, now): the injected time a when it is not empty,
-- else the server's TIME in microseconds.
local function clock(a)
  if a ~= '' then return true, tonumber(a) end
  local t = redis.call('TIME')
  return false, tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- decode turns a key's value (or false) into a state.
local function decode(v, words, maxlog)
  if words == 1 and maxlog == 0 then return {v and tonumber(v) or 0} end
  local s = {}
  for j = 1, words do s[j] = 0 end
  if maxlog > 0 then s.log = {} end
  if v then
    local wpart, lpart = string.match(v, '^([^;]*);?(.*)$')
    local j = 1
    for x in string.gmatch(wpart, '[^,]+') do
      if j <= words then s[j] = tonumber(x) end
      j = j + 1
    end
    if maxlog > 0 then
      local lg = s.log
      for x in string.gmatch(lpart, '[^,]+') do lg[#lg + 1] = tonumber(x) end
    end
  end
  return s
end
-- encode is the inverse of decode.
local function encode(s, words, maxlog)
  if words == 1 and maxlog == 0 then return string.format('%d', s[1]) end
  local parts = {}
  for j = 1, words do parts[j] = string.format('%d', s[j]) end
  local v = table.concat(parts, ',')
  if maxlog > 0 and s.log and #s.log > 0 then
    local lp = {}
    for j = 1, #s.log do lp[j] = string.format('%d', s.log[j]) end
    v = v .. ';' .. table.concat(lp, ',')
  end
  return v
end
-- load turns a key's value (or false) into a state for policy q =
-- {step, words, maxlog, params, pstr, convert}: converted to q's parameters
-- when it was written with others (pstr is q's, as a value holds them). It
-- returns the state, the parameters the value held (nil: none) and the
-- first word the value held (false: no value). A value
-- without a log, as the store writes it, is read with one match (wpat).
local function load(v, q, now)
  local ps, s
  if v and q[3] == 0 then
    local n = q[2]
    if n == 1 then
      local a, r = string.match(v, wpat[1])
      if r then s, ps = {tonumber(a)}, r end
    elseif n == 2 then
      local a, b, r = string.match(v, wpat[2])
      if r then s, ps = {tonumber(a), tonumber(b)}, r end
    else
      local c = {string.match(v, wpat[n])}
      if c[n + 1] then
        s = {}
        for j = 1, n do s[j] = tonumber(c[j]) end
        ps = c[n + 1]
      end
    end
  end
  if not s then
    if v then
      local bar = string.find(v, '|', 1, true)
      if bar then
        ps = string.sub(v, bar + 1)
        v = string.sub(v, 1, bar - 1)
      end
    end
    s = decode(v, q[2], q[3])
  end
  local w0 = v and s[1]
  if ps and ps ~= q[5] and q[6] then
    local op = {}
    for x in string.gmatch(ps, '[^,]+') do op[#op + 1] = tonumber(x) end
    s = q[6](s, now, op, q[4])
  end
  return s, ps, w0
end
-- save writes s to key with the parameters pstr it was stepped with and a
-- TTL equal to its time to full (at least a minute with an injected time),
-- or deletes key when s is full. old is the value the key held when the
-- script read it (false: none; nil: not known): a key that already holds
-- the very value is left alone (a denial changes nothing, and the TTL its
-- write set still runs to the same time to full), and a key that held
-- none is not deleted. ow is the first word the key held (nil: not known):
-- a state whose first word, its time to full, is that one (a fixed window
-- counting within its window) is written with KEEPTTL, since the key's TTL
-- already runs to that time; SET with PX costs the server twice as much.
-- vf, when given, is the policy's value format (policy's q[7]).
local function save(key, s, words, maxlog, now, injected, pstr, old, ow, vf)
  local w = s[1]
  if w <= now then
    if old ~= false then redis.call('DEL', key) end
    return
  end
  local v
  if vf then
    v = string.format(vf, unpack(s, 1, words))
  elseif words == 1 and maxlog == 0 then
    v = string.format('%d|%s', w, pstr)
  elseif maxlog == 0 then
    v = string.format(wfmt[words], unpack(s, 1, words)) .. pstr
  else
    v = encode(s, words, maxlog) .. '|' .. pstr
  end
  if not injected then
    if v == old then return end
    if w == ow then
      redis.call('SET', key, v, 'KEEPTTL')
      return
    end
  end
  local ttl = math.floor((w - now + 999) / 1000)
  if injected and ttl < 60000 then ttl = 60000 end
  redis.call('SET', key, v, 'PX', ttl)
end
`

// luaShapes defines wpat and wfmt, indexed by a state's number of words
// (1..algo.MaxWords), for states without a log: wpat[n] is the pattern
// that captures the n words of a value and the parameters after "|", and
// wfmt[n] the format of the n words and the "|". One string.match and one
// string.format cost the server a fraction of the generic decode and
// encode, which split and join with closures and tables.
func luaShapes() string {
	var pat, fmts []string
	for n := 1; n <= algo.MaxWords; n++ {
		pat = append(pat, "'^"+strings.Repeat("(%-?%d+),", n-1)+"(%-?%d+)|(.*)$'")
		fmts = append(fmts, "'"+strings.Repeat("%d,", n-1)+"%d|'")
	}
	return "\nlocal wpat = {" + strings.Join(pat, ", ") + "}\nlocal wfmt = {" + strings.Join(fmts, ", ") + "}"
}

// luaGroup defines policies, which reads a list of policies from ARGV,
// and rungroup, which runs one group of ops: the body of scriptGroupBody,
// and of scriptGroupsBody for each group of a coalesced call.
//
// policies(A, a) reads the number of policies at A[a], then each policy:
// the index of its twin in steps and its description (policyArgs); it
// returns them (pol[1], pol[2], ...) and the index after the last.
//
// rungroup(K, kb, nk, A, ab, ae, now, test, pol, mode): the group's keys
// are K[kb + 1] .. K[kb + nk], its ops A[ab + 1 .. ae], each three
// arguments: the index of its key among the group's keys, the index of its
// policy in pol, the cost. mode: '0': evaluate, keep nothing; '1': keep
// every state when every op admits, else only the conversions of keys
// written with other parameters; '2': keep every state whatever the
// decisions, as a single Apply does; '3': evaluate for a commit, keeping
// only the conversions. It returns {all_admitted (0 or 1), then each op's
// 6 decision numbers}. Ops on one key with policies of other parameters
// (two versions of a limit) each convert the state the previous one left.
// The group's keys are read at once (one MGET), before anything is
// written: a refused group's peeks read the values it read.
const luaGroup = `
local function policies(A, a)
  local np = smallint[A[a]] or tonumber(A[a])
  local pol = newtab(np)
  for i = 1, np do
    pol[i] = policy(A[a + 1], A[a + 2])
    a = a + 2
  end
  return pol, a + 1
end
-- first returns the entry of a key the group reads for the first time, as
-- op policy q reads it: {state, policy of the last op on it, the value
-- read, its first word}; and, when the value was written with other
-- parameters (a live change), the converted state as it was before any op
-- (a copy: a step may change the state it is given).
local function first(v, q, now)
  local s, ps, w0 = load(v, q, now)
  local e = {s, q, v, w0}
  if ps and ps ~= q[5] and q[6] then
    local c = {}
    for j = 1, #s do c[j] = s[j] end
    if s.log then
      c.log = {}
      for j = 1, #s.log do c.log[j] = s.log[j] end
    end
    return e, c
  end
  return e
end
local function rungroup(K, kb, nk, A, ab, ae, now, test, pol, mode)
local vals
if nk == 1 then
  vals = {redis.call('GET', K[kb + 1])}
else
  vals = redis.call('MGET', unpack(K, kb + 1, kb + nk))
end
local ks, moved = newtab(nk), nil
local out = newtab(1 + 2 * (ae - ab))
out[1] = 1
local o = 1
for i = ab + 1, ae, 3 do
  local k, q = smallint[A[i]] or tonumber(A[i]), pol[smallint[A[i + 1]] or tonumber(A[i + 1])]
  local e = ks[k]
  local s
  if e == nil then
    local c
    e, c = first(vals[k], q, now)
    ks[k], s = e, e[1]
    if c then
      moved = moved or {}
      moved[k] = {c, q}
    end
  else
    s = e[1]
    local pq = e[2]
    if pq[5] ~= q[5] and q[6] then
      local op = {}
      for x in string.gmatch(pq[5], '[^,]+') do op[#op + 1] = tonumber(x) end
      s = q[6](s, now, op, q[4])
    end
    e[2] = q
  end
  local s2, d = q[1](s, now, smallint[A[i + 2]] or tonumber(A[i + 2]), q[4])
  e[1] = s2
  if d[1] == 0 then out[1] = 0 end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = d[1], d[2], d[3], d[4], d[5], d[6]
  o = o + 6
end
if out[1] == 0 and mode ~= '2' then
  -- Refused: an op that would have admitted reports its key as it stands
  -- (a peek on the value read, which nothing changed).
  o = 1
  for i = ab + 1, ae, 3 do
    if out[o + 1] == 1 then
      local k, q = tonumber(A[i]), pol[tonumber(A[i + 1])]
      local _, d = q[1](load(vals[k], q, now), now, 0, q[4])
      for j = 1, 6 do out[o + j] = d[j] end
    end
    o = o + 6
  end
end
if mode == '2' or (mode == '1' and out[1] == 1) then
  for k = 1, nk do
    local e = ks[k]
    if e then
      local q = e[2]
      save(K[kb + k], e[1], q[2], q[3], now, test, q[5], e[3], e[4], q[7])
    end
  end
elseif moved and (mode == '3' or mode == '1') then
  -- Refused, or evaluated for a commit: the keys written with other
  -- parameters (a live change) are kept converted, charged nothing, so
  -- that the new parameters apply from the first request after the change
  -- whatever the group decides.
  for k, m in pairs(moved) do
    local q, e = m[2], ks[k]
    save(K[kb + k], m[1], q[2], q[3], now, test, q[5], e[3], e[4], q[7])
  end
end
return out
end
`

// luaNewTab defines newtab: newtab(n) is an empty table whose array part
// holds n entries (n <= 48; beyond, an empty table), so that filling it
// does not resize it several times on the way, which costs the server more
// than the rest of the work on a small group. A function of table
// constructors with n nils, since Lua 5.1 has no table.new.
func luaNewTab() string {
	var b strings.Builder
	b.WriteString("\nlocal function newtab(n)\n")
	for n := 1; n <= 48; n++ {
		if n == 1 {
			b.WriteString("  if")
		} else {
			b.WriteString("  elseif")
		}
		fmt.Fprintf(&b, " n == %d then return {%s}\n", n, strings.TrimSuffix(strings.Repeat("nil, ", n), ", "))
	}
	b.WriteString("  end\n  return {}\nend\n")
	return b.String()
}

// scriptGroupBody runs ops (rungroup). ARGV: the injected time or the
// empty string, the mode, the policies (see policies), the ops (see
// rungroup). The reply is rungroup's.
const scriptGroupBody = `
local test, now = clock(ARGV[1])
local pol, a = policies(ARGV, 3)
return rungroup(KEYS, 0, #KEYS, ARGV, a - 1, #ARGV, now, test, pol, ARGV[2])
`

// scriptGroupsBody runs several groups, each as scriptGroupBody would, one
// after the other (a group sees what the ones before it wrote): the
// coalesced ApplyAll calls of one script (see groupCoalescer). KEYS: every
// group's keys, one group after the other. ARGV: the injected time or the
// empty string, the policies of every group (see policies: each group's
// ops refer to this list), the number of groups, then each group: its
// number of keys, its number of arguments after this one, its mode, its
// ops (see rungroup). The reply is the array of the groups' replies.
const scriptGroupsBody = `
local test, now = clock(ARGV[1])
local pol, a = policies(ARGV, 2)
local res = {}
local kb = 0
for g = 1, tonumber(ARGV[a]) do
  local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  res[g] = rungroup(KEYS, kb, nk, ARGV, a + 3, a + 2 + na, now, test, pol, ARGV[a + 3])
  kb = kb + nk
  a = a + 2 + na
end
return res
`

// scriptTwinBody steps the twin steps[1] on states given in ARGV, touching
// no key. ARGV: the policy's description (policyArgs), then each step: the
// encoded state (without parameters), now, the cost. The reply is, for
// each step, the new encoded state and the 6 decision numbers.
const scriptTwinBody = `
local q = policy('1', ARGV[1])
local words, maxlog, p = q[2], q[3], q[4]
local out = {}
for i = 2, #ARGV, 3 do
  local s, d = steps[1](decode(ARGV[i], words, maxlog), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), p)
  out[#out + 1] = encode(s, words, maxlog)
  for j = 1, 6 do out[#out + 1] = d[j] end
end
return out
`

// scriptOneWord is the script for the most common call, one policy whose
// state is one word (the token bucket). ARGV: the cost, the injected time or the
// empty string, the policy's description (policyArgs). The reply is the decision. It keeps the
// encoding of the other scripts and is written out without luaCommon's
// helpers: every closure a script creates costs server time on every call.
// Like save, it writes nothing when the key already holds the new value (a
// denial) and deletes nothing when there is no key.
const scriptOneWord = `
local n = smallint[ARGV[1]] or tonumber(ARGV[1])
local test = ARGV[2] ~= ''
local now
if test then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local p, pstr = params(ARGV[3])
local v = redis.call('GET', KEYS[1])
local w = 0
if v then
  local bar = string.find(v, '|', 1, true)
  if not bar then
    w = tonumber(v)
  else
    w = tonumber(string.sub(v, 1, bar - 1))
    local ps = string.sub(v, bar + 1)
    if ps ~= pstr and convert then
      local op = {}
      for x in string.gmatch(ps, '[^,]+') do op[#op + 1] = tonumber(x) end
      w = convert({w}, now, op, p)[1]
    end
  end
end
local s, d = step({w}, now, n, p)
w = s[1]
if w <= now then
  if v then redis.call('DEL', KEYS[1]) end
else
  local nv = string.format('%d|%s', w, pstr)
  if test or nv ~= v then
    local ttl = math.floor((w - now + 999) / 1000)
    if test and ttl < 60000 then ttl = 60000 end
    redis.call('SET', KEYS[1], nv, 'PX', ttl)
  end
end
return d
`

// scriptKind picks the body of a script.
type scriptKind byte

const (
	kindOneWord scriptKind = iota
	kindGroup
	kindTwin
	kindGroups // coalesced groups
)

// buildScript returns the script of kind embedding twins (the twins are
// steps[1], steps[2], ... in that order; kindOneWord takes one): its
// prelude (the twins, luaCommon) and its body.
func buildScript(kind scriptKind, twins []algo.Spec) *script {
	var b strings.Builder
	names := make([]string, len(twins))
	for i, sp := range twins {
		names[i] = sp.Name
	}
	fmt.Fprintf(&b, "-- floodgate redisstore script (%s)\n", strings.Join(names, ", "))
	// A twin's chunk evaluates to its step and, for an algo.Converter, its
	// convert.
	if kind == kindOneWord {
		fmt.Fprintf(&b, "local step, convert = (function()\n%s\nend)()\n%s", twins[0].Lua.Source, luaParams)
		return newScript(b.String(), scriptOneWord)
	}
	b.WriteString("local steps, converts = {}, {}\n")
	for i, sp := range twins {
		fmt.Fprintf(&b, "-- twin %d: %s\nsteps[%d], converts[%d] = (function()\n%s\nend)()\n", i+1, sp.Name, i+1, i+1, sp.Lua.Source)
	}
	b.WriteString(luaCommon)
	if kind == kindTwin {
		return newScript(b.String(), scriptTwinBody)
	}
	b.WriteString(luaGroup)
	if kind == kindGroups {
		return newScript(b.String(), scriptGroupsBody)
	}
	return newScript(b.String(), scriptGroupBody)
}

// twins numbers the Lua twins (Name and Source) the process has seen, and
// caches one script per kind and list of twin numbers.
var twins struct {
	mu      sync.Mutex
	ids     map[string]uint16
	specs   []algo.Spec
	scripts atomic.Pointer[map[string]*script] // copy on write
}

// twinID returns the number of sp's twin.
func twinID(sp algo.Spec) (uint16, error) {
	k := sp.Name + "\x00" + sp.Lua.Source
	twins.mu.Lock()
	defer twins.mu.Unlock()
	if id, ok := twins.ids[k]; ok {
		return id, nil
	}
	if len(twins.specs) >= 1<<16 {
		return 0, fmt.Errorf("%w: redisstore: more than %d distinct Lua twins", floodgate.ErrInvalidConfig, 1<<16)
	}
	if twins.ids == nil {
		twins.ids = map[string]uint16{}
	}
	id := uint16(len(twins.specs))
	twins.ids[k] = id
	twins.specs = append(twins.specs, algo.Spec{Name: sp.Name, Lua: algo.Lua{Source: sp.Lua.Source}})
	return id, nil
}

// scriptFor returns the script of kind embedding the twins ids, in that
// order (for kindGroup and kindGroups, sorted: every group of the same
// twins shares one script).
func scriptFor(kind scriptKind, ids []uint16) *script {
	var buf [1 + 2*8]byte
	key := append(buf[:0], byte(kind))
	for _, id := range ids {
		key = append(key, byte(id>>8), byte(id))
	}
	if m := twins.scripts.Load(); m != nil {
		if l := (*m)[string(key)]; l != nil {
			return l
		}
	}
	twins.mu.Lock()
	defer twins.mu.Unlock()
	old := twins.scripts.Load()
	if old != nil {
		if l := (*old)[string(key)]; l != nil {
			return l
		}
	}
	specs := make([]algo.Spec, len(ids))
	for i, id := range ids {
		specs[i] = twins.specs[id]
	}
	l := buildScript(kind, specs)
	next := make(map[string]*script, 1)
	if old != nil {
		next = make(map[string]*script, len(*old)+1)
		for k, v := range *old {
			next[k] = v
		}
	}
	next[string(key)] = l
	twins.scripts.Store(&next)
	return l
}

// policy is an algorithm prepared for the Redis store: everything a call
// needs that does not depend on the key, computed once.
type policy struct {
	alg     algo.Algorithm
	spec    algo.Spec
	nsHex   string   // the namespace in 16 hex digits: part of the Redis key
	args    []string // ARGV for this policy: its description (policyArgs)
	local   algo.Algorithm
	twin    uint16
	oneWord bool       // Apply runs scriptOneWord, else scriptGroupBody
	script  *script    // the script of Apply
	co      *coalescer // nil when the store does not coalesce
}

func newPolicy(alg algo.Algorithm, fp FailurePolicy) (*policy, error) {
	if alg == nil {
		return nil, fmt.Errorf("%w: redisstore: nil algorithm", floodgate.ErrInvalidConfig)
	}
	sp := alg.Spec()
	if sp.Words < 1 || sp.Words > algo.MaxWords || sp.MaxLog < 0 {
		return nil, fmt.Errorf("%w: redisstore: algorithm %q uses %d words and a log of %d, want 1..%d words", floodgate.ErrInvalidConfig, sp.Name, sp.Words, sp.MaxLog, algo.MaxWords)
	}
	if strings.TrimSpace(sp.Lua.Source) == "" {
		return nil, fmt.Errorf("%w: redisstore: algorithm %q has no Lua twin", floodgate.ErrInvalidConfig, sp.Name)
	}
	id, err := twinID(sp)
	if err != nil {
		return nil, err
	}
	p := &policy{
		alg:     alg,
		spec:    sp,
		nsHex:   hex16(sp.Namespace),
		args:    policyArgs(sp),
		twin:    id,
		oneWord: sp.Words == 1 && sp.MaxLog == 0,
	}
	if p.oneWord {
		p.script = scriptFor(kindOneWord, []uint16{id})
	} else {
		p.script = scriptFor(kindGroup, []uint16{id})
	}
	if fp.mode == modeFallback {
		l, err := fp.derive(alg)
		if err != nil {
			return nil, fmt.Errorf("redisstore: fallback for %q: %w", sp.Name, err)
		}
		p.local = l
	}
	return p, nil
}

// policyArgs is the ARGV that describes sp to every script: one string,
// the number of Params as one digit (or "*" beyond maxPatternParams) and
// ":", then words, maxlog and the Params in decimal joined by ",", then "|"
// and the state's parameters as a value holds them ([stateParams]). One
// argument costs the server less than several, and a function library
// keeps the policy it parsed from it (see luaPolicy).
func policyArgs(sp algo.Spec) []string {
	var b strings.Builder
	if n := len(sp.Lua.Params); n <= maxPatternParams {
		b.WriteByte(byte('0' + n))
	} else {
		b.WriteByte('*')
	}
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(sp.Words))
	b.WriteByte(',')
	b.WriteString(strconv.Itoa(sp.MaxLog))
	for _, p := range sp.Lua.Params {
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(p, 10))
	}
	b.WriteByte('|')
	b.WriteString(stateParams(sp))
	return []string{b.String()}
}

// stateParams is what a value holds after "|": the parameters its state was
// written with (algo.StateParams), in decimal, joined by ",".
func stateParams(sp algo.Spec) string {
	var b strings.Builder
	for i, p := range algo.StateParams(sp) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(p, 10))
	}
	return b.String()
}

// same reports whether sp describes the algorithm p was prepared for: same
// namespace, twin, shape and parameters (a live change keeps the namespace
// and changes the parameters).
func (p *policy) same(sp *algo.Spec) bool {
	return p.spec.Namespace == sp.Namespace && p.spec.Words == sp.Words && p.spec.MaxLog == sp.MaxLog &&
		p.spec.Name == sp.Name && p.spec.Lua.Source == sp.Lua.Source && slices.Equal(p.spec.Lua.Params, sp.Lua.Params)
}

const hexDigits = "0123456789abcdef"

func hex16(v uint64) string {
	var b [16]byte
	putHex16(b[:], v)
	return string(b[:])
}

func putHex16(b []byte, v uint64) {
	for i := 15; i >= 0; i-- {
		b[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// fnv64a is FNV-1a, 64 bits: stable across processes and machines (the key
// of one user must map to one Redis key everywhere), allocation-free.
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// crcTable is the table of CRC-16/XMODEM (polynomial 0x1021), the hash of
// Redis Cluster's key slots.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// slotOf returns the Redis Cluster slot of every Redis key of user key: the
// CRC16 of its hash tag, modulo 16384.
func slotOf(key string) uint16 {
	var tag [16]byte
	putHex16(tag[:], fnv64a(key))
	var c uint16
	for _, b := range tag {
		c = c<<8 ^ crcTable[byte(c>>8)^b]
	}
	return c & 16383
}
