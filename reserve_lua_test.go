package floodgate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
)

// luaHarness runs an algorithm's Lua twin on the state, time, cost and
// Params it is given, and returns the decision and the new state, refusing
// any value that is not an exact integer of a double.
const luaHarness = `
local words, now, n, np = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local p = {}
for j = 1, np do p[j] = tonumber(ARGV[4 + j]) end
local s = {}
for j = 1, words do s[j] = tonumber(ARGV[4 + np + j]) end
local s2, d = step(s, now, n, p)
local out = {}
for j = 1, 6 do out[j] = d[j] end
for j = 1, words do out[6 + j] = s2[j] end
` + luaExactReply

// luaCase is one step of an equivalence run: its inputs and what the Go
// step returned.
type luaCase struct {
	alg   algo.Algorithm
	in    algo.State
	now   int64
	n     int64
	out   algo.State
	d     floodgate.Decision
	label string
}

// TestReserveLuaEquivalence runs the token bucket's and the leaky bucket's
// steps and their reserving twins (Reserve and Cancel with random
// arguments, mixed with plain takes, peeks and refunds, and with the clock
// going forwards, backwards and jumping) in Go and, on the same inputs, in
// Lua on a real Redis, and requires identical decisions and states. It
// needs FLOODGATE_REDIS_ADDR (scripts/redis.sh start exports it).
func TestReserveLuaEquivalence(t *testing.T) {
	client := luaClient(t)
	rng := rand.New(rand.NewPCG(2026, 12))

	buckets := []bucket.Config{
		{Rate: floodgate.PerSecond(10), Burst: 5},
		{Rate: floodgate.PerSecond(1), Burst: 1},
		{Rate: floodgate.Rate{N: 3, Per: 7 * time.Millisecond}, Burst: 5},
		{Rate: floodgate.PerHour(1), Burst: 1000},
		{Rate: floodgate.PerSecond(1_000_000), Burst: 1},
	}
	leakies := []leaky.Config{
		{Rate: floodgate.PerSecond(10), Burst: 20, NoDelay: true},
		{Rate: floodgate.PerSecond(1), Burst: 5},
		{Rate: floodgate.PerSecond(5), Burst: 12, Delay: 8},
		{Rate: floodgate.PerMinute(1), Burst: 2},
		{Rate: floodgate.PerSecond(2)},
		{Rate: floodgate.Rate{N: 1, Per: 1000 * time.Second}, Burst: 3},
		{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000, Delay: 400_000},
	}
	var algs []algo.Reservable
	for _, c := range buckets {
		a, err := c.Algorithm()
		if err != nil {
			t.Fatal(err)
		}
		algs = append(algs, a.(algo.Reservable))
	}
	for _, c := range leakies {
		a, err := c.Algorithm()
		if err != nil {
			t.Fatal(err)
		}
		algs = append(algs, a.(algo.Reservable))
	}
	for _, alg := range algs {
		cases := luaCases(rng, alg, 3000)
		src := alg.Spec().Lua.Source
		script := rueidis.NewLuaScript("local step = (function()\n" + src + "\nend)()\n" + luaHarness)
		execs := make([]rueidis.LuaExec, len(cases))
		for i, c := range cases {
			sp := c.alg.Spec()
			if sp.Lua.Source != src {
				t.Fatalf("%s: the twin's Lua is not the algorithm's", sp.Name)
			}
			args := []string{strconv.Itoa(sp.Words), strconv.FormatInt(c.now, 10), strconv.FormatInt(c.n, 10), strconv.Itoa(len(sp.Lua.Params))}
			for _, p := range sp.Lua.Params {
				args = append(args, strconv.FormatInt(p, 10))
			}
			for j := range sp.Words {
				args = append(args, strconv.FormatInt(c.in.W[j], 10))
			}
			execs[i] = rueidis.LuaExec{Args: args}
		}
		res := script.ExecMulti(context.Background(), client, execs...)
		for i, r := range res {
			c := cases[i]
			got, err := r.AsIntSlice()
			if err != nil {
				t.Fatalf("%s: %v", c.label, err)
			}
			if msg := compareLua(c, got); msg != "" {
				t.Fatalf("%s (params %v, state %v, now %d, n %d): %s", c.label, c.alg.Spec().Lua.Params, c.in.W[:c.alg.Spec().Words], c.now, c.n, msg)
			}
		}
	}
}

