// Package bind lets store.Limiter decide through a store's own path for
// one algorithm, prepared once when the limiter is built, instead of
// through Store.Apply on every call: a store registers a Binder (memstore
// does, in its init), and store.NewLimiter asks the registered binders for
// a Func for its store and algorithm.
//
// A Func returns the decision's fields one by one, in registers: a
// floodgate.Decision (seven fields) returned by value goes through memory
// at each call boundary, where the processor cannot forward the fields'
// narrow stores to the wide loads of the copy (a stall measured at some
// 10 ns a decision on one hot key). A Func decides exactly what
// Store.Apply decides, and reports every error Apply would.
package bind

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/store/algo"
)

// Func decides a request of cost n on key: Apply's decision (its Fallback
// false), field by field, or Apply's error.
type Func func(ctx context.Context, key string, n int64) (allowed bool, limit, remaining int64, retryAfter, resetAfter, delay time.Duration, err error)

// Binder returns the Func deciding alg on store s, or nil when s is not
// its store or it has no path of its own for alg.
type Binder func(s any, alg algo.Algorithm) Func

var (
	mu      sync.Mutex
	binders []Binder
)

// Register adds a binder (at init).
func Register(b Binder) {
	mu.Lock()
	defer mu.Unlock()
	binders = append(binders, b)
}

// Find returns the first Func a registered binder gives for (s, alg), or
// nil.
func Find(s any, alg algo.Algorithm) Func {
	mu.Lock()
	defer mu.Unlock()
	for _, b := range binders {
		if f := b(s, alg); f != nil {
			return f
		}
	}
	return nil
}
