package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
)

// A keyless token bucket: 2 events per second, bursts of 3. Explicit times
// make the output reproducible; in production call Allow, Reserve or Wait,
// which read floodgate's monotonic clock.
func ExampleLimiter() {
	lim := bucket.NewLimiter(2, 3)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

	// The burst, then no more.
	fmt.Println(lim.AllowN(now, 1), lim.AllowN(now, 1), lim.AllowN(now, 1), lim.AllowN(now, 1))

	r := lim.ReserveN(now, 1) // take the next token ahead of time
	fmt.Println("reserved:", r.OK(), "act in", r.DelayFrom(now))

	later := now.Add(time.Second)
	fmt.Println("tokens one second later:", lim.TokensAt(later))

	lim.SetLimitAt(later, bucket.Every(100*time.Millisecond))
	fmt.Println("allowed at 10/s, 100ms later:", lim.AllowN(later.Add(100*time.Millisecond), 2))
	// Output:
	// true true true false
	// reserved: true act in 500ms
	// tokens one second later: 1
	// allowed at 10/s, 100ms later: true
}

// Wait blocks until the tokens are there, and fails at once when they would
// come after the context's deadline.
func ExampleLimiter_WaitN() {
	lim := bucket.NewLimiter(1, 5)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	fmt.Println(lim.WaitN(ctx, 5)) // the full burst: no wait
	err := lim.WaitN(ctx, 5)       // about 5 s away, past the deadline
	fmt.Println(errors.Is(err, floodgate.ErrWouldExceedDeadline), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// <nil>
	// true true
}
