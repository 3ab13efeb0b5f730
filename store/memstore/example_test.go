package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A keyed token bucket of 2 per second with a burst of 3, on an in-memory
// store whose clock is fixed so that the output is reproducible.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(func() time.Time { return now })))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(2), Burst: 3})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, _ := lim.Take(ctx, "alice", 1)
		fmt.Printf("alice allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	d, _ := lim.Take(ctx, "bob", 1)
	fmt.Printf("bob   allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	fmt.Println("keys:", s.Stats().Keys)
	// Output:
	// alice allowed=true remaining=2 retry-after=0s
	// alice allowed=true remaining=1 retry-after=0s
	// alice allowed=true remaining=0 retry-after=0s
	// alice allowed=false remaining=0 retry-after=500ms
	// bob   allowed=true remaining=2
	// keys: 2
}
