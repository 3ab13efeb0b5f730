package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// libraries returns the names of the floodgate libraries each node of c
// holds.
func libraries(t *testing.T, c rueidis.Client) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for addr, n := range c.Nodes() {
		libs, err := n.Do(context.Background(), n.B().FunctionList().Libraryname("floodgate_*").Build()).ToArray()
		require.NoError(t, err)
		for _, l := range libs {
			m, err := l.AsMap()
			require.NoError(t, err)
			v := m["library_name"]
			name, err := v.ToString()
			require.NoError(t, err)
			out[addr] = append(out[addr], name)
		}
	}
	return out
}

// Decisions go through FCALL, never EVALSHA, once the library is there:
// on a single node and on every master of a Cluster, which the store loads
// itself after FUNCTION FLUSH.
func TestFunctionsOnEveryNode(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			for _, n := range c.Nodes() {
				require.NoError(t, n.Do(context.Background(), n.B().FunctionFlush().Build()).Error())
			}
			s, err := New(c, WithPrefix(uniquePrefix(t)), WithTimeout(5*time.Second), WithCoalescing(0))
			require.NoError(t, err)
			l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 3})
			require.NoError(t, err)
			fixed, err := window.Config{Limit: 2, Window: 3600e9}.FixedAlgorithm()
			require.NoError(t, err)
			ctx := context.Background()
			evals := commandCalls(t, c, "evalsha") + commandCalls(t, c, "eval")
			fcalls := commandCalls(t, c, "fcall")
			// Enough keys to reach every slot range of the Cluster.
			const keys = 64
			for i := range keys {
				k := fmt.Sprint("user-", i)
				for j := range 4 {
					d, err := l.Take(ctx, k, 1)
					require.NoError(t, err)
					require.Equal(t, j < 3, d.Allowed, "key %s take %d", k, j)
				}
				out := make([]floodgate.Decision, 2)
				all, err := s.ApplyAll(ctx, []store.Op{{Key: k, Alg: fixed, N: 2}, {Key: k + "-other", Alg: fixed, N: 1}}, out, true)
				require.NoError(t, err)
				require.True(t, all)
			}
			assert.Equal(t, evals, commandCalls(t, c, "evalsha")+commandCalls(t, c, "eval"), "a decision went through EVALSHA")
			assert.GreaterOrEqual(t, commandCalls(t, c, "fcall")-fcalls, int64(keys*5), "every decision is an FCALL")
			assert.False(t, s.onScripts())
			libs := libraries(t, c)
			require.Len(t, libs, len(c.Nodes()))
			for addr, names := range libs {
				// The one-word library (the bucket) and the group library
				// (a fixed window), on every node that decided.
				assert.Len(t, names, 2, "node %s: %v", addr, names)
				for _, n := range names {
					assert.True(t, strings.HasPrefix(n, "floodgate_"), n)
				}
			}
		})
	}
}

// A user whom the ACL forbids functions (FCALL refused, or FUNCTION LOAD
// refused and the library not there) gets the same decisions through
// EVALSHA: the store falls back for a minute, and no request is counted
// twice; then it tries functions again.
func TestFunctionsRefusedByACL(t *testing.T) {
	admin := newClient(t, singleAddr)
	for _, rules := range [][]string{{"-fcall"}, {"-function|load"}} {
		t.Run(strings.Join(rules, ","), func(t *testing.T) {
			user := fmt.Sprintf("fgtest-%x", rand.Uint64())
			cmd := append([]string{"ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all"}, rules...)
			require.NoError(t, admin.Do(context.Background(), admin.B().Arbitrary(cmd...).Build()).Error())
			t.Cleanup(func() {
				admin.Do(context.Background(), admin.B().AclDeluser().Username(user).Build())
			})
			// The library must be missing for a refused load to matter.
			require.NoError(t, admin.Do(context.Background(), admin.B().FunctionFlush().Build()).Error())
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{singleAddr}, Username: user, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			s := testStore(t, c, WithCoalescing(0))
			l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 5})
			require.NoError(t, err)
			evals := commandCalls(t, admin, "evalsha") + commandCalls(t, admin, "eval")
			ctx := context.Background()
			for i := range 7 {
				d, err := l.Take(ctx, "k", 1)
				require.NoError(t, err)
				assert.Equal(t, i < 5, d.Allowed, "take %d", i)
				if i < 5 {
					assert.Equal(t, int64(4-i), d.Remaining)
				}
			}
			assert.True(t, s.onScripts(), "the store did not fall back to EVALSHA")
			assert.GreaterOrEqual(t, commandCalls(t, admin, "evalsha")+commandCalls(t, admin, "eval")-evals, int64(7))

			// The ACL grants functions again: once the retry time has
			// passed, the store calls them.
			grant := append([]string{"ACL", "SETUSER", user}, strings.ReplaceAll(rules[0], "-", "+"))
			require.NoError(t, admin.Do(ctx, admin.B().Arbitrary(grant...).Build()).Error())
			s.evalUntil.Store(monotime.Nanotime() - 1) // the minute is over
			fcalls := commandCalls(t, admin, "fcall")
			_, err = l.Take(ctx, "k", 1)
			require.NoError(t, err)
			assert.False(t, s.onScripts())
			assert.Greater(t, commandCalls(t, admin, "fcall"), fcalls)
		})
	}
}

