package simulate_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/internal/simulate"
)

func fixed(sim *simulate.Sim, n int, opts ...adaptive.Option) *adaptive.Gate {
	alg, err := adaptive.NewConstant(n)
	if err != nil {
		panic(err)
	}
	l, err := adaptive.NewGate(alg, append(opts, adaptive.WithClock(sim.Clock()))...)
	if err != nil {
		panic(err)
	}
	return l
}

func TestDeterministic(t *testing.T) {
	cfg := simulate.Config{
		Server: simulate.Server{Workers: 10, Queue: 2, Service: 100 * time.Millisecond, Jitter: 0.3},
		Rate:   func(w, _ int) float64 { return float64(50 * (w + 1)) }, Windows: 4, Seed: 42,
	}
	run := func() []simulate.Window {
		sim := simulate.New(cfg)
		return sim.Run(simulate.ForGate(fixed(sim, 15)))
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	cfg.Seed = 43
	sim := simulate.New(cfg)
	if c := sim.Run(simulate.ForGate(fixed(sim, 15))); reflect.DeepEqual(a, c) {
		t.Fatal("a different seed gave the same run")
	}
}

// TestServerModel: with a limit above workers+queue the server refuses the
// excess (drops); every arrival is accounted for; latency grows with the
// queue (above the slowest service time) but stays within twice the slowest
// service time (a queue shorter than the workers clears within one service).
func TestServerModel(t *testing.T) {
	srv := simulate.Server{Workers: 10, Queue: 5, Service: 100 * time.Millisecond, Jitter: 0.2}
	sim := simulate.New(simulate.Config{Server: srv, Rate: func(int, int) float64 { return 3 * srv.Capacity() }, Windows: 10, Seed: 1})
	ws := sim.Run(simulate.ForGate(fixed(sim, 30)))
	for _, w := range ws {
		if simulate.Total(w.Offered) != simulate.Total(w.Admitted)+simulate.Total(w.Shed) {
			t.Fatalf("window %d: offered %v != admitted %v + shed %v", w.Index, w.Offered, w.Admitted, w.Shed)
		}
		// Refusals are instantaneous and free their slot at once, so the
		// limit of 30 is never reached: the server drops, the gate sheds
		// nothing.
		if w.Index > 0 && (w.Dropped[0] == 0 || w.Shed[0] != 0) {
			t.Fatalf("window %d: at 3x with limit 30 > 10+5 want drops and no shed, got %+v", w.Index, w)
		}
		if slowest := srv.Service * 6 / 5; w.P99All > 2*slowest || (w.Index > 0 && w.P99All <= slowest) {
			t.Fatalf("window %d: p99 %v, want in (%v, %v]", w.Index, w.P99All, slowest, 2*slowest)
		}
		// Throughput is the server's capacity, 100 per second, give or take.
		if w.Index > 0 && (w.Succeeded[0] < 90 || w.Succeeded[0] > 110) {
			t.Fatalf("window %d: %d successes, want ~100", w.Index, w.Succeeded[0])
		}
	}
	if got := simulate.P99(nil); got != 0 {
		t.Fatalf("P99(nil) = %v", got)
	}
}

// TestWaiting: with AcquireFunc and a queue, requests wait for at most
// MaxWait, then count as shed.
func TestWaiting(t *testing.T) {
	srv := simulate.Server{Workers: 10, Queue: 0, Service: 100 * time.Millisecond}
	sim := simulate.New(simulate.Config{Server: srv, Rate: func(int, int) float64 { return 2 * srv.Capacity() }, Windows: 5, Seed: 1, MaxWait: 50 * time.Millisecond})
	l := fixed(sim, 10, adaptive.WithQueue(1000, adaptive.FIFO))
	tg := simulate.ForGate(l)
	tg.AcquireFunc = func(_ int, done func(*adaptive.Token, error)) func() bool {
		return l.AcquireFunc(adaptive.Request{}, done)
	}
	ws := sim.Run(tg)
	for _, w := range ws[1:4] {
		if w.Shed[0] == 0 || w.Dropped[0] != 0 {
			t.Fatalf("window %d: want sheds by timeout and no drops: %+v", w.Index, w)
		}
		if w.P99All > 150*time.Millisecond || w.P99All <= 100*time.Millisecond {
			t.Fatalf("window %d: p99 %v, want a wait of up to 50ms on top of 100ms", w.Index, w.P99All)
		}
	}
}

// A gate of 5 in front of a server of 10 workers at twice the server's
// capacity: the gate sheds what it cannot run, and the server never
// queues.
func Example() {
	srv := simulate.Server{Workers: 10, Service: 100 * time.Millisecond}
	sim := simulate.New(simulate.Config{
		Server:  srv,
		Rate:    func(w, class int) float64 { return 2 * srv.Capacity() },
		Windows: 3,
		Seed:    1,
	})
	alg, _ := adaptive.NewConstant(5)
	l, _ := adaptive.NewGate(alg, adaptive.WithClock(sim.Clock()))
	for _, w := range sim.Run(simulate.ForGate(l)) {
		fmt.Printf("window %d: limit %d, p99 %v, server dropped %d\n", w.Index, w.Limit, w.P99All, w.Dropped[0])
	}
	// Output:
	// window 0: limit 5, p99 100ms, server dropped 0
	// window 1: limit 5, p99 100ms, server dropped 0
	// window 2: limit 5, p99 100ms, server dropped 0
}
