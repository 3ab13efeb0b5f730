package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// The Redis script that runs one decision. It embeds the Lua twin of every
// policy it checks (one for a plain store call, several for a multi-policy
// limiter) and does, in one round trip and atomically:
//
//  1. read the time: Redis TIME in microseconds, or ARGV[2] when a test
//     injects it;
//  2. load each policy's state from its key (a fresh key is the zero state);
//  3. step every policy with the cost ARGV[1]; when one denies, step the
//     others again with cost 0 (a peek) so that nothing is consumed anywhere;
//  4. write every state back with a TTL equal to its time to full
//     (State.W[0] - now), or delete the key when the state is full;
//  5. return the merged decision {allowed, limit, remaining, retry_after_us,
//     reset_after_us, delay_us}; with an injected time the new states follow.
//
// Then each policy in turn: words, maxlog, the number of Params, the Params.
//
// State encoding in the key: the words as decimal integers joined by ",",
// then, for algorithms with a log, ";" and the log entries joined by ",".
// Redis 5 and later replicate the effects of scripts (not the scripts), so
// calling TIME before writing is allowed.
const scriptHead = `-- floodgate redisstore decision script
local steps = {}
`

// luaCommon is the start of every script of the store: the clock, and the
// encoding of a state in its key.
const luaCommon = `
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
-- save writes s to key with a TTL equal to its time to full (at least a
-- minute with an injected time), or deletes key when s is full.
local function save(key, s, words, maxlog, now, injected)
  local w = s[1]
  if w <= now then
    redis.call('DEL', key)
    return
  end
  local v
  if words == 1 and maxlog == 0 then
    v = string.format('%d', w)
  else
    local parts = {}
    for j = 1, words do parts[j] = string.format('%d', s[j]) end
    v = table.concat(parts, ',')
    if maxlog > 0 and s.log and #s.log > 0 then
      local lp = {}
      for j = 1, #s.log do lp[j] = string.format('%d', s.log[j]) end
      v = v .. ';' .. table.concat(lp, ',')
    end
  end
  local ttl = math.floor((w - now + 999) / 1000)
  if injected and ttl < 60000 then ttl = 60000 end
  redis.call('SET', key, v, 'PX', ttl)
end
`

const scriptBody = `
local n = tonumber(ARGV[1])
local test, now = clock(ARGV[2])
local k = #KEYS
local words, maxlog, params, raw = {}, {}, {}, {}
local a = 3
for i = 1, k do
  local np = tonumber(ARGV[a + 2])
  words[i], maxlog[i] = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local p = {}
  for j = 1, np do p[j] = tonumber(ARGV[a + 2 + j]) end
  params[i] = p
  a = a + 3 + np
  raw[i] = redis.call('GET', KEYS[i])
end
local states, ds, allowed = {}, {}, true
for i = 1, k do
  local s2, d = steps[i](decode(raw[i], words[i], maxlog[i]), now, n, params[i])
  states[i], ds[i] = s2, d
  if d[1] == 0 then allowed = false end
end
if not allowed and k > 1 then
  for i = 1, k do
    if ds[i][1] ~= 0 then
      states[i], ds[i] = steps[i](decode(raw[i], words[i], maxlog[i]), now, 0, params[i])
    end
  end
end
for i = 1, k do
  save(KEYS[i], states[i], words[i], maxlog[i], now, test)
end
local acc = ds[1]
if k > 1 then
  acc = {acc[1], acc[2], acc[3], acc[4], acc[5], acc[6]}
  for i = 2, k do
    local d = ds[i]
    if d[1] == 0 then acc[1] = 0 end
    if d[3] < acc[3] or (d[3] == acc[3] and d[2] < acc[2]) then acc[2], acc[3] = d[2], d[3] end
    if d[4] > acc[4] then acc[4] = d[4] end
    if d[5] > acc[5] then acc[5] = d[5] end
    if d[6] > acc[6] then acc[6] = d[6] end
  end
  if acc[1] == 0 then acc[6] = 0 end
end
if test then
  acc = {acc[1], acc[2], acc[3], acc[4], acc[5], acc[6]}
  for i = 1, k do
    local s = states[i]
    for j = 1, words[i] do acc[#acc + 1] = s[j] end
    local lg = s.log or {}
    acc[#acc + 1] = #lg
    for j = 1, #lg do acc[#acc + 1] = lg[j] end
  end
end
return acc
`

