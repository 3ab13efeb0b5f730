package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
)

// A gate admits requests while fewer than the limit are in flight; each
// admitted request ends its token with Success, Dropped or Ignore.
func Example() {
	alg, err := adaptive.NewConstant(2)
	if err != nil {
		panic(err)
	}
	l, err := adaptive.NewGate(alg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	a, _ := l.Acquire(ctx)
	b, _ := l.Acquire(ctx)
	_, err = l.Acquire(ctx)
	fmt.Println("third request:", err, errors.Is(err, adaptive.ErrLimitExceeded))

	a.Success()
	b.Dropped()
	b.Success() // a second end does nothing
	fmt.Println("in flight:", l.Stats().InFlight)
	// Output:
	// third request: adaptive: concurrency limit exceeded true
	// in flight: 0
}

// Do wraps a handler: the token ends by the handler's outcome, and a panic
// releases the slot before it goes on.
func ExampleGate_Do() {
	l, _ := adaptive.NewGate(must(adaptive.NewAIMD(adaptive.AIMDConfig{})))
	err := l.Do(context.Background(), func(ctx context.Context) error {
		return nil // served
	})
	fmt.Println(err, l.Stats().Succeeded)
	// Output:
	// <nil> 1
}

// With a simulated clock, the AIMD limit grows by one per window while the
// window uses at least half the limit, and backs off on a drop.
func ExampleNewAIMD() {
	clk := newFakeClock()
	alg, _ := adaptive.NewAIMD(adaptive.AIMDConfig{InitialLimit: 20})
	l, _ := adaptive.NewGate(alg, adaptive.WithClock(clk), adaptive.OnLimitChange(func(c adaptive.LimitChange) {
		fmt.Printf("limit %d -> %d (drops %d)\n", c.Old, c.New, c.Sample.Dropped)
	}))
	window := func(drop bool) {
		var toks []*adaptive.Token
		for range 12 {
			tok, _ := l.Acquire(context.Background())
			toks = append(toks, tok)
		}
		clk.Advance(10 * time.Millisecond)
		for _, tok := range toks[:11] {
			tok.Success()
		}
		clk.Advance(time.Second)
		if drop {
			toks[11].Dropped()
		} else {
			toks[11].Success()
		}
	}
	window(false)
	window(false)
	window(true)
	// Output:
	// limit 20 -> 21 (drops 0)
	// limit 21 -> 22 (drops 0)
	// limit 22 -> 20 (drops 1)
}

// With a queue, Acquire waits for a slot (never past its context's
// deadline) instead of failing at once.
func ExampleWithQueue() {
	l, _ := adaptive.NewGate(must(adaptive.NewConstant(1)), adaptive.WithQueue(10, adaptive.FIFO))
	hold, _ := l.Acquire(context.Background())
	done := make(chan error)
	go func() {
		tok, err := l.Acquire(context.Background())
		tok.Success() // no-op on a nil token
		done <- err
	}()
	for l.Stats().Queued == 0 {
		runtime.Gosched()
	}
	fmt.Println("queued:", l.Stats().Queued)
	hold.Success() // the slot goes to the waiter
	fmt.Println("waiter:", <-done)
	// Output:
	// queued: 1
	// waiter: <nil>
}
