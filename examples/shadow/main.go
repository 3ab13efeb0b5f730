// Command shadow measures the demand a new limit would see before enforcing
// it: a policy runs in dry run on a recording store, the recorder
// recommends p95 + 40%, and a guarded tuner walks the limit there.
//
//	go run ./examples/shadow -demo          # simulated traffic and time, prints the report and the tuner's steps
//	go run ./examples/shadow -addr :8089    # live synthetic traffic; the report at http://localhost:8089/
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func main() {
	demo := flag.Bool("demo", false, "simulate traffic and time, print the report and the tuner's steps, and exit")
	addr := flag.String("addr", "127.0.0.1:8089", "where to serve the report (without -demo)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *demo {
		err = run(ctx, os.Stdout)
	} else {
		err = serve(ctx, *addr)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// clock is the demo's simulated time.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// traffic is 2,000 clients asking a log-normal number of requests a second
// (median 8) and 3 scrapers at 40 times that.
type traffic struct {
	keys  []string
	rates []int
}

func newTraffic() traffic {
	rng := rand.New(rand.NewPCG(1, 2))
	var t traffic
	for i := range 2003 {
		r := max(1, int(math.Round(8*math.Exp(0.7*rng.NormFloat64()))))
		key := fmt.Sprintf("client-%04d", i)
		if i >= 2000 {
			r, key = 320, fmt.Sprintf("scraper-%d", i-2000)
		}
		t.keys, t.rates = append(t.keys, key), append(t.rates, r)
	}
	return t
}

// second sends one second of traffic starting at start, each client's
// requests evenly spread, calling at(t) before each request.
func (t traffic) second(ctx context.Context, live *policy.Live, start time.Time, at func(time.Time)) error {
	for i, key := range t.keys {
		for j := range t.rates[i] {
			at(start.Add(time.Duration(j) * time.Second / time.Duration(t.rates[i])))
			if _, err := live.Take(ctx, key, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

func setup(clk floodgate.Clock, minObs time.Duration, limit int64, dryRun bool) (*shadow.Recorder, *policy.Live, func(), error) {
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: minObs})
	if err != nil {
		return nil, nil, nil, err
	}
	opts := []memstore.Option{}
	if clk != nil {
		opts = append(opts, memstore.WithClock(clk))
	}
	mem, err := memstore.New(opts...)
	if err != nil {
		rec.Close()
		return nil, nil, nil, err
	}
	recorded, err := rec.Store(mem)
	if err != nil {
		return nil, nil, nil, err
	}
	live, err := policy.NewLive(policy.Config{
		Policies:    []policy.Policy{{Name: "api", Rate: floodgate.PerSecond(limit), DryRun: dryRun}},
		DefaultPlan: "api",
	}, recorded)
	if err != nil {
		return nil, nil, nil, err
	}
	return rec, live, func() { mem.Close(); rec.Close() }, nil
}

// run is the demo, on simulated time.
func run(ctx context.Context, out io.Writer) error {
	clk := &clock{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk.ns.Store(t0.UnixNano())
	rec, live, done, err := setup(clk, 20*time.Second, 200, true)
	if err != nil {
		return err
	}
	defer done()
	tr := newTraffic()
	set := func(t time.Time) { clk.ns.Store(t.UnixNano()) }

	fmt.Fprintln(out, "1. shadow: policy api at 200/s in dry run, 30 s of traffic")
	for s := range 30 {
		if err := tr.second(ctx, live, t0.Add(time.Duration(s)*time.Second), set); err != nil {
			return err
		}
	}
	set(t0.Add(30 * time.Second))
	d, _ := rec.Demand("api")
	rep := d.Report()
	fmt.Fprintf(out, "   keys %.0f, key-windows %.0f; demand per key per second: p50 %.0f p90 %.0f p95 %.0f p99 %.0f max %.0f\n",
		rep.Keys, rep.KeyWindows, rep.Demand.P50, rep.Demand.P90, rep.Demand.P95, rep.Demand.P99, rep.Demand.Max)
	fmt.Fprintf(out, "   %s\n", rep.Recommendation)
	for _, k := range rep.Top[:4] {
		fmt.Fprintf(out, "   heavy: %-12s peak %4d/s, would have been refused %d times\n", k.Key, k.Peak, k.Refused)
	}

	fmt.Fprintln(out, "2. tuning: enforce 200/s, then let the tuner walk to the recommendation (30% a step at most)")
	p, _ := live.Set().Policy("api")
	p.DryRun = false
	if _, err := live.Update(policy.Config{Policies: []policy.Policy{p}, DefaultPlan: "api"}, "operator"); err != nil {
		return err
	}
	tuner, err := shadow.NewTuner(live, rec, shadow.TuneConfig{
		Policy: "api", Interval: 5 * time.Second, Floor: 10, Ceiling: 1000, Clock: clk,
		OnEvent: func(e shadow.TuneEvent) {
			if e.Kind != shadow.Proposed {
				fmt.Fprintf(out, "   %s\n", e)
			}
		},
	})
	if err != nil {
		return err
	}
	for s := 30; s < 90; s++ {
		if err := tr.second(ctx, live, t0.Add(time.Duration(s)*time.Second), set); err != nil {
			return err
		}
		set(t0.Add(time.Duration(s+1) * time.Second))
		if (s+1)%5 == 0 {
			tuner.Step(ctx)
		}
	}
	p, _ = live.Set().Policy("api")
	fmt.Fprintf(out, "   now: %s\n", p)
	return nil
}

// serve runs synthetic traffic in real time and serves the report.
func serve(ctx context.Context, addr string) error {
	rec, live, done, err := setup(nil, 10*time.Second, 200, true)
	if err != nil {
		return err
	}
	defer done()
	tr := newTraffic()
	go func() {
		for ctx.Err() == nil {
			start := time.Now()
			_ = tr.second(ctx, live, start, func(t time.Time) {
				if d := time.Until(t); d > time.Millisecond {
					time.Sleep(d)
				}
			})
		}
	}()
	srv := &http.Server{Addr: addr, Handler: rec.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Printf("report at http://%s/ (JSON: ?format=json); the recommendation comes after 10 s", addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
