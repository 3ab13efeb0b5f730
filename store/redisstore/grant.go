package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/share"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Leases (package lease) take units from a key's state several at a time:
// Grant runs the algorithm's grant step ([algo.Granter]) on the same Redis
// key, with the same value format, conversion and TTL as Apply, so that a
// key decided by Apply on one node and leased on another is one bucket.
// Heartbeat and Leave keep the count of the processes that share a limit.

// scriptGrantBody is the grant script: the claim's division (package
// internal/share, its Go twin) around the algorithm's grant step. KEYS:
// the bucket, the board. ARGV: want, least, the injected time or the
// empty string, member, demand, the report's period (µs), the refill (per
// second), the policy's description (policyArgs). The reply is {granted,
// wait_us, remaining, reset_us, shared}. The board lives a period beyond
// the last report on it, or until the bucket is full again when that is
// later (a minute at least with an injected time): its pools matter until
// then.
const scriptGrantBody = `
local want, least = tonumber(ARGV[1]), tonumber(ARGV[2])
local test, now = clock(ARGV[3])
local member, demand, period, refill = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local q = policy('1', ARGV[8])
local p, pstr = q[4], q[5]
local s = load(redis.call('GET', KEYS[1]), q, now)
local board = ''
if member ~= '' then board = redis.call('GET', KEYS[2]) or '' end
local w, b2, granted, wait, rem, reset, shared, last = divide(grant, p, s[1], now, board, want, least, member, demand, period, refill)
save(KEYS[1], {w}, 1, 0, now, test, pstr)
if member ~= '' then
  if b2 == '' then
    if board ~= '' then redis.call('DEL', KEYS[2]) end
  else
    local px = math.floor(math.max(last - now + period, reset) / 1000) + 1
    if test and px < 60000 then px = 60000 end
    redis.call('SET', KEYS[2], b2, 'PX', px)
  end
end
return {granted, wait, rem, reset, shared}
`

// scriptGrantTwinBody runs grant on words given in ARGV, touching no key.
// ARGV: the number of Params, the Params, then each call: w, now, want,
// least. The reply is, for each call, {w2, granted, wait, remaining,
// reset}.
const scriptGrantTwinBody = `
local np = tonumber(ARGV[1])
local p = {}
for j = 1, np do p[j] = tonumber(ARGV[1 + j]) end
local out = {}
for i = 2 + np, #ARGV, 4 do
  local w, g, wait, rem, reset = grant(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), p)
  out[#out + 1] = w
  out[#out + 1] = g
  out[#out + 1] = wait
  out[#out + 1] = rem
  out[#out + 1] = reset
end
return out
`

var grantScripts sync.Map // kind + Name + Source -> *script

func grantScriptFor(sp algo.Spec, g algo.Granter, twin bool) *script {
	key := fmt.Sprintf("%t\x00%s\x00%s\x00%s", twin, sp.Name, sp.Lua.Source, g.GrantLua())
	if l, ok := grantScripts.Load(key); ok {
		return l.(*script)
	}
	body := scriptGrantBody
	if twin {
		body = scriptGrantTwinBody
	}
	prelude := fmt.Sprintf("-- floodgate redisstore grant script: %s\nlocal step, convert = (function()\n%s\nend)()\nlocal steps, converts = {step}, {convert}\nlocal grant = (function()\n%s\nend)()\nlocal divide = (function()\n%s\nend)()\n%s",
		sp.Name, sp.Lua.Source, g.GrantLua(), share.Lua, luaCommon)
	l, _ := grantScripts.LoadOrStore(key, newScript(prelude, body))
	return l.(*script)
}

func granter(alg algo.Algorithm) (algo.Granter, algo.Spec, error) {
	if alg == nil {
		return nil, algo.Spec{}, fmt.Errorf("%w: redisstore: nil algorithm", floodgate.ErrInvalidConfig)
	}
	sp := alg.Spec()
	g, ok := alg.(algo.Granter)
	if !ok || sp.Words != 1 || sp.MaxLog != 0 {
		return nil, sp, fmt.Errorf("%w: redisstore: algorithm %q cannot grant (not a one-word algo.Granter)", floodgate.ErrInvalidConfig, sp.Name)
	}
	return g, sp, nil
}

