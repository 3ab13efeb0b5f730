package floodgate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// A cost below 1 is ErrInvalidCost; a cost above the capacity is
// ErrCostExceedsCapacity, which wraps it. bucket.Limiter (x/time/rate's
// API) refuses a WaitN above its burst with ErrInvalidCost alone.
func ExampleErrInvalidCost() {
	st, _ := memstore.New()
	defer st.Close()
	lim, _ := bucket.NewKeyed(st, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 20})
	ctx := context.Background()
	for _, n := range []int{0, -1, 21} {
		_, err := lim.Take(ctx, "k", n)
		fmt.Println(n, errors.Is(err, floodgate.ErrInvalidCost), errors.Is(err, floodgate.ErrCostExceedsCapacity))
	}
	err := bucket.NewLimiter(10, 20).WaitN(ctx, 21)
	fmt.Println("WaitN", errors.Is(err, floodgate.ErrInvalidCost), errors.Is(err, floodgate.ErrCostExceedsCapacity))
	// Output:
	// 0 true false
	// -1 true false
	// 21 true true
	// WaitN true false
}