// scriptOneWord is the script for the most common case, one policy whose
// state is one word (the token bucket): the same arguments, the same encoding
// of the state and the same reply as the general script, with less work (it
// is written out without luaCommon's helpers: every closure a script creates
// costs server time on every call).
const scriptOneWord = `
local n = tonumber(ARGV[1])
local test = ARGV[2] ~= ''
local now
if test then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local p = {}
for j = 1, tonumber(ARGV[5]) do p[j] = tonumber(ARGV[5 + j]) end
local v = redis.call('GET', KEYS[1])
local s, d = step({v and tonumber(v) or 0}, now, n, p)
local w = s[1]
if w <= now then
  redis.call('DEL', KEYS[1])
else
  local ttl = math.floor((w - now + 999) / 1000)
  if test and ttl < 60000 then ttl = 60000 end
  redis.call('SET', KEYS[1], string.format('%d', w), 'PX', ttl)
end
if test then
  return {d[1], d[2], d[3], d[4], d[5], d[6], w, 0}
end
return d
`

// buildScript returns the script text for the policies described by specs,
// in that order.
func buildScript(specs []algo.Spec) string {
	var b strings.Builder
	if len(specs) == 1 && specs[0].Words == 1 && specs[0].MaxLog == 0 {
		fmt.Fprintf(&b, "-- floodgate redisstore decision script: %s\nlocal step = (function()\n%s\nend)()\n", specs[0].Name, specs[0].Lua.Source)
		b.WriteString(scriptOneWord)
		return b.String()
	}
	b.WriteString(scriptHead)
	for i, sp := range specs {
		fmt.Fprintf(&b, "-- policy %d: %s\nsteps[%d] = (function()\n%s\nend)()\n", i+1, sp.Name, i+1, sp.Lua.Source)
	}
	b.WriteString(luaCommon)
	b.WriteString(scriptBody)
	return b.String()
}

// scripts caches one rueidis.Lua per combination of (Name, Source) (and
// the state's shape, which picks the script's template), shared
// by every Store of the process: the script text does not depend on the
// algorithm's parameters (they travel in ARGV), so a thousand token buckets
// with different rates share one script.
var scripts sync.Map // string -> *rueidis.Lua

func scriptFor(specs []algo.Spec) *rueidis.Lua {
	var kb strings.Builder
	for _, sp := range specs {
		fmt.Fprintf(&kb, "%s/%d/%d", sp.Name, sp.Words, sp.MaxLog)
		kb.WriteByte(0)
		kb.WriteString(sp.Lua.Source)
		kb.WriteByte(1)
	}
	key := kb.String()
	if l, ok := scripts.Load(key); ok {
		return l.(*rueidis.Lua)
	}
	// NewLuaScript (not NewLuaScriptRetryable): the EVALSHA/EVAL of a
	// consuming script is never retried by rueidis after a connection error,
	// because a command that was written may have run.
	l, _ := scripts.LoadOrStore(key, rueidis.NewLuaScript(buildScript(specs)))
	return l.(*rueidis.Lua)
}

// policy is an algorithm prepared for the Redis store: everything a call
// needs that does not depend on the key, computed once.
type policy struct {
	alg    algo.Algorithm
	spec   algo.Spec
	nsHex  string   // the namespace in 16 hex digits: part of the Redis key
	args   []string // ARGV for this policy: words, maxlog, len(params), params...
	limit  int64    // the capacity (Limit of a fresh state), for fail-open/closed decisions
	local  algo.Algorithm
	script *rueidis.Lua
	co     *coalescer // nil when the store does not coalesce
}

func newPolicy(alg algo.Algorithm, fp FailurePolicy) (*policy, error) {
	if alg == nil {
		return nil, fmt.Errorf("%w: redisstore: nil algorithm", floodgate.ErrInvalidConfig)
	}
	sp := alg.Spec()
	if sp.Words < 1 || sp.Words > algo.MaxWords {
		return nil, fmt.Errorf("%w: redisstore: algorithm %q uses %d words, want 1..%d", floodgate.ErrInvalidConfig, sp.Name, sp.Words, algo.MaxWords)
	}
	if strings.TrimSpace(sp.Lua.Source) == "" {
		return nil, fmt.Errorf("%w: redisstore: algorithm %q has no Lua twin", floodgate.ErrInvalidConfig, sp.Name)
	}
	args := []string{strconv.Itoa(sp.Words), strconv.Itoa(sp.MaxLog), strconv.Itoa(len(sp.Lua.Params))}
	for _, p := range sp.Lua.Params {
		args = append(args, strconv.FormatInt(p, 10))
	}
	_, d := alg.Step(algo.State{}, floodgate.Nanotime()/1000, 0)
	p := &policy{
		alg:    alg,
		spec:   sp,
		nsHex:  hex16(sp.Namespace),
		args:   args,
		limit:  d.Limit,
		script: scriptFor([]algo.Spec{sp}),
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

// same reports whether alg is the algorithm p was prepared for (same
// namespace, name and twin).
func (p *policy) same(sp *algo.Spec) bool {
	return p.spec.Namespace == sp.Namespace && p.spec.Name == sp.Name && p.spec.Lua.Source == sp.Lua.Source
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
