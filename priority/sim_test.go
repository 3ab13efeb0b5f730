package priority_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/internal/simulate"
	"github.com/floodgate-go/floodgate/priority"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The simulated server: capacity C = 50 at once, 200ms +-20% (250 req/s).
var srv = simulate.Server{Workers: 50, Queue: 5, Service: 200 * time.Millisecond, Jitter: 0.2}

// mix is each class's share of the offered load: critical 20%, standard
// 30%, best-effort 50%. The simulation's classes are listed from the most
// important down, as in the logs (see class).
var mix = []float64{0.2, 0.3, 0.5}

// class maps the simulation's class c (0 critical, 1 standard, 2
// best-effort) to the priority Class, which counts from the least important.
func class(c int) priority.Class { return priority.Class(len(mix) - 1 - c) }

// load is the offered load, as a multiple of the server's capacity, per
// window: 10 windows at 0.5x, 10 at 1.1x, 20 at 3x, 10 at 0.5x.
func load(w int) float64 {
	switch {
	case w < 10:
		return 0.5
	case w < 20:
		return 1.1
	case w < 40:
		return 3
	}
	return 0.5
}

func run(t *testing.T, p *priority.Shedder, clk *simulate.Sim, queued bool) []simulate.Window {
	t.Helper()
	tg := simulate.Target{
		Acquire:  func(c int) (*adaptive.Token, error) { return p.Acquire(context.Background(), class(c)) },
		Limit:    func() int { return p.Capacity().Stats().Limit },
		InFlight: func() int { return p.Capacity().Stats().InFlight },
	}
	if queued {
		tg.AcquireFunc = func(c int, done func(*adaptive.Token, error)) func() bool {
			return p.AcquireFunc(class(c), done)
		}
	}
	return clk.Run(tg)
}

type phase struct{ offered, failed []int }

func sum(ws []simulate.Window) phase {
	ph := phase{offered: make([]int, 3), failed: make([]int, 3)}
	for _, w := range ws {
		for c := range 3 {
			ph.offered[c] += w.Offered[c]
			ph.failed[c] += w.Shed[c] + w.Dropped[c]
		}
	}
	return ph
}

func (ph phase) rate(c int) float64 { return 1 - float64(ph.failed[c])/float64(ph.offered[c]) }

// TestPriorityUnderOverload runs three classes (critical 20% of the load,
// standard 30%, best-effort 50%) through 10 windows at 0.5x the server's
// capacity, 10 at 1.1x, 20 at 3x and 10 at 0.5x again, on a fixed capacity
// C and on each adaptive algorithm, without and with a priority queue
// (2C waiters, at most one service time of wait).
//
// Everywhere: best-effort is shed first (at 1.1x it loses far more than
// standard), then standard (at 3x standard loses more than critical);
// best-effort is back to no failure at all by the second window after the
// load drops. With the queue, critical success at 3x is >= 99.9% when the
// capacity never overfills the server (fixed C, Gradient2); Vegas and AIMD
// probe past the server's queue, whose refusals do not know about classes,
// so critical loses what the server drops. Without a queue the thresholds
// only keep the top 5% of the capacity for critical, and slots freed by
// completions go to whichever class arrives first: critical success is
// lower (figures in the log).
func TestPriorityUnderOverload(t *testing.T) {
	algs := []struct {
		name string
		alg  func() adaptive.Controller
		// minimum critical success at 3x, without and with the queue
		critical [2]float64
	}{
		{"fixed", func() adaptive.Controller { return must(adaptive.NewConstant(srv.Workers)) }, [2]float64{0.88, 0.999}},
		{"vegas", func() adaptive.Controller {
			return must(adaptive.NewVegas(adaptive.VegasConfig{Rand: rand.New(rand.NewPCG(1, 2))}))
		}, [2]float64{0.88, 0.985}},
		{"gradient2", func() adaptive.Controller { return must(adaptive.NewGradient2(adaptive.Gradient2Config{})) }, [2]float64{0.8, 0.999}},
		{"aimd", func() adaptive.Controller { return must(adaptive.NewAIMD(adaptive.AIMDConfig{})) }, [2]float64{0.85, 0.975}},
	}
	for qi, queued := range []bool{false, true} {
		for _, tc := range algs {
			t.Run(fmt.Sprintf("%s/queue=%v", tc.name, queued), func(t *testing.T) {
				sim := simulate.New(simulate.Config{
					Server: srv, Classes: 3, Windows: 50, Seed: 11, MaxWait: srv.Service,
					Rate: func(w, c int) float64 { return load(w) * mix[c] * srv.Capacity() },
				})
				opts := []adaptive.Option{adaptive.WithClock(sim.Clock())}
				if queued {
					opts = append(opts, adaptive.WithQueue(2*srv.Workers, adaptive.FIFO))
				}
				p := must(priority.NewShedder(must(adaptive.NewGate(tc.alg(), opts...))))
				ws := run(t, p, sim, queued)
				mild, over := sum(ws[12:20]), sum(ws[22:40])
				recovered := 40
				for w := 40; w < 50; w++ {
					if ws[w].Shed[2]+ws[w].Dropped[2] != 0 {
						recovered = w + 1
					}
				}
				t.Logf("1.1x: success critical %6.2f%%, standard %6.2f%%, best-effort %6.2f%%", 100*mild.rate(0), 100*mild.rate(1), 100*mild.rate(2))
				t.Logf("3x:   success critical %6.2f%%, standard %6.2f%%, best-effort %6.2f%%; best-effort without failures from window %d (load dropped at 40)",
					100*over.rate(0), 100*over.rate(1), 100*over.rate(2), recovered)
				if mild.rate(2) >= mild.rate(1)-0.05 {
					t.Errorf("at 1.1x best-effort success %.3f is not clearly below standard %.3f", mild.rate(2), mild.rate(1))
				}
				if !(over.rate(0) > over.rate(1) && over.rate(1) > over.rate(2)) {
					t.Errorf("at 3x success is not ordered critical > standard > best-effort: %.4f %.4f %.4f", over.rate(0), over.rate(1), over.rate(2))
				}
				if over.rate(0) < tc.critical[qi] {
					t.Errorf("critical success at 3x = %.4f, want >= %.4f", over.rate(0), tc.critical[qi])
				}
				if recovered > 42 {
					t.Errorf("best-effort still failing in window %d, want none from window 42", recovered-1)
				}
			})
		}
	}
}