// Grant takes up to c.Want units (at least c.Least, else none) from key's
// state for alg, in one script call at the Redis server's time, with the
// grant step of alg ([algo.Granter]: the token bucket's). The state is the
// one Apply steps: same Redis key, value and TTL. Give units back with
// Apply and a negative cost.
//
// A claim with a Member also records the member's demand on a board kept
// beside the key (same hash slot): when the members' demands add up to
// more than the bucket's refill, the claim spreads what the bucket holds
// over the members in proportion to their demands and takes its member's
// share (Grant.Shared), so that a saturated bucket is divided as one
// bucket fed every member's requests would divide it, at one call per
// member per refresh (package lease).
//
// Grant goes through the store's connection breaker and timeout like
// Apply, but not through its failure policy: an error (wrapping
// [floodgate.ErrStoreUnavailable] when Redis could not answer) is returned
// as it is, for the caller to decide. Like every consuming script it is
// never retried blindly.
func (s *Store) Grant(ctx context.Context, key string, alg algo.Algorithm, c algo.Claim) (algo.Grant, error) {
	g, sp, err := granter(alg)
	if err != nil {
		return algo.Grant{}, err
	}
	if err := checkClaim(c, sp.Capacity); err != nil {
		return algo.Grant{}, err
	}
	p, err := s.prepare(alg)
	if err != nil {
		return algo.Grant{}, err
	}
	script := grantScriptFor(sp, g, false)
	sent, err := s.admit()
	if err != nil {
		err, _ = s.failure(ctx, err)
		return algo.Grant{}, err
	}
	cctx, cancel := s.callContext(ctx)
	args := make([]string, 0, 7+len(p.args))
	args = append(args, strconv.FormatInt(c.Want, 10), strconv.FormatInt(c.Least, 10), s.injectedNow(),
		c.Member, strconv.FormatInt(c.Demand, 10), strconv.FormatInt(int64(c.Period/time.Microsecond), 10),
		strconv.FormatFloat(g.Refill(), 'g', -1, 64))
	args = append(args, p.args...)
	keys := []string{s.redisKey(key, p.nsHex), s.boardKey(key, p.nsHex)}
	arr, err := s.call(cctx, script, keys, args).ToArray()
	if cancel != nil {
		cancel()
	}
	s.brk.done(sent, err, ctx.Err() != nil)
	if err != nil {
		err, _ = s.failure(ctx, err)
		return algo.Grant{}, err
	}
	v, err := ints(arr, 5)
	if err != nil {
		return algo.Grant{}, err
	}
	return algo.Grant{Granted: v[0], Wait: v[1], Remaining: v[2], Reset: v[3], Shared: v[4] == 1}, nil
}

// checkClaim refuses a claim outside what Grant documents.
func checkClaim(c algo.Claim, capacity int64) error {
	if c.Want < 1 || c.Least < 1 || c.Least > c.Want || c.Want > capacity {
		return fmt.Errorf("%w: redisstore: grant of %d (at least %d) outside 1..%d", floodgate.ErrInvalidCost, c.Want, c.Least, capacity)
	}
	if c.Member != "" {
		if !validMember(c.Member) || c.Demand < 0 || c.Demand >= 1<<32 || c.Period < time.Millisecond || c.Period > 24*time.Hour {
			return fmt.Errorf("%w: redisstore: claim of member %q: a member of at most 64 letters, digits, '.', '_' and '-', demand in 0..2^32, period in 1ms..24h", floodgate.ErrInvalidConfig, c.Member)
		}
	}
	return nil
}

// validMember reports whether m may name a member on a board: 1 to 64
// ASCII letters, digits, '.', '_' and '-' (a board separates its fields
// with spaces and its lines with newlines).
func validMember(m string) bool {
	if len(m) > 64 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// boardKey is the Redis key of key's board (see Grant): in key's hash
// slot, and distinct from every state key ("#" where those have ":").
func (s *Store) boardKey(key, nsHex string) string {
	k := s.redisKey(key, nsHex)
	i := len(s.prefix) + 18 + len(nsHex)
	return k[:i] + "#" + k[i+1:]
}

func ints(arr []rueidis.RedisMessage, n int) ([]int64, error) {
	if len(arr) != n {
		return nil, errReply
	}
	v := make([]int64, n)
	for i := range v {
		x, err := arr[i].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errReply, err)
		}
		v[i] = x
	}
	return v, nil
}

