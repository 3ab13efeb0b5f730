package middleware_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/middleware"
)

// A concurrency limit of one, as an Acquirer that httplimit.Shed and
// grpclimit.Shed both take.
func ExampleAcquirerFunc() {
	var inFlight atomic.Int32
	one := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) {
		if inFlight.Add(1) > 1 {
			inFlight.Add(-1)
			return nil, false, nil // shed
		}
		return func(bool) { inFlight.Add(-1) }, true, nil
	})
	ctx := context.Background()
	release, ok, _ := one.Acquire(ctx)
	_, second, _ := one.Acquire(ctx)
	release(true)
	_, third, _ := one.Acquire(ctx)
	fmt.Println(ok, second, third)
	// Output: true false true
}
