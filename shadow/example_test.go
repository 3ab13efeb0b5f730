package shadow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A policy runs in dry run on a recording store for four windows; 19 keys
// ask for 10, 20, ... 190 requests a second, and one for 1,000. The report
// recommends p95 + 40% and names the key above it.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := floodgate.ClockFunc(func() time.Time { return now })
	// A top-K of 20 holds every key of the example: each is counted there
	// from its first decision. (Beyond, the decisions of keys outside a
	// full top-K are sampled, and a key enters it a little later: see the
	// package documentation, "Accuracy".)
	rec, err := shadow.New(shadow.Config{Clock: clock, MinObservation: 3 * time.Second, TopK: 20})
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	mem, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer mem.Close()
	recorded, err := rec.Store(mem)
	if err != nil {
		panic(err)
	}
	live, err := policy.NewLive(policy.Config{
		Policies:    []policy.Policy{{Name: "api", Rate: floodgate.PerSecond(50), DryRun: true}},
		DefaultPlan: "api",
	}, recorded)
	if err != nil {
		panic(err)
	}
	rec.Follow(live) // the report knows the policy runs in dry run
	ctx := context.Background()
	start := now
	for w := range 4 {
		for k := range 20 {
			n := 10 * (k + 1)
			key := fmt.Sprint("client-", k)
			if k == 19 {
				n, key = 1000, "scraper"
			}
			for i := range n {
				now = start.Add(time.Duration(w)*time.Second + time.Duration(i)*time.Second/time.Duration(n))
				if _, err := live.Take(ctx, key, 1); err != nil {
					panic(err)
				}
			}
		}
	}
	now = start.Add(4 * time.Second)

	d, _ := rec.Demand("api")
	rep := d.Report()
	r := rep.Recommendation
	fmt.Printf("p50 %.0f, p95 %.0f, max %.0f per key per %v\n", rep.Demand.P50, rep.Demand.P95, rep.Demand.Max, rep.Window)
	fmt.Printf("recommended limit %d (current %d), burst %d\n", r.Limit, r.Current, r.Burst)
	fmt.Printf("above it: %v, in %.0f of %.0f key-windows\n", r.KeysAbove, r.KeyWindowsAbove, r.KeyWindows)
	fmt.Printf("heaviest: %s at %d a window, %d refused by the current limit\n", rep.Top[0].Key, rep.Top[0].Peak, rep.Top[0].Refused)
	// Output:
	// p50 100, p95 191, max 1000 per key per 1s
	// recommended limit 267 (current 50), burst 175
	// above it: [scraper], in 4 of 80 key-windows
	// heaviest: scraper at 1000 a window, 3751 refused by the current limit
}
