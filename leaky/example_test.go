package leaky_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// Porting "limit_req_zone $binary_remote_addr zone=ip:10m rate=10r/s;" and
// "limit_req zone=ip burst=20 nodelay;": 21 requests (burst+1) pass at
// once, the 22nd is rejected until 100 ms have leaked.
func Example() {
	// A frozen clock makes the output deterministic; omit WithClock in
	// real code.
	frozen := floodgate.ClockFunc(func() time.Time { return time.Unix(1_767_225_600, 0) })
	s, err := memstore.New(memstore.WithClock(frozen))
	if err != nil {
		panic(err)
	}
	defer s.Close()

	// The same as leaky.Config{Rate: floodgate.PerSecond(10), Burst: 20, NoDelay: true}.
	cfg, err := leaky.ParseNginx("10r/s", "zone=ip burst=20 nodelay")
	if err != nil {
		panic(err)
	}
	lim, err := leaky.NewKeyed(s, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("capacity from idle:", cfg.Capacity())

	ctx := context.Background()
	passed := 0
	for {
		d, err := lim.Take(ctx, "203.0.113.7", 1)
		if err != nil {
			panic(err)
		}
		if !d.Allowed {
			fmt.Printf("passed %d, then rejected: retry after %v, %d/%d remaining\n", passed, d.RetryAfter, d.Remaining, d.Limit)
			break
		}
		passed++
	}
	// Output:
	// capacity from idle: 21
	// passed 21, then rejected: retry after 100ms, 0/21 remaining
}

// nginx's default mode ("burst=3", no nodelay) and delay=N mode admit excess
// requests with a Delay that spaces them at the rate. nginx's
// $limit_req_status follows from the Decision: REJECTED when not Allowed,
// DELAYED when Allowed with a Delay, PASSED otherwise; with limit_req_dry_run
// on (which the transports implement by admitting every request) the same
// decisions give the dry-run statuses.
func ExampleNewKeyed_delay() {
	status := func(d floodgate.Decision, dryRun bool) string {
		s := "PASSED"
		switch {
		case !d.Allowed:
			s = "REJECTED"
		case d.Delay > 0:
			s = "DELAYED"
		}
		if dryRun && s != "PASSED" {
			s += "_DRY_RUN"
		}
		return s
	}
	frozen := floodgate.ClockFunc(func() time.Time { return time.Unix(1_767_225_600, 0) })
	s, err := memstore.New(memstore.WithClock(frozen))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()

	for _, mode := range []struct {
		cfg    leaky.Config
		dryRun bool
	}{
		{leaky.Config{Rate: floodgate.PerSecond(2), Burst: 3}, false},           // burst=3
		{leaky.Config{Rate: floodgate.PerSecond(2), Burst: 3, Delay: 1}, false}, // burst=3 delay=1
		{leaky.Config{Rate: floodgate.PerSecond(2), Burst: 3, Delay: 1}, true},  // + limit_req_dry_run on
	} {
		lim, err := leaky.NewKeyed(s, mode.cfg)
		if err != nil {
			panic(err)
		}
		var line []string
		for range mode.cfg.Capacity() + 1 {
			d, err := lim.Take(ctx, "client", 1)
			if err != nil {
				panic(err)
			}
			line = append(line, fmt.Sprintf("%s/%v", status(d, mode.dryRun), d.Delay))
		}
		fmt.Println(strings.Join(line, " "))
	}
	// Output:
	// PASSED/0s DELAYED/500ms DELAYED/1s DELAYED/1.5s REJECTED/0s
	// PASSED/0s PASSED/0s DELAYED/500ms DELAYED/1s REJECTED/0s
	// PASSED/0s PASSED/0s DELAYED_DRY_RUN/500ms DELAYED_DRY_RUN/1s REJECTED_DRY_RUN/0s
}

// A reservation (what floodgate.Wait makes) queues past the burst at the
// rate instead of being rejected: with "rate=2r/s burst=1 nodelay", two
// requests pass at once and the next ones are served 500 ms apart, in
// order, as long as their Delay fits maxWait.
func ExampleNewKeyed_reserve() {
	frozen := floodgate.ClockFunc(func() time.Time { return time.Unix(1_767_225_600, 0) })
	s, err := memstore.New(memstore.WithClock(frozen))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerSecond(2), Burst: 1, NoDelay: true})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 5 {
		d, err := lim.Reserve(ctx, "client", 1, time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v delay=%v retry-after=%v\n", d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// allowed=true delay=0s retry-after=0s
	// allowed=true delay=0s retry-after=0s
	// allowed=true delay=500ms retry-after=0s
	// allowed=true delay=1s retry-after=0s
	// allowed=false delay=0s retry-after=1.5s
}
