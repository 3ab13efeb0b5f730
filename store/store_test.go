package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

// An algorithm is bound to a store with NewLimiter: the store keeps the
// state, the algorithm decides, and the limiter checks the cost.
func Example() {
	clock := &fixedClock{t: time.Unix(1_700_000_000, 0)}
	s, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	alg, err := bucket.Config{Rate: floodgate.PerMinute(60), Burst: 5}.Algorithm()
	if err != nil {
		panic(err)
	}
	lim, err := store.NewLimiter(s, alg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, _ := lim.Take(ctx, "user:42", 3)
	fmt.Printf("%s: take 3 -> allowed=%v remaining=%d\n", alg.Spec().Name, d.Allowed, d.Remaining)
	d, _ = lim.Take(ctx, "user:42", 3)
	fmt.Printf("take 3 -> allowed=%v retry-after=%v\n", d.Allowed, d.RetryAfter)
	_ = lim.Refund(ctx, "user:42", 3)
	d, _ = lim.Peek(ctx, "user:42")
	fmt.Printf("after a refund of 3: remaining=%d\n", d.Remaining)
	_, err = lim.Take(ctx, "user:42", 6)
	fmt.Println(errors.Is(err, floodgate.ErrCostExceedsCapacity), err)
	// Output:
	// token-bucket: take 3 -> allowed=true remaining=2
	// take 3 -> allowed=false retry-after=1s
	// after a refund of 3: remaining=5
	// true floodgate: invalid cost: cost exceeds the policy's capacity: cost 6 exceeds the capacity 5 of token-bucket
}

type badAlg struct {
	words    int
	capacity int64
}

func (a badAlg) Spec() algo.Spec { return algo.Spec{Name: "bad", Words: a.words, Capacity: a.capacity} }
func (a badAlg) Step(s algo.State, _ int64, _ int64) (algo.State, floodgate.Decision) {
	return s, floodgate.Decision{}
}

func TestNewLimiterValidates(t *testing.T) {
	s, err := memstore.New()
	require.NoError(t, err)
	defer s.Close()
	alg, err := bucket.Config{Rate: floodgate.PerSecond(1), Burst: 1}.Algorithm()
	require.NoError(t, err)

	_, err = store.NewLimiter(nil, alg)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = store.NewLimiter(s, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	var typedNil *memstore.Store
	_, err = store.NewLimiter(typedNil, alg)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "typed-nil store")
	_, err = store.NewLimiter(s, badAlg{words: 1, capacity: 0})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "capacity 0")
	for _, w := range []int{0, algo.MaxWords + 1} {
		_, err = store.NewLimiter(s, badAlg{words: w, capacity: 1})
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "words %d", w)
	}

	lim, err := store.NewLimiter(s, alg)
	require.NoError(t, err)
	assert.Same(t, store.Store(s), lim.Store())
	ctx := context.Background()
	for _, n := range []int{0, -1, 2, math.MaxInt} {
		_, err := lim.Take(ctx, "k", n)
		assert.ErrorIs(t, err, floodgate.ErrInvalidCost, "take %d", n)
		assert.ErrorIs(t, lim.Refund(ctx, "k", n), floodgate.ErrInvalidCost, "refund %d", n)
	}
}

func TestDurAndMicros(t *testing.T) {
	assert.Equal(t, time.Duration(0), micros.Dur(-5))
	assert.Equal(t, time.Duration(0), micros.Dur(0))
	assert.Equal(t, 1500*time.Microsecond, micros.Dur(1500))
	assert.Equal(t, time.Duration(math.MaxInt64), micros.Dur(math.MaxInt64), "saturates instead of overflowing")
	assert.Equal(t, int64(1_700_000_000_000_001), micros.Of(time.Unix(1_700_000_000, 1000)))
}