// The errors that make the store fall back, as Redis words them (rueidis
// drops the "ERR " of an error reply).
func TestFunctionErrors(t *testing.T) {
	for _, msg := range []string{
		"ERR unknown command `FCALL`, with args beginning with: `floodgate_x`, `1`, ", // Redis 6.2
		"unknown command 'FCALL'", // Redis 6.0, without ERR
		"ERR unknown subcommand 'LOAD'. Try FUNCTION HELP.",
		"NOPERM this user has no permissions to run the 'fcall' command",
		"NOPERM this user has no permissions to run the 'function|load' command",
	} {
		assert.True(t, unsupported(msg), msg)
		assert.False(t, notFound(msg), msg)
	}
	for _, msg := range []string{"ERR Function not found", "Function not found"} {
		assert.True(t, notFound(msg), msg)
		assert.False(t, unsupported(msg), msg)
	}
	for _, msg := range []string{"ERR user_script:1: oops", "OOM command not allowed when used memory > 'maxmemory'.", "BUSY Redis is busy running a script"} {
		assert.False(t, unsupported(msg) || notFound(msg), msg)
	}
}

// The library form of a script runs its prelude once and registers one
// function named after the library; the EVAL form is prelude then body.
func TestScriptForms(t *testing.T) {
	a := newScript("local x = 1\n", "return x")
	b := newScript("local x = 2\n", "return x")
	assert.NotEqual(t, a.name, b.name)
	assert.True(t, strings.HasPrefix(a.lib, "#!lua name="+a.name+"\n"))
	assert.Contains(t, a.lib, "redis.register_function('"+a.name+"', run)")
	c := newClient(t, singleAddr)
	s := testStore(t, c)
	for _, sc := range []*script{a, b} {
		v, err := s.call(context.Background(), sc, nil, nil).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, map[*script]int64{a: 1, b: 2}[sc], v)
		v, err = sc.lua.Exec(context.Background(), c, nil, nil).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, map[*script]int64{a: 1, b: 2}[sc], v)
	}
}

// A library whose top level calls a function (a twin that does local
// floor = math.floor) cannot be loaded: Redis runs a library's top level
// without its libraries. The store runs that script with EVALSHA, for good,
// and the others as functions.
func TestFunctionLoadRefused(t *testing.T) {
	c := newClient(t, singleAddr)
	s, err := New(c, WithPrefix(uniquePrefix(t)))
	require.NoError(t, err)
	bad := newScript("local floor = math.floor\n", "return floor(2.5)")
	good := newScript("local x = 3\n", "return x")
	for range 3 {
		v, err := s.call(context.Background(), bad, nil, nil).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(2), v)
		v, err = s.call(context.Background(), good, nil, nil).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(3), v)
	}
	assert.True(t, bad.noFunc.Load())
	assert.False(t, good.noFunc.Load())
	assert.False(t, s.onScripts())
	assert.Contains(t, libraries(t, c)[singleAddr], good.name)
}

// A policy description reads back as it was written, in both forms of a
// script, with a pattern (up to maxPatternParams Params) and without.
func TestPolicyDescriptions(t *testing.T) {
	prelude := "local steps, converts = {false}, {false}\n" + luaPolicy + luaParams
	body := `
local q = policy('1', ARGV[1])
local p, pstr = params(ARGV[1])
local out = {q[2], q[3], q[5], pstr, #q[4], #p}
for j = 1, #p do
  out[#out + 1] = q[4][j]
  out[#out + 1] = p[j]
end
return out`
	sc := newScript(prelude, body)
	c := newClient(t, singleAddr)
	for _, mode := range []string{"functions", "scripts"} {
		opts := []Option{WithPrefix(uniquePrefix(t))}
		if mode == "scripts" {
			opts = append(opts, withEvalOnly())
		}
		s, err := New(c, opts...)
		require.NoError(t, err)
		for _, params := range [][]int64{nil, {7}, {1, -2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 3, 4, 5, 6, 7, 8, 9, -10, 11}} {
			sp := algo.Spec{Words: 3, MaxLog: 12, Lua: algo.Lua{Params: params, StateParams: min(2, len(params))}}
			desc := policyArgs(sp)
			for range 2 { // a library answers the second from its cache
				arr, err := s.call(context.Background(), sc, nil, desc).ToArray()
				require.NoError(t, err, "%s %v", mode, desc)
				require.Len(t, arr, 6+2*len(params))
				got := make([]string, len(arr))
				for i := range arr {
					if v, err := arr[i].AsInt64(); err == nil {
						got[i] = fmt.Sprint(v)
					} else {
						got[i], err = arr[i].ToString()
						require.NoError(t, err)
					}
				}
				want := []string{"3", "12", stateParams(sp), stateParams(sp), fmt.Sprint(len(params)), fmt.Sprint(len(params))}
				for _, x := range params {
					want = append(want, fmt.Sprint(x), fmt.Sprint(x))
				}
				assert.Equal(t, want, got, "%s %v", mode, desc)
			}
		}
		assert.Equal(t, mode == "scripts", s.onScripts())
	}
}

