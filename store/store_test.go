package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/leaky"
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

// manualClock is a clock the test moves.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newMemstore(t *testing.T, clk floodgate.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func tokenBucket(t *testing.T, s store.Store, burst int64) *store.Limiter {
	t.Helper()
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerMinute(1), Burst: burst})
	require.NoError(t, err)
	return l
}

func leakyBucket(t *testing.T, s store.Store) *store.Limiter {
	t.Helper()
	l, err := leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerMinute(30), Burst: 4, NoDelay: true})
	require.NoError(t, err)
	return l
}

func peek(t *testing.T, l *store.Limiter, key string) floodgate.Decision {
	t.Helper()
	d, err := l.Peek(context.Background(), key)
	require.NoError(t, err)
	return d
}

func TestTakeAllOnOneStore(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	s := newMemstore(t, clk)
	a, b := tokenBucket(t, s, 5), tokenBucket(t, s, 2)
	ctx := context.Background()
	checks := []floodgate.Check{{Limiter: a, Key: "ip", N: 2}, {Limiter: b, Key: "user", N: 1}}
	d, err := floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(3), checks[0].Decision.Remaining)
	assert.Equal(t, int64(1), checks[1].Decision.Remaining)
	assert.Equal(t, int64(1), d.Remaining, "the check with the fewest units left")

	checks = []floodgate.Check{{Limiter: a, Key: "ip", N: 2}, {Limiter: b, Key: "user", N: 2}}
	d, err = floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.True(t, checks[0].Decision.Allowed, "each check's Decision is its own")
	assert.False(t, checks[1].Decision.Allowed)
	assert.Equal(t, time.Minute, d.RetryAfter)
	assert.Equal(t, int64(3), peek(t, a, "ip").Remaining, "a refusal consumed nothing")
	assert.Equal(t, int64(1), peek(t, b, "user").Remaining)
}

// twoStores returns two memstores on one manual clock and, on them, a
// leaky bucket (on the first) and a token bucket (on the second).
func twoStores(t *testing.T) (clk *manualClock, s1, s2 *memstore.Store, lk, tb *store.Limiter) {
	t.Helper()
	clk = &manualClock{t: time.Unix(1_700_000_000, 0)}
	s1, s2 = newMemstore(t, clk), newMemstore(t, clk)
	return clk, s1, s2, leakyBucket(t, s1), tokenBucket(t, s2, 2)
}

// TestTakeAllAcrossStores: checks on two stores are evaluated on both
// before either commits, so that a refusal changes no state anywhere, bit
// for bit: the leaky bucket, stepped on odd milliseconds, decides exactly
// as its twin key, which no group touched.
func TestTakeAllAcrossStores(t *testing.T) {
	clk, _, _, lk, tb := twoStores(t)
	ctx := context.Background()
	for _, k := range []string{"g", "c"} {
		_, err := lk.Take(ctx, k, 1)
		require.NoError(t, err)
	}
	checks := []floodgate.Check{{Limiter: lk, Key: "g", N: 1}, {Limiter: tb, Key: "u", N: 2}}
	d, err := floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	require.True(t, d.Allowed, "%+v", checks)
	_, err = lk.Take(ctx, "c", 1)
	require.NoError(t, err)
	for round := range 3 {
		clk.advance(7 * time.Millisecond)
		checks := []floodgate.Check{{Limiter: lk, Key: "g", N: 1}, {Limiter: tb, Key: "u", N: 1}}
		d, err := floodgate.TakeAll(ctx, checks)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.True(t, checks[0].Decision.Allowed)
		assert.Equal(t, time.Minute-time.Duration(round+1)*7*time.Millisecond, d.RetryAfter, "the token bucket's")
		// Evaluation only, admitted or not: nothing changes either.
		handled, err := lk.TakeGroup(ctx, checks[:1], false)
		require.True(t, handled)
		require.NoError(t, err)
		assert.True(t, checks[0].Decision.Allowed)
	}
	for i := range 6 {
		assert.Equal(t, peek(t, lk, "c"), peek(t, lk, "g"), "peek %d", i)
		dc, err := lk.Take(ctx, "c", 1)
		require.NoError(t, err)
		dg, err := lk.Take(ctx, "g", 1)
		require.NoError(t, err)
		require.Equal(t, dc, dg, "take %d: the key the refused groups went through decides as its twin", i)
		clk.advance(3 * time.Millisecond)
	}
}

// interposer is a store whose ApplyAll calls hook first (hook sees commit
// and may return an error, which the call then returns).
type interposer struct {
	store.Store
	hook func(commit bool) error
}

func (p *interposer) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	if err := p.hook(commit); err != nil {
		return false, err
	}
	return p.Store.ApplyAll(ctx, ops, out, commit)
}

