package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// fixedClock is a clock that only moves when told to, so that the examples
// print the same decisions on every run.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time          { return c.t }
func (c *fixedClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// A keyed limiter (token bucket on the embedded store) and its decisions.
func Example() {
	clock := &fixedClock{t: time.Unix(1_700_000_000, 0)}
	s, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(2), Burst: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, _ := lim.Take(ctx, "203.0.113.7", 1)
		fmt.Printf("allowed=%v remaining=%d retry-after=%v reset-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	clock.Advance(500 * time.Millisecond)
	d, _ := lim.Take(ctx, "203.0.113.7", 1)
	fmt.Printf("after 500ms: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true remaining=1 retry-after=0s reset-after=500ms
	// allowed=true remaining=0 retry-after=0s reset-after=1s
	// allowed=false remaining=0 retry-after=500ms reset-after=1s
	// after 500ms: allowed=true remaining=0
}

// All combines policies: a request passes only if every one admits it, and a
// denial consumes nothing from the others.
func ExampleAll() {
	clock := &fixedClock{t: time.Unix(1_700_000_000, 0)}
	s, _ := memstore.New(memstore.WithClock(clock))
	defer s.Close()
	perSecond, _ := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 10})
	perHour, _ := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(3), Burst: 3})
	both, err := floodgate.All(perSecond, perHour)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, _ := both.Take(ctx, "token-abc", 1)
		fmt.Printf("allowed=%v remaining=%d of %d retry-after=%v\n", d.Allowed, d.Remaining, d.Limit, d.RetryAfter)
	}
	d, _ := perSecond.Peek(ctx, "token-abc")
	fmt.Printf("per-second budget left: %d of %d\n", d.Remaining, d.Limit)
	// Output:
	// allowed=true remaining=2 of 3 retry-after=0s
	// allowed=true remaining=1 of 3 retry-after=0s
	// allowed=true remaining=0 of 3 retry-after=0s
	// allowed=false remaining=0 of 3 retry-after=20m0s
	// per-second budget left: 7 of 10
}

// Wait blocks until the limiter admits, and fails fast when that would be
// after the context's deadline.
func ExampleWait() {
	s, _ := memstore.New()
	defer s.Close()
	lim, _ := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerMinute(1), Burst: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	_, err := floodgate.Wait(ctx, lim, "batch-job", 1)
	fmt.Println("first:", err)
	_, err = floodgate.Wait(ctx, lim, "batch-job", 1) // next token in a minute
	fmt.Println("second fails fast:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// first: <nil>
	// second fails fast: true
}