// A fixed window counting within its window is written with KEEPTTL (its
// time to full has not moved): the key still expires at the end of the
// window, on Redis' own time, through Apply and ApplyAll; the first write
// of a window sets the TTL anew.
func TestWindowKeepsItsTTL(t *testing.T) {
	for name, c := range targets(t) {
		t.Run(name, func(t *testing.T) {
			s := testStore(t, c)
			hour, err := window.Config{Limit: 100, Window: time.Hour}.FixedAlgorithm()
			require.NoError(t, err)
			ctx := context.Background()
			pttl := func(k string) (ttl, left int64) {
				t.Helper()
				ttl, err := c.Do(ctx, c.B().Pttl().Key(s.keyOf(k, hour)).Build()).AsInt64()
				require.NoError(t, err)
				now, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
				require.NoError(t, err)
				ms := now[0]*1000 + now[1]/1000
				return ttl, 3600_000 - ms%3600_000 // the window's end, from now
			}
			out := make([]floodgate.Decision, 2)
			for i := range 3 {
				_, err := s.Apply(ctx, "a", hour, 1)
				require.NoError(t, err)
				all, err := s.ApplyAll(ctx, []store.Op{{Key: "b", Alg: hour, N: 1}, {Key: "c", Alg: hour, N: 2}}, out, true)
				require.NoError(t, err)
				require.True(t, all)
				assert.Equal(t, int64(100-2*(i+1)), out[1].Remaining)
				for _, k := range []string{"a", "b", "c"} {
					ttl, left := pttl(k)
					assert.InDelta(t, left, ttl, 50, "key %s write %d: the TTL does not run to the end of the window", k, i)
				}
				time.Sleep(20 * time.Millisecond)
			}
			// A window that ends while the key lives: the next one's first
			// write sets its TTL.
			sec, err := window.Config{Limit: 100, Window: time.Second}.FixedAlgorithm()
			require.NoError(t, err)
			for i := range 2 {
				_, err := s.Apply(ctx, "d", sec, 1)
				require.NoError(t, err)
				ttl, err := c.Do(ctx, c.B().Pttl().Key(s.keyOf("d", sec)).Build()).AsInt64()
				require.NoError(t, err)
				assert.Positive(t, ttl, "write %d", i)
				assert.LessOrEqual(t, ttl, int64(1000), "write %d", i)
				time.Sleep(600 * time.Millisecond)
			}
		})
	}
}

// A load refused for a passing reason (the server is out of memory: FUNCTION
// LOAD is refused under maxmemory with noeviction) runs that call as a
// script and marks nothing: once memory is back, the library is loaded and
// called as a function.
func TestFunctionLoadRefusedForNow(t *testing.T) {
	p, err := startRedis(0, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	require.NoError(t, err)
	defer p.stop()
	c := newClient(t, p.addr)
	ctx := context.Background()
	sc := newScript("local x = 7\n", "return x")
	// Fill the server up to its maxmemory.
	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		if err := c.Do(ctx, c.B().Set().Key("fill:"+strconv.Itoa(i)).Value(big).Build()).Error(); err != nil {
			require.Contains(t, err.Error(), "OOM")
			break
		}
		require.Less(t, i, 1000, "the server never ran out of memory")
	}
	s := testStore(t, c)
	v, err := s.call(ctx, sc, nil, nil).AsInt64()
	require.NoError(t, err, "the call runs as a script")
	assert.Equal(t, int64(7), v)
	assert.False(t, sc.noFunc.Load(), "an out-of-memory refusal is not the code's")
	assert.False(t, s.onScripts())
	assert.Empty(t, libraries(t, c)[p.addr])

	require.NoError(t, c.Do(ctx, c.B().Flushall().Build()).Error())
	v, err = s.call(ctx, sc, nil, nil).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(7), v)
	assert.Contains(t, libraries(t, c)[p.addr], sc.name, "loaded once memory is back")
}

// An error raised inside a function (by a command it calls) is the
// function's answer: it ran, and the store neither falls back nor runs it
// again as a script, even when the error reads like an ACL refusal (as a
// Redis-compatible server words one inside a script).
func TestErrorFromInsideAFunction(t *testing.T) {
	c := newClient(t, singleAddr)
	s := testStore(t, c)
	calls := uniquePrefix(t) + "calls"
	sc := newScript("", "redis.call('INCR', KEYS[1])\nreturn redis.error_reply('NOPERM ACL failure in script: x, on @user_function:2.')")
	for range 3 {
		err := s.call(context.Background(), sc, []string{calls}, nil).Error()
		require.Error(t, err)
	}
	n, err := c.Do(context.Background(), c.B().Get().Key(calls).Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(3), n, "each call ran once, and only once")
	assert.False(t, s.onScripts())
}
