package floodgate_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/internal/livetest"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/algo"
)

// luaClient connects to the Redis of the test setup (see redistest.Addr).
func luaClient(t *testing.T) rueidis.Client { return redistest.Client(t) }

// convertHarness runs an algorithm's Lua convert on the state, time and
// Params it is given, and returns the new state (the words, then the
// log's length and entries), refusing any value that is not an exact
// integer of a double.
const convertHarness = `
local a = 1
local function nxt() local x = tonumber(ARGV[a]); a = a + 1; return x end
local words, hasLog, now = nxt(), nxt(), nxt()
local op, p = {}, {}
for j = 1, nxt() do op[j] = nxt() end
for j = 1, nxt() do p[j] = nxt() end
local s = {}
for j = 1, words do s[j] = nxt() end
if hasLog == 1 then
  s.log = {}
  for j = 1, nxt() do s.log[j] = nxt() end
end
local s2 = convert(s, now, op, p)
local out = {}
for j = 1, words do out[j] = s2[j] or 0 end
local lg = s2.log or {}
out[#out + 1] = #lg
for j = 1, #lg do out[#out + 1] = lg[j] end
` + luaExactReply

// luaExactReply ends a harness: it returns out, refusing any value that is
// not an exact integer of a double.
const luaExactReply = `
for j = 1, #out do
  local x = out[j]
  if type(x) ~= 'number' or x ~= math.floor(x) or math.abs(x) >= 9007199254740992 then
    return redis.error_reply('value ' .. j .. ' is not an exact integer: ' .. tostring(x))
  end
end
return out
`

// convertCase is one conversion: the state an old version left, the time,
// and what the new version's Go Convert made of it.
type convertCase struct {
	from, to algo.Algorithm
	in, out  algo.State
	now      int64
}

// TestConvertLuaEquivalence converts, for every family and every ordered
// pair of versions, states that the old version's steps (and reservations)
// left over random sequences, at random times, in Go (Converter.Convert)
// and in Lua (the chunk's convert) on a real Redis, and requires identical
// states. It needs FLOODGATE_REDIS_ADDR (scripts/redis.sh start exports
// it).
func TestConvertLuaEquivalence(t *testing.T) {
	client := luaClient(t)
	rng := rand.New(rand.NewPCG(2026, 14))
	for family, vs := range livetest.Versions(t) {
		src := vs[0].Spec().Lua.Source
		script := rueidis.NewLuaScript("local step, convert = (function()\n" + src + "\nend)()\n" + convertHarness)
		var cases []convertCase
		for _, from := range vs {
			for _, to := range vs {
				for range 150 {
					s, now := luaState(rng, from)
					cases = append(cases, convertCase{from: from, to: to, in: s, now: now, out: to.(algo.Converter).Convert(s, now, from)})
				}
			}
		}
		execs := make([]rueidis.LuaExec, len(cases))
		for i, c := range cases {
			execs[i] = rueidis.LuaExec{Args: convertArgs(c)}
		}
		for i, r := range script.ExecMulti(context.Background(), client, execs...) {
			c := cases[i]
			got, err := r.AsIntSlice()
			if err != nil {
				t.Fatalf("%s: %v", family, err)
			}
			words := c.to.Spec().Words
			want := append(slices.Clone(c.out.W[:words]), int64(len(c.out.Log)))
			want = append(want, c.out.Log...)
			if !slices.Equal(got, want) {
				t.Fatalf("%s %v -> %v, state %v %v at %d: Lua %v, Go %v", family, c.from.Spec().Lua.Params, c.to.Spec().Lua.Params,
					c.in.W[:words], c.in.Log, c.now, got, want)
			}
		}
	}
}

func convertArgs(c convertCase) []string {
	sp := c.to.Spec()
	hasLog := 0
	if sp.MaxLog > 0 {
		hasLog = 1
	}
	args := []string{strconv.Itoa(sp.Words), strconv.Itoa(hasLog), strconv.FormatInt(c.now, 10)}
	for _, ps := range [][]int64{algo.StateParams(c.from.Spec()), sp.Lua.Params} {
		args = append(args, strconv.Itoa(len(ps)))
		for _, p := range ps {
			args = append(args, strconv.FormatInt(p, 10))
		}
	}
	for j := range sp.Words {
		args = append(args, strconv.FormatInt(c.in.W[j], 10))
	}
	if hasLog == 1 {
		args = append(args, strconv.Itoa(len(c.in.Log)))
		for _, e := range c.in.Log {
			args = append(args, strconv.FormatInt(e, 10))
		}
	}
	return args
}

// luaState steps alg (reserving sometimes, refunding, peeking) from a fresh
// state at random times, and returns the state and a time after it.
func luaState(rng *rand.Rand, alg algo.Algorithm) (algo.State, int64) {
	_, fresh := alg.Step(algo.State{}, 0, 0)
	capacity := fresh.Limit
	now := int64(1_767_225_600_000_000) + rng.Int64N(int64(time.Hour/time.Microsecond))
	step := []int64{0, 1, 999, 4_000, 70_000, 1_000_000, 45_000_000, -2_000_000}
	var s algo.State
	for range 1 + rng.IntN(30) {
		now += rng.Int64N(step[rng.IntN(len(step)-1)] + 1)
		if rng.IntN(12) == 0 {
			now += step[len(step)-1] // the clock goes back
		}
		n := 1 + rng.Int64N(min(capacity, 3))
		switch rng.IntN(10) {
		case 0:
			n = capacity
		case 1:
			n = -rng.Int64N(capacity + 1)
		}
		var a algo.Algorithm = alg
		if r, ok := alg.(algo.Reservable); ok && rng.IntN(4) == 0 {
			a = r.Reserve(rng.Int64N(int64(10 * time.Minute / time.Microsecond)))
		}
		s, _ = a.Step(s, now, n)
	}
	return s, now + rng.Int64N(step[rng.IntN(len(step)-1)]+1) - rng.Int64N(2)*1_000_000
}
