package adaptive_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
)

// FuzzGate drives a gate with a random sequence of acquisitions (of
// random shares), ends (success, drop, ignore, repeated), clock steps
// (forwards and backwards) and leaks, and checks its invariants after every
// step: in-flight equals the live tokens, is never above the limit at
// admission, decisions keep 0 <= Remaining <= Limit and RetryAfter > 0 exactly
// when shed, and the counters add up.
func FuzzGate(f *testing.F) {
	f.Add(uint64(1), uint8(0))
	f.Add(uint64(2), uint8(1))
	f.Add(uint64(3), uint8(2))
	f.Add(uint64(4), uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, which uint8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var alg adaptive.Controller
		switch which % 4 {
		case 0:
			alg = must(adaptive.NewVegas(adaptive.VegasConfig{InitialLimit: 5, MaxLimit: 50, Rand: rand.New(rand.NewPCG(seed, 1))}))
		case 1:
			alg = must(adaptive.NewGradient2(adaptive.Gradient2Config{InitialLimit: 5, MinLimit: 1, MaxLimit: 50}))
		case 2:
			alg = must(adaptive.NewAIMD(adaptive.AIMDConfig{InitialLimit: 5, MinLimit: 1, MaxLimit: 50}))
		default:
			alg = must(adaptive.NewConstant(5))
		}
		clk := newFakeClock()
		var bad string
		obs := floodgate.ObserverFunc(func(e floodgate.Event) {
			d := e.Decision
			if d.Remaining < 0 || d.Remaining > d.Limit || (d.RetryAfter == 0) != d.Allowed || (e.Outcome == floodgate.OutcomeAllowed) != d.Allowed {
				bad = "bad decision"
			}
		})
		l := must(adaptive.NewGate(alg, adaptive.WithClock(clk), adaptive.WithObserver(obs),
			adaptive.WithWindow(3, 100*time.Millisecond), adaptive.WithMaxAge(10*time.Second)))
		var live []*adaptive.Token
		leaked := 0
		for step := 0; step < 400; step++ {
			switch op := rng.IntN(10); {
			case op < 4:
				before, limit := l.InFlight(), l.Limit()
				share := []float64{1, 0.9, 0.5, 0.1}[rng.IntN(4)]
				tok, err := l.AcquireRequest(context.Background(), adaptive.Request{Share: share})
				switch {
				case err == nil:
					if before >= limit {
						t.Fatalf("step %d: admitted at %d in flight with limit %d", step, before, limit)
					}
					live = append(live, tok)
				case !errors.Is(err, adaptive.ErrLimitExceeded):
					t.Fatalf("step %d: %v", step, err)
				}
			case op < 8 && len(live) > 0:
				i := rng.IntN(len(live))
				tok := live[i]
				switch rng.IntN(3) {
				case 0:
					tok.Success()
				case 1:
					tok.Dropped()
				default:
					tok.Ignore()
				}
				tok.Success() // a second end must do nothing
				live = append(live[:i], live[i+1:]...)
			case op == 8:
				clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			default:
				clk.Advance(-time.Duration(rng.IntN(100)) * time.Millisecond) // wall clock stepped back
			}
			st := l.Stats()
			leaked = int(st.Leaked)
			// Reclaimed tokens stay in live until ended (then counted Late).
			if st.InFlight != len(live)-int(st.Leaked-st.Late) {
				t.Fatalf("step %d: in flight %d, live %d, leaked %d, late %d", step, st.InFlight, len(live), st.Leaked, st.Late)
			}
			if st.InFlight < 0 || st.Limit < 1 || st.Limit > 50 {
				t.Fatalf("step %d: stats %+v", step, st)
			}
			if bad != "" {
				t.Fatalf("step %d: %s", step, bad)
			}
		}
		for _, tok := range live {
			tok.Ignore()
		}
		st := l.Stats()
		if st.InFlight != 0 {
			t.Fatalf("in flight %d after ending every token (%d leaked)", st.InFlight, leaked)
		}
		if st.Succeeded+st.Dropped+st.Ignored+st.Leaked != st.Admitted {
			t.Fatalf("counters do not add up: %+v", st)
		}
	})
}

// FuzzAlgorithms feeds each algorithm arbitrary windows and checks that the
// limit stays within its bounds.
func FuzzAlgorithms(f *testing.F) {
	f.Add(int64(100e6), 20, 0, int64(50e6), 10, 30e6)
	f.Add(int64(0), 0, 5, int64(0), 1, 1e9)
	f.Add(int64(1<<62), 1000, 0, int64(1), 1<<20, -1.0)
	f.Fuzz(func(t *testing.T, rtt int64, inflight, dropped int, rtt2 int64, inflight2 int, rtt3 float64) {
		algs := []struct {
			a        adaptive.Controller
			min, max int
		}{
			{must(adaptive.NewVegas(adaptive.VegasConfig{Rand: rand.New(rand.NewPCG(1, 1))})), 1, 1000},
			{must(adaptive.NewGradient2(adaptive.Gradient2Config{})), 20, 200},
			{must(adaptive.NewAIMD(adaptive.AIMDConfig{})), 20, 200},
		}
		samples := []adaptive.Sample{
			{RTT: time.Duration(rtt), InFlight: inflight, Dropped: dropped, Count: 10},
			{RTT: time.Duration(rtt2), InFlight: inflight2, Count: 10},
			{RTT: time.Duration(rtt3), InFlight: inflight, Count: 10},
		}
		for _, c := range algs {
			for range 20 {
				for _, s := range samples {
					if got := c.a.Update(s); got < c.min || got > c.max {
						t.Fatalf("%T: limit %d outside [%d, %d] after %+v", c.a, got, c.min, c.max, s)
					}
				}
			}
		}
	})
}