// luaCases steps alg and its twins through a random sequence and records
// every step.
func luaCases(rng *rand.Rand, alg algo.Reservable, steps int) []luaCase {
	sp := alg.Spec()
	_, fresh := alg.Step(algo.State{}, 1_767_225_600_000_000, 0)
	capacity := fresh.Limit
	_, one := alg.Step(algo.State{}, 1_767_225_600_000_000, 1)
	tau := max(int64(one.ResetAfter/time.Microsecond)*capacity, 1000)
	const hour = int64(time.Hour / time.Microsecond)
	var (
		s      algo.State
		now    = int64(1_767_225_600_000_000)
		resets []int64 // ResetAfter, at its time, of recent reservations: realistic resetIn
		made   []int64
		out    []luaCase
	)
	for i := range steps {
		switch r := rng.IntN(100); {
		case r < 60:
			now += rng.Int64N(tau/capacity + 1)
		case r < 70:
			now += rng.Int64N(4 * tau)
		case r < 74:
			now -= rng.Int64N(2 * int64(time.Second/time.Microsecond))
		case r < 77:
			now -= hour + rng.Int64N(hour)
		case r < 78:
			now += 10 * 365 * 24 * hour
		}
		if now > 1<<52 {
			now = 1_767_225_600_000_000
		}
		switch rng.IntN(20) {
		case 0: // a state near now, as another process left it
			s = algo.State{}
			for j := range sp.Words {
				s.W[j] = now + rng.Int64N(4*tau) - 2*tau
			}
			if sp.Words == 3 { // leaky: W[1] in ms, W[2] an excess
				s.W[1] = now/1000 + rng.Int64N(240_000) - 120_000
				s.W[2] = rng.Int64N(capacity*4000) - 2000
			}
		}
		n := rng.Int64N(capacity+1) - rng.Int64N(capacity/2+1)
		if rng.IntN(20) == 0 {
			// A queue at its horizon (the Params hold the bounds), so that
			// a reservation of cost n lands within a unit of it.
			n = 1 + rng.Int64N(min(capacity, 3))
			delta := rng.Int64N(3) - 1
			below := n
			if rng.IntN(2) == 0 {
				below = 0 // at the bound itself, where a plain step re-bases
			}
			if sp.Words == 1 {
				iv := sp.Lua.Params[0]
				s = algo.State{W: [algo.MaxWords]int64{now + sp.Lua.Params[2] - below*iv + delta}}
			} else {
				s = algo.State{W: [algo.MaxWords]int64{0, now / 1000, sp.Lua.Params[5] - below*1000 + delta}}
			}
		}
		var a algo.Algorithm = alg
		label := "step"
		switch op := rng.IntN(10); {
		case op < 3:
		case op < 7:
			// The wait the request would have, to try maxWait around it.
			_, probe := alg.Reserve(algo.MaxReserveArg).Step(s, now, max(n, 1))
			w := int64((probe.Delay + probe.RetryAfter) / time.Microsecond)
			maxWait := [...]int64{0, rng.Int64N(tau), rng.Int64N(80 * tau), algo.MaxReserveArg, -5, w - 1, w, w + 1, w - 1000, w + 999}[rng.IntN(10)]
			a, label, n = alg.Reserve(maxWait), "reserve", max(n, 1)
		default:
			resetIn := rng.Int64N(4*tau) - tau
			if len(resets) > 0 && rng.IntN(2) == 0 {
				k := rng.IntN(len(resets))
				resetIn = resets[k] - (now - made[k]) + rng.Int64N(3) - 1
			}
			a, label = alg.Cancel(resetIn), "cancel"
			if rng.IntN(5) != 0 {
				n = -1 - rng.Int64N(capacity)
			}
		}
		next, d := a.Step(s, now, n)
		if label == "reserve" && d.Allowed && d.Delay > 0 {
			resets = append(resets, int64(d.ResetAfter/time.Microsecond))
			made = append(made, now)
		}
		out = append(out, luaCase{alg: a, in: s, now: now, n: n, out: next, d: d, label: fmt.Sprintf("%s %s %d", sp.Name, label, i)})
		s = next
	}
	return out
}

// compareLua reports how the Lua reply differs from the Go step, or "".
func compareLua(c luaCase, got []int64) string {
	words := c.alg.Spec().Words
	if len(got) != 6+words {
		return fmt.Sprintf("reply %v: want %d values", got, 6+words)
	}
	us := func(d time.Duration) int64 { return int64(d / time.Microsecond) }
	allowed := int64(0)
	if c.d.Allowed {
		allowed = 1
	}
	want := []int64{allowed, c.d.Limit, c.d.Remaining, us(c.d.RetryAfter), us(c.d.ResetAfter), us(c.d.Delay)}
	for j := range words {
		want = append(want, c.out.W[j])
	}
	for j := 3; j < 6; j++ {
		got[j] = max(got[j], 0) // Go's durations saturate at zero
	}
	for j := range want {
		if got[j] != want[j] {
			return fmt.Sprintf("Lua %v, Go %v (decision %+v)", got, want, c.d)
		}
	}
	return ""
}
