package bucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A keyed token bucket: every client gets a burst of 2 and 1 more per
// second. The store's clock is fixed (then moved by hand) so that the output
// is reproducible; in production use memstore.New() with the default clock.
func ExampleNewKeyed() {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(func() time.Time { return now })))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Name: "per-client", Rate: floodgate.PerSecond(1), Burst: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	show := func(key string) {
		d, err := lim.Take(ctx, key, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-5s allowed=%-5v remaining=%d retry-after=%v reset-after=%v\n",
			key, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	show("alice")
	show("alice")
	show("alice") // burst spent
	show("bob")   // another key, another bucket
	now = now.Add(time.Second)
	show("alice") // one token back
	if _, err := lim.Take(ctx, "alice", 3); err != nil {
		fmt.Println(err)
	}
	// Output:
	// alice allowed=true  remaining=1 retry-after=0s reset-after=1s
	// alice allowed=true  remaining=0 retry-after=0s reset-after=2s
	// alice allowed=false remaining=0 retry-after=1s reset-after=2s
	// bob   allowed=true  remaining=1 retry-after=0s reset-after=1s
	// alice allowed=true  remaining=0 retry-after=0s reset-after=2s
	// floodgate: invalid cost: cost exceeds the policy's capacity: cost 3 exceeds the capacity 2 of "per-client"
}

// Reservations, as floodgate.Wait makes them: each is admitted at once with
// the Delay after which to act, one interval after the previous one, until
// the wait would pass maxWait; that one is refused and charges nothing.
// Cancelling the last reservation gives its token back.
func ExampleNewKeyed_reserve() {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(func() time.Time { return now })))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Name: "jobs", Rate: floodgate.PerSecond(2), Burst: 1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var last floodgate.Decision
	for range 4 {
		d, err := lim.Reserve(ctx, "worker", 1, time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%-5v delay=%v retry-after=%v\n", d.Allowed, d.Delay, d.RetryAfter)
		if d.Allowed {
			last = d
		}
	}
	if err := lim.CancelReservation(ctx, "worker", 1, last.ResetAfter); err != nil {
		panic(err)
	}
	d, _ := lim.Reserve(ctx, "worker", 1, time.Second)
	fmt.Printf("after cancelling the last: delay=%v\n", d.Delay)
	// Output:
	// allowed=true  delay=0s retry-after=0s
	// allowed=true  delay=500ms retry-after=0s
	// allowed=true  delay=1s retry-after=0s
	// allowed=false delay=0s retry-after=1.5s
	// after cancelling the last: delay=1s
}