// TestTakeAllAcrossStoresRaceBetweenPhases: when a concurrent request takes
// the units between the evaluation and the commit, the commit on that store
// refuses, and what the earlier stores committed is refunded.
func TestTakeAllAcrossStoresRaceBetweenPhases(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	s1, s2 := newMemstore(t, clk), newMemstore(t, clk)
	a := tokenBucket(t, s1, 5)
	ctx := context.Background()
	var b *store.Limiter
	racer := &interposer{Store: s2}
	b = tokenBucket(t, racer, 1)
	racer.hook = func(commit bool) error {
		if commit {
			return nil
		}
		// After this evaluation, a request elsewhere takes b's last unit.
		racer.hook = func(bool) error { return nil }
		_, err := b.Take(ctx, "u", 1)
		return err
	}
	_, err := a.Take(ctx, "ip", 1)
	require.NoError(t, err)
	before := peek(t, a, "ip")

	checks := []floodgate.Check{{Limiter: a, Key: "ip", N: 2}, {Limiter: b, Key: "u", N: 1}}
	d, err := floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the second store's commit refused")
	assert.Equal(t, time.Minute, d.RetryAfter)
	assert.Equal(t, before, peek(t, a, "ip"), "the first store's commit was refunded")

	// A commit that fails is an error, and the first store is refunded too.
	failure := errors.New("store down")
	racer.hook = func(commit bool) error {
		if commit {
			return failure
		}
		return nil
	}
	clk.advance(time.Minute)
	before = peek(t, a, "ip")
	_, err = floodgate.TakeAll(ctx, checks)
	assert.ErrorIs(t, err, failure)
	assert.Equal(t, before, peek(t, a, "ip"), "the first store's commit was refunded")
}

// TestTakeGroupManyChecks: more checks than fit on the stack, over two
// stores and the same key twice.
func TestTakeGroupManyChecks(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	s1, s2 := newMemstore(t, clk), newMemstore(t, clk)
	a, b := tokenBucket(t, s1, 20), tokenBucket(t, s2, 20)
	var checks []floodgate.Check
	for i := range 12 {
		l := a
		if i%2 == 1 {
			l = b
		}
		checks = append(checks, floodgate.Check{Limiter: l, Key: fmt.Sprint("k", i%5), N: 1})
	}
	d, err := floodgate.TakeAll(context.Background(), checks)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// k0 appears at i = 0, 5, 10: twice on a (0, 10), once on b (5).
	assert.Equal(t, int64(18), peek(t, a, "k0").Remaining)
	assert.Equal(t, int64(19), peek(t, b, "k0").Remaining)
	assert.Equal(t, int64(18), checks[10].Decision.Remaining, "the second op on one key steps after the first")
}

// TestTakeGroupCostErrors: a cost that can never fit is
// ErrCostExceedsCapacity (which wraps ErrInvalidCost), a cost below 1 is
// ErrInvalidCost alone, on one store and across two, and nothing changes.
func TestTakeGroupCostErrors(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	s1, s2 := newMemstore(t, clk), newMemstore(t, clk)
	a, b, other := tokenBucket(t, s1, 5), tokenBucket(t, s1, 3), tokenBucket(t, s2, 3)
	ctx := context.Background()
	for _, second := range []*store.Limiter{b, other} {
		for _, c := range []struct {
			n       int
			exceeds bool
		}{{4, true}, {1 << 40, true}, {0, false}, {-1, false}} {
			checks := []floodgate.Check{{Limiter: a, Key: "k", N: 1}, {Limiter: second, Key: "k", N: c.n}}
			d, err := floodgate.TakeAll(ctx, checks)
			assert.ErrorIs(t, err, floodgate.ErrInvalidCost, "cost %d", c.n)
			assert.Equal(t, c.exceeds, errors.Is(err, floodgate.ErrCostExceedsCapacity), "cost %d: %v", c.n, err)
			assert.Equal(t, floodgate.Decision{}, d)
			handled, err := a.TakeGroup(ctx, checks, false)
			assert.True(t, handled)
			assert.ErrorIs(t, err, floodgate.ErrInvalidCost)
		}
	}
	assert.Equal(t, int64(5), peek(t, a, "k").Remaining)
	_, err := a.Take(ctx, "k", 6)
	assert.ErrorIs(t, err, floodgate.ErrCostExceedsCapacity)
	assert.ErrorContains(t, err, "capacity 5")
	err = a.Refund(ctx, "k", 6)
	assert.ErrorIs(t, err, floodgate.ErrCostExceedsCapacity)
	_, err = a.Take(ctx, "k", 0)
	assert.ErrorIs(t, err, floodgate.ErrInvalidCost)
	assert.NotErrorIs(t, err, floodgate.ErrCostExceedsCapacity)
}

// TestTakeGroupDeclinesOtherLimiters: a group with a limiter of another
// kind is not a store group: TakeGroup declines it, having done nothing,
// and TakeAll takes each check (refunding on a refusal).
func TestTakeGroupDeclinesOtherLimiters(t *testing.T) {
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	a := tokenBucket(t, newMemstore(t, clk), 5)
	ctx := context.Background()
	deny := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{Limit: 1, RetryAfter: time.Second}, nil
	})
	checks := []floodgate.Check{{Limiter: a, Key: "k", N: 2}, {Limiter: deny, Key: "k", N: 1}}
	handled, err := a.TakeGroup(ctx, checks, true)
	assert.False(t, handled)
	assert.NoError(t, err)
	assert.Equal(t, int64(5), peek(t, a, "k").Remaining)
	d, err := floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, int64(5), peek(t, a, "k").Remaining, "taken then refunded")
}
