package adaptive_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/simulate"
)

// The simulated server of the convergence tests: capacity C = 50 requests at
// once, 100ms +-20% each (500 req/s), and a queue of C/10 before it refuses.
var simServer = simulate.Server{Workers: 50, Queue: 5, Service: 100 * time.Millisecond, Jitter: 0.2}

type algCase struct {
	name string
	new  func(t *testing.T) adaptive.Algorithm
}

// must unwraps a constructor's result; the configurations in the tests are
// valid, so an error is a bug worth a panic.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var algCases = []algCase{
	{"Vegas", func(t *testing.T) adaptive.Algorithm {
		return must(adaptive.NewVegas(adaptive.VegasConfig{Rand: rand.New(rand.NewPCG(1, 2))}))
	}},
	{"Gradient2", func(t *testing.T) adaptive.Algorithm {
		return must(adaptive.NewGradient2(adaptive.Gradient2Config{}))
	}},
	{"AIMD", func(t *testing.T) adaptive.Algorithm {
		return must(adaptive.NewAIMD(adaptive.AIMDConfig{}))
	}},
}

// runSim runs alg behind a limiter on the simulated server with the offered
// load given as a multiple of the server's capacity per window.
func runSim(t *testing.T, alg adaptive.Algorithm, srv simulate.Server, load func(w int) float64, windows int) []simulate.Window {
	t.Helper()
	sim := simulate.New(simulate.Config{
		Server:  srv,
		Classes: 1,
		Rate:    func(w, _ int) float64 { return load(w) * srv.Capacity() },
		Windows: windows,
		Seed:    7,
	})
	l := must(adaptive.New(alg, adaptive.WithClock(sim.Clock())))
	return sim.Run(simulate.ForLimiter(l))
}

// TestSimConvergence runs each algorithm on the simulated server: 60 windows
// at 2x its capacity, then 40 windows at 10x. The limit must settle within
// +-20% of C within 30 windows and stay there; at 10x, goodput must stay at
// >= 90% of capacity and the p99 latency at <= 2x the no-load latency.
func TestSimConvergence(t *testing.T) {
	c := simServer.Workers
	for _, tc := range algCases {
		t.Run(tc.name, func(t *testing.T) {
			ws := runSim(t, tc.new(t), simServer, func(w int) float64 {
				if w < 60 {
					return 2
				}
				return 10
			}, 100)
			settled := len(ws)
			for i := len(ws) - 1; i >= 0; i-- {
				if l := ws[i].Limit; 5*l < 4*c || 5*l > 6*c {
					break
				}
				settled = i
			}
			var good int
			var p99 time.Duration
			for _, w := range ws[70:] {
				good += simulate.Total(w.Succeeded)
				p99 = max(p99, w.P99All)
			}
			goodput := float64(good) / (30 * simServer.Capacity())
			t.Logf("%s: limit within +-20%% of C=%d from window %d (limit %d at window 59, %d at window 99); at 10x: goodput %.1f%% of capacity, worst window p99 %v (no-load latency %v)",
				tc.name, c, settled, ws[59].Limit, ws[99].Limit, 100*goodput, p99.Round(time.Millisecond), simServer.Service)
			if settled > 30 {
				t.Errorf("limit settled within +-20%% of %d only from window %d, want <= 30", c, settled)
			}
			if goodput < 0.9 {
				t.Errorf("goodput at 10x overload = %.3f of capacity, want >= 0.9", goodput)
			}
			if p99 > 2*simServer.Service {
				t.Errorf("p99 at 10x overload = %v, want <= %v", p99, 2*simServer.Service)
			}
		})
	}
}

// TestSimNoLoadLatency checks the reference the overload test compares
// with: at 30% load the server never queues and the p99 stays within the
// service time's spread (100ms +-20%).
func TestSimNoLoadLatency(t *testing.T) {
	for _, tc := range algCases {
		ws := runSim(t, tc.new(t), simServer, func(int) float64 { return 0.3 }, 20)
		for _, w := range ws[1:] {
			if simulate.Total(w.Dropped) != 0 {
				t.Fatalf("%s: window %d: the server refused %v at 30%% load", tc.name, w.Index, w.Dropped)
			}
			if w.P99All > simServer.Service*6/5 {
				t.Fatalf("%s: window %d p99 %v above the slowest service time", tc.name, w.Index, w.P99All)
			}
		}
	}
}
