// Command shedding simulates a load spike on a server protected by an
// adaptive concurrency limit shared by three priority classes, writes a chart
// of offered load, successes, limit, in-flight and p99 latency over time per
// class (an SVG, docs/shedding.svg by default) and prints a summary.
//
// Everything runs in simulated time (package internal/simulate): a run takes
// a fraction of a second and is the same every time for a given seed.
//
//	go run ./examples/shedding                 # writes docs/shedding.svg
//	go run ./examples/shedding -alg vegas -queue=false -out /tmp/v.svg
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/internal/simulate"
	"github.com/floodgate-go/floodgate/priority"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shedding:", err)
		os.Exit(1)
	}
}

// scenario is one simulated run.
type scenario struct {
	server  simulate.Server
	mix     []float64 // share of the offered load per class
	base    float64   // offered load outside the spike, x capacity
	spike   float64   // offered load during the spike, x capacity
	windows int
	from    int // first window of the spike
	to      int // first window after it
}

func (s scenario) load(w int) float64 {
	if w >= s.from && w < s.to {
		return s.spike
	}
	return s.base
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("shedding", flag.ContinueOnError)
	fs.SetOutput(stdout)
	out := fs.String("out", filepath.Join("docs", "shedding.svg"), "path of the SVG chart to write")
	algName := fs.String("alg", "gradient2", "limit algorithm: gradient2, vegas, aimd or fixed")
	queue := fs.Bool("queue", true, "let shed requests wait (at most one service time) in a priority queue")
	short := fs.Bool("short", false, "a short run (30 windows) for smoke tests")
	seed := fs.Uint64("seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc := scenario{
		server:  simulate.Server{Workers: 50, Queue: 5, Service: 200 * time.Millisecond, Jitter: 0.2},
		mix:     []float64{0.2, 0.3, 0.5},
		base:    0.6,
		spike:   3,
		windows: 120, from: 40, to: 90,
	}
	if *short {
		sc.windows, sc.from, sc.to = 30, 10, 20
	}
	sim := simulate.New(simulate.Config{
		Server: sc.server, Classes: len(sc.mix), Windows: sc.windows, Seed: *seed, MaxWait: sc.server.Service,
		Rate: func(w, c int) float64 { return sc.load(w) * sc.mix[c] * sc.server.Capacity() },
	})
	alg, err := newAlgorithm(*algName, sc.server.Workers, *seed)
	if err != nil {
		return err
	}
	opts := []adaptive.Option{adaptive.WithClock(sim.Clock())}
	if *queue {
		opts = append(opts, adaptive.WithQueue(2*sc.server.Workers, adaptive.FIFO))
	}
	capacity, err := adaptive.NewGate(alg, opts...)
	if err != nil {
		return err
	}
	p, err := priority.NewShedder(capacity)
	if err != nil {
		return err
	}
	// The simulation, the chart and the summary list the classes from the
	// most important down; priority counts them from the least important.
	classes := p.Stats() // the class names, in class order
	class := func(c int) priority.Class { return priority.Class(len(classes) - 1 - c) }
	tg := simulate.Target{
		Limit:    func() int { return capacity.Stats().Limit },
		InFlight: func() int { return capacity.Stats().InFlight },
	}
	if *queue {
		tg.AcquireFunc = func(c int, done func(*adaptive.Token, error)) func() bool {
			return p.AcquireFunc(class(c), done)
		}
	} else {
		tg.Acquire = func(c int) (*adaptive.Token, error) { return p.Acquire(bg, class(c)) }
	}
	ws := sim.Run(tg)

	names := make([]string, len(classes))
	for c := range names {
		names[c] = classes[class(c)].Name
	}
	title := fmt.Sprintf("%s limit, %d workers x %v, queue=%v: %.1fx load, spike to %.0fx in windows %d-%d",
		*algName, sc.server.Workers, sc.server.Service, *queue, sc.base, sc.spike, sc.from, sc.to-1)
	if err := writeChart(*out, title, names, sc, ws); err != nil {
		return err
	}
	summarize(stdout, title, names, sc, ws)
	fmt.Fprintf(stdout, "chart written to %s\n", *out)
	return nil
}

func newAlgorithm(name string, workers int, seed uint64) (adaptive.Controller, error) {
	switch name {
	case "gradient2":
		return adaptive.NewGradient2(adaptive.Gradient2Config{})
	case "vegas":
		return adaptive.NewVegas(adaptive.VegasConfig{Rand: rand.New(rand.NewPCG(seed, seed))})
	case "aimd":
		return adaptive.NewAIMD(adaptive.AIMDConfig{})
	case "fixed":
		return adaptive.NewConstant(workers)
	}
	return nil, errors.New("unknown algorithm " + name + " (want gradient2, vegas, aimd or fixed)")
}

// phase sums the windows [from, to).
type phase struct {
	name            string
	offered, failed []int
	p99             time.Duration
	minLim, maxLim  int
}

func sumPhase(name string, ws []simulate.Window, from, to, classes int) phase {
	ph := phase{name: name, offered: make([]int, classes), failed: make([]int, classes), minLim: 1 << 30}
	for _, w := range ws[from:to] {
		for c := range classes {
			ph.offered[c] += w.Offered[c]
			ph.failed[c] += w.Shed[c] + w.Dropped[c]
		}
		ph.p99 = max(ph.p99, w.P99All)
		ph.minLim, ph.maxLim = min(ph.minLim, w.Limit), max(ph.maxLim, w.Limit)
	}
	return ph
}

func summarize(w io.Writer, title string, names []string, sc scenario, ws []simulate.Window) {
	fmt.Fprintln(w, title)
	fmt.Fprintf(w, "server: %d workers, %.0f req/s, queue %d (then it refuses), no-load latency %v\n",
		sc.server.Workers, sc.server.Capacity(), sc.server.Queue, sc.server.Service)
	fmt.Fprintf(w, "load: %.0f%% critical, %.0f%% standard, %.0f%% best-effort; \"ok\" = neither shed by the limiter nor refused by the server\n",
		100*sc.mix[0], 100*sc.mix[1], 100*sc.mix[2])
	// Leave each phase's first window out: it holds the transition.
	phases := []phase{
		sumPhase("before", ws, 1, sc.from, len(names)),
		sumPhase("spike", ws, sc.from+1, sc.to, len(names)),
		sumPhase("after", ws, sc.to+1, sc.windows, len(names)),
	}
	fmt.Fprintf(w, "%-7s %-12s", "phase", "limit")
	for _, n := range names {
		fmt.Fprintf(w, " %16s", n+" ok")
	}
	fmt.Fprintf(w, " %10s\n", "worst p99")
	for _, ph := range phases {
		fmt.Fprintf(w, "%-7s %-12s", ph.name, fmt.Sprintf("%d..%d", ph.minLim, ph.maxLim))
		for c := range names {
			ok := 100.0
			if ph.offered[c] > 0 {
				ok = 100 * float64(ph.offered[c]-ph.failed[c]) / float64(ph.offered[c])
			}
			fmt.Fprintf(w, " %15.2f%%", ok)
		}
		fmt.Fprintf(w, " %10v\n", ph.p99.Round(time.Millisecond))
	}
	last := len(names) - 1
	back := -1
	for i := sc.to; i < sc.windows; i++ {
		if ws[i].Shed[last]+ws[i].Dropped[last] == 0 {
			back = i - sc.to
			break
		}
	}
	if back >= 0 {
		fmt.Fprintf(w, "%s was served in full again %d window(s) after the spike ended\n", names[last], back)
	} else {
		fmt.Fprintf(w, "%s did not recover before the end of the run\n", names[last])
	}
}