// GrantTwin runs alg's Lua grant step on the Redis server once for each i,
// on w[i] at now[i] with want[i] and least[i], touching no key, and
// returns the new words and the grants. It exists for the Go-to-Lua
// equivalence test of an [algo.Granter]; nothing else needs it.
func (s *Store) GrantTwin(ctx context.Context, alg algo.Algorithm, w, now, want, least []int64) ([]int64, []algo.Grant, error) {
	g, sp, err := granter(alg)
	if err != nil {
		return nil, nil, err
	}
	if len(now) != len(w) || len(want) != len(w) || len(least) != len(w) {
		return nil, nil, fmt.Errorf("%w: redisstore: GrantTwin with slices of different lengths", floodgate.ErrInvalidConfig)
	}
	if err := s.ready(); err != nil {
		return nil, nil, err
	}
	script := grantScriptFor(sp, g, true)
	next := make([]int64, len(w))
	out := make([]algo.Grant, len(w))
	for lo := 0; lo < len(w); lo += twinBatch {
		hi := min(lo+twinBatch, len(w))
		args := []string{strconv.Itoa(len(sp.Lua.Params))}
		for _, x := range sp.Lua.Params {
			args = append(args, strconv.FormatInt(x, 10))
		}
		for i := lo; i < hi; i++ {
			args = append(args, strconv.FormatInt(w[i], 10), strconv.FormatInt(now[i], 10), strconv.FormatInt(want[i], 10), strconv.FormatInt(least[i], 10))
		}
		cctx, cancel := s.callContext(ctx)
		arr, err := s.call(cctx, script, nil, args).ToArray()
		if cancel != nil {
			cancel()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: GrantTwin: %w", err)
		}
		v, err := ints(arr, 5*(hi-lo))
		if err != nil {
			return nil, nil, err
		}
		for i := lo; i < hi; i++ {
			r := v[5*(i-lo):]
			next[i] = r[0]
			out[i] = algo.Grant{Granted: r[1], Wait: r[2], Remaining: r[3], Reset: r[4]}
		}
	}
	return next, out, nil
}

// scriptHeartbeat records member as live in the sorted set KEYS[1] (score:
// the server's time in milliseconds), drops the members not seen for ttl
// ms (ARGV[2]), keeps the set for ttl, and returns how many are live.
const scriptHeartbeat = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
`

var (
	heartbeatScript = newScript("-- floodgate redisstore heartbeat\n", scriptHeartbeat)
	leaveScript     = newScript("-- floodgate redisstore leave\n", `redis.call('ZREM', KEYS[1], ARGV[1]) return redis.call('ZCARD', KEYS[1])`)
)

// heartbeatKey is the Redis key of group's heartbeats: the prefix, a hash
// tag of group, "hb:" and group.
func (s *Store) heartbeatKey(group string) string {
	var tag [16]byte
	putHex16(tag[:], fnv64a(group))
	return s.prefix + "{" + string(tag[:]) + "}hb:" + group
}

// Heartbeat records that member of group is alive now (the Redis server's
// time), forgets the members of group not heard from for ttl, and returns
// the number of live members, member included. The group's key expires
// ttl after the last heartbeat. It goes through the breaker and timeout as
// Grant does; ttl is rounded up to a millisecond.
func (s *Store) Heartbeat(ctx context.Context, group, member string, ttl time.Duration) (int, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: redisstore: heartbeat ttl %v <= 0", floodgate.ErrInvalidConfig, ttl)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	return s.members(ctx, heartbeatScript, group, member, strconv.FormatInt(int64(ms), 10))
}

// Leave removes member from group at once (a process that stops) and
// returns the number of members left.
func (s *Store) Leave(ctx context.Context, group, member string) (int, error) {
	return s.members(ctx, leaveScript, group, member)
}

func (s *Store) members(ctx context.Context, script *script, group string, args ...string) (int, error) {
	sent, err := s.admit()
	if err != nil {
		err, _ = s.failure(ctx, err)
		return 0, err
	}
	cctx, cancel := s.callContext(ctx)
	n, err := s.call(cctx, script, []string{s.heartbeatKey(group)}, args).AsInt64()
	if cancel != nil {
		cancel()
	}
	s.brk.done(sent, err, ctx.Err() != nil)
	if err != nil {
		err, _ = s.failure(ctx, err)
		return 0, err
	}
	return int(n), nil
}
