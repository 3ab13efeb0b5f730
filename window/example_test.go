package window_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/window"
)

// newStore returns a memory store whose clock reads *now, so that the
// examples are reproducible.
func newStore(now *time.Time) *memstore.Store {
	s, err := memstore.New(
		memstore.WithClock(floodgate.ClockFunc(func() time.Time { return *now })),
		memstore.WithSweepInterval(0),
	)
	if err != nil {
		panic(err)
	}
	return s
}

// The three algorithms on the same traffic: 3 requests per second, a client
// that sends 3 at the very end of a second and 3 more right after.
func Example() {
	ctx := context.Background()
	cfg := window.Config{Limit: 3, Window: time.Second}
	for _, alg := range []struct {
		name string
		new  func(*memstore.Store, window.Config) (floodgate.Limiter, error)
	}{
		{"fixed  ", func(s *memstore.Store, c window.Config) (floodgate.Limiter, error) { return window.NewFixed(s, c) }},
		{"log    ", func(s *memstore.Store, c window.Config) (floodgate.Limiter, error) { return window.NewSlidingLog(s, c) }},
		{"counter", func(s *memstore.Store, c window.Config) (floodgate.Limiter, error) {
			return window.NewSlidingCounter(s, c)
		}},
	} {
		now := time.Unix(1_700_000_000, 0).Add(999 * time.Millisecond)
		s := newStore(&now)
		lim, err := alg.new(s, cfg)
		if err != nil {
			panic(err)
		}
		admitted := 0
		for _, at := range []time.Duration{0, 2 * time.Millisecond} {
			now = now.Add(at)
			for range 3 {
				if d, _ := lim.Take(ctx, "alice", 1); d.Allowed {
					admitted++
				}
			}
		}
		d, _ := lim.Take(ctx, "alice", 1)
		fmt.Printf("%s admitted %d of 6 within 2ms; next retry after %v\n", alg.name, admitted, d.RetryAfter)
		s.Close()
	}
	// Output:
	// fixed   admitted 6 of 6 within 2ms; next retry after 999ms
	// log     admitted 3 of 6 within 2ms; next retry after 998ms
	// counter admitted 3 of 6 within 2ms; next retry after 332.334ms
}

// A sliding-window counter of 100 per minute: the previous minute's count
// weighs in proportion to how much of it the last 60 seconds still cover.
func ExampleNewSlidingCounter() {
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	s := newStore(&now)
	defer s.Close()
	lim, err := window.NewSlidingCounter(s, window.Config{Limit: 100, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := lim.Take(ctx, "api-key-1", 80) // 80 in the minute 18:00
	fmt.Printf("18:00:00 take 80: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)

	now = now.Add(75 * time.Second) // 18:01:15: 80 x 45/60 = 60 still count
	d, _ = lim.Take(ctx, "api-key-1", 50)
	fmt.Printf("18:01:15 take 50: allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)

	now = now.Add(d.RetryAfter) // 80 x (60-22.5)/60 = 50: room for 50
	d, _ = lim.Take(ctx, "api-key-1", 50)
	fmt.Printf("18:01:22.5 take 50: allowed=%v remaining=%d reset-after=%v\n", d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// 18:00:00 take 80: allowed=true remaining=20
	// 18:01:15 take 50: allowed=false remaining=40 retry-after=7.5s
	// 18:01:22.5 take 50: allowed=true remaining=0 reset-after=1m37.5s
}

// A fixed window of 1000 per hour: windows start on the hour, on every node.
func ExampleNewFixed() {
	now := time.Date(2026, 11, 29, 18, 45, 0, 0, time.UTC)
	s := newStore(&now)
	defer s.Close()
	lim, err := window.NewFixed(s, window.Config{Limit: 1000, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	d, _ := lim.Take(context.Background(), "tenant-7", 1000)
	fmt.Printf("allowed=%v remaining=%d reset-after=%v\n", d.Allowed, d.Remaining, d.ResetAfter)
	d, _ = lim.Take(context.Background(), "tenant-7", 1)
	fmt.Printf("allowed=%v retry-after=%v\n", d.Allowed, d.RetryAfter)
	// Output:
	// allowed=true remaining=0 reset-after=15m0s
	// allowed=false retry-after=15m0s
}

// A sliding log of 5 login attempts per 15 minutes: exact, whatever the
// timing of the attempts.
func ExampleNewSlidingLog() {
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	s := newStore(&now)
	defer s.Close()
	lim, err := window.NewSlidingLog(s, window.Config{Limit: 5, Window: 15 * time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 6 {
		d, _ := lim.Take(ctx, "user@example.com", 1)
		fmt.Printf("attempt %d at %s: allowed=%v retry-after=%v\n", i+1, now.Format("15:04"), d.Allowed, d.RetryAfter)
		now = now.Add(time.Minute)
	}
	// Output:
	// attempt 1 at 18:00: allowed=true retry-after=0s
	// attempt 2 at 18:01: allowed=true retry-after=0s
	// attempt 3 at 18:02: allowed=true retry-after=0s
	// attempt 4 at 18:03: allowed=true retry-after=0s
	// attempt 5 at 18:04: allowed=true retry-after=0s
	// attempt 6 at 18:05: allowed=false retry-after=10m0s
}
