package bucket_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

func granterOf(t *testing.T, c bucket.Config) (algo.Algorithm, algo.Granter) {
	t.Helper()
	alg, err := c.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	g, ok := alg.(algo.Granter)
	if !ok {
		t.Fatal("the token bucket is not an algo.Granter")
	}
	return alg, g
}

// randomGrantInput draws a word near now (past, within the burst, queued
// reservations, a clock gone back), now, want and least (sometimes out of
// range, which Grant clamps).
func randomGrantInput(r *rand.Rand, tau int64) (w, now, want, least int64) {
	now = 1_700_000_000_000_000 + r.Int64N(1_000_000_000_000)
	switch r.IntN(5) {
	case 0:
		w = 0
	case 1:
		w = now - r.Int64N(10*tau+1)
	case 2, 3:
		w = now + r.Int64N(tau+1)
	default:
		w = now + tau + r.Int64N(1<<40)
	}
	want = r.Int64N(60) - 2
	least = r.Int64N(60) - 2
	return
}

// TestGrantIsRepeatedSteps checks the Granter contract against Step: a
// grant of k tokens leaves the state that k steps of cost 1 at the same
// time leave, k is min(want, what is there) when at least least are there
// and 0 otherwise, and a refusal's Wait is when a step of cost least would
// be admitted.
func TestGrantIsRepeatedSteps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 40 {
		c := bucket.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(1000), Per: time.Duration(1+r.IntN(60)) * time.Second}, Burst: 1 + r.Int64N(50)}
		alg, g := granterOf(t, c)
		tau := alg.Spec().Lua.Params[0] * c.Burst
		for range 500 {
			w, now, want, least := randomGrantInput(r, tau)
			next, got := g.Grant(w, now, want, least)
			cw := max(1, min(want, c.Burst))
			cl := max(1, min(least, cw))
			s := algo.State{W: [algo.MaxWords]int64{w}}
			var avail int64
			for {
				s2, d := alg.Step(s, now, 1)
				if !d.Allowed || avail == cw {
					break
				}
				s = s2
				avail++
			}
			if avail < cl {
				if got.Granted != 0 {
					t.Fatalf("%v w=%d now=%d want=%d least=%d: granted %d with %d there", c, w, now, want, least, got.Granted, avail)
				}
				_, d := alg.Step(algo.State{W: [algo.MaxWords]int64{w}}, now, cl)
				if time.Duration(got.Wait)*time.Microsecond != d.RetryAfter {
					t.Fatalf("wait %dus, a step of %d says %v", got.Wait, cl, d.RetryAfter)
				}
				_, peek := alg.Step(algo.State{W: [algo.MaxWords]int64{w}}, now, 0)
				if got.Remaining != peek.Remaining || time.Duration(got.Reset)*time.Microsecond != peek.ResetAfter {
					t.Fatalf("refused grant reports %+v, a peek %+v", got, peek)
				}
				continue
			}
			if got.Granted != avail || got.Wait != 0 {
				t.Fatalf("%v w=%d now=%d want=%d least=%d: granted %d wait %d, steps took %d", c, w, now, want, least, got.Granted, got.Wait, avail)
			}
			if next != s.W[0] {
				t.Fatalf("grant left %d, %d steps left %d", next, avail, s.W[0])
			}
			_, peek := alg.Step(s, now, 0)
			if got.Remaining != peek.Remaining || time.Duration(got.Reset)*time.Microsecond != peek.ResetAfter {
				t.Fatalf("grant reports %+v, a peek after the steps %+v", got, peek)
			}
		}
	}
}

// TestGrantLuaTwinOnRedis runs the Lua twin of Grant on a real Redis on
// random inputs (every case of TestGrantIsRepeatedSteps' generator) and
// requires the Go step's words and grants exactly.
func TestGrantLuaTwinOnRedis(t *testing.T) {
	st, err := redisstore.New(redistest.Client(t), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	for range 12 {
		per := []time.Duration{time.Second, time.Minute, 3 * time.Second, 1500 * time.Millisecond}[r.IntN(4)]
		c := bucket.Config{Rate: floodgate.Rate{N: 1 + r.Int64N(100000), Per: per}, Burst: 1 + r.Int64N(5000)}
		if validate(c) != nil {
			continue
		}
		alg, g := granterOf(t, c)
		tau := alg.Spec().Lua.Params[0] * c.Burst
		const n = 700
		w, now, want, least := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		for i := range n {
			w[i], now[i], want[i], least[i] = randomGrantInput(r, tau)
			if i%3 == 0 { // large leases
				want[i], least[i] = r.Int64N(c.Burst+2), r.Int64N(c.Burst+2)
			}
		}
		next, got, err := st.GrantTwin(context.Background(), alg, w, now, want, least)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			gw, gg := g.Grant(w[i], now[i], want[i], least[i])
			if next[i] != gw || got[i] != gg {
				t.Fatalf("%v w=%d now=%d want=%d least=%d: Lua %d %+v, Go %d %+v", c, w[i], now[i], want[i], least[i], next[i], got[i], gw, gg)
			}
		}
	}
}

// TestGrantSharesApplyState grants on a real Redis key that Apply also
// steps: one bucket, whichever call touches it.
func TestGrantSharesApplyState(t *testing.T) {
	st, err := redisstore.New(redistest.Client(t), redisstore.WithPrefix("fgtest:grant:"+t.Name()+":"), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := bucket.Config{Name: "grant-share", Rate: floodgate.PerHour(10), Burst: 10}
	lim, err := bucket.NewKeyed(st, c)
	if err != nil {
		t.Fatal(err)
	}
	key := "k" + time.Now().String()
	if d, err := lim.Take(ctx, key, 3); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	g, err := st.Grant(ctx, key, lim.Algorithm(), algo.Claim{Want: 5, Least: 1})
	if err != nil || g.Granted != 5 || g.Remaining != 2 {
		t.Fatalf("grant %+v, %v; want 5 granted, 2 left", g, err)
	}
	g, err = st.Grant(ctx, key, lim.Algorithm(), algo.Claim{Want: 5, Least: 3})
	if err != nil || g.Granted != 0 || g.Wait <= 0 || g.Remaining != 2 {
		t.Fatalf("grant %+v, %v; want a refusal (2 left, 3 asked at least)", g, err)
	}
	g, err = st.Grant(ctx, key, lim.Algorithm(), algo.Claim{Want: 5, Least: 1})
	if err != nil || g.Granted != 2 {
		t.Fatalf("grant %+v, %v; want the last 2", g, err)
	}
	if d, err := lim.Take(ctx, key, 1); err != nil || d.Allowed {
		t.Fatal("the bucket is drained but Take admitted", d, err)
	}
	if err := lim.Refund(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Peek(ctx, key); err != nil || d.Remaining != 4 {
		t.Fatalf("after giving 4 back, peek %+v, %v", d, err)
	}
	if _, err := st.Grant(ctx, key, lim.Algorithm(), algo.Claim{Want: 11, Least: 1}); err == nil {
		t.Fatal("a grant above the burst was accepted")
	}
}
