package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func clockedStore(t *testing.T) (*memstore.Store, *storetest.Clock) {
	t.Helper()
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0)) // on a 10 s boundary
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, clk
}

// A refusal carries the largest RetryAfter among every limiter that refuses,
// and a client that waits exactly that long is admitted.
func TestAllRetryAfterIsTheLargest(t *testing.T) {
	ctx := context.Background()
	s, clk := clockedStore(t)
	perTwo, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.Rate{N: 1, Per: 2 * time.Second}, Burst: 1})
	require.NoError(t, err)
	win := window.Config{Name: "win", Limit: 5, Window: 10 * time.Second}
	perTen, err := window.NewFixed(s, win)
	require.NoError(t, err)
	both, err := floodgate.All(perTwo, perTen)
	require.NoError(t, err)

	// Four units of the window spent elsewhere (the same named limit).
	direct, err := window.NewFixed(s, win)
	require.NoError(t, err)
	d, err := direct.Take(ctx, "k", 4)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	clk.Advance(4 * time.Second)
	d, err = both.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	clk.Advance(time.Millisecond)
	d, err = both.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	// The bucket alone would say 1.999 s; the window says 5.999 s.
	assert.Equal(t, 6*time.Second-time.Millisecond, d.RetryAfter)

	checks := []floodgate.Check{{Limiter: perTwo, Key: "k", N: 1}, {Limiter: perTen, Key: "k", N: 1}}
	d, err = floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.False(t, checks[0].Decision.Allowed, "the bucket refuses too")
	assert.False(t, checks[1].Decision.Allowed, "the window refuses")
	assert.Equal(t, 2*time.Second-time.Millisecond, checks[0].Decision.RetryAfter)
	assert.Equal(t, d.RetryAfter, checks[1].Decision.RetryAfter)

	clk.Advance(d.RetryAfter - time.Microsecond)
	d2, err := both.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d2.Allowed, "a microsecond early is still refused")
	clk.Advance(time.Microsecond)
	d2, err = both.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d2.Allowed, "waiting exactly RetryAfter is admitted")
}

// A refusal inside All leaves every limiter exactly as it was: nginx's
// arithmetic on a leaky bucket whose rate is not a whole number per second
// keeps its fractions (take-then-refund would lose them).
func TestAllRefusalLeavesStateExact(t *testing.T) {
	ctx := context.Background()
	for _, order := range []string{"slow-first", "fast-first"} {
		t.Run(order, func(t *testing.T) {
			s, clk := clockedStore(t)
			ref, refClk := clockedStore(t)
			slowCfg := leaky.Config{Name: "slow", Rate: floodgate.PerMinute(30), Burst: 100, NoDelay: true}
			fastCfg := leaky.Config{Name: "fast", Rate: floodgate.PerSecond(10), NoDelay: true}
			slow, err := leaky.NewKeyed(s, slowCfg)
			require.NoError(t, err)
			fast, err := leaky.NewKeyed(s, fastCfg)
			require.NoError(t, err)
			// The references see only the admitted requests.
			slowRef, err := leaky.NewKeyed(ref, slowCfg)
			require.NoError(t, err)
			fastRef, err := leaky.NewKeyed(ref, fastCfg)
			require.NoError(t, err)
			ls := []floodgate.Limiter{slow, fast}
			if order == "fast-first" {
				ls = []floodgate.Limiter{fast, slow}
			}
			both, err := floodgate.All(ls...)
			require.NoError(t, err)

			admitted := 0
			for ms := 0; ms < 30_000; ms++ {
				d, err := both.Take(ctx, "k", 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
					for _, l := range []*store.Limiter{slowRef, fastRef} {
						rd, err := l.Take(ctx, "k", 1)
						require.NoError(t, err)
						require.True(t, rd.Allowed, "at %d ms", ms)
					}
				}
				for _, pair := range [][2]*store.Limiter{{slow, slowRef}, {fast, fastRef}} {
					got, err := pair[0].Peek(ctx, "k")
					require.NoError(t, err)
					want, err := pair[1].Peek(ctx, "k")
					require.NoError(t, err)
					require.Equal(t, want, got, "state of %s at %d ms", pair[0].Name(), ms)
				}
				clk.Advance(time.Millisecond)
				refClk.Advance(time.Millisecond)
			}
			// nginx (two limit_req on one location) admits 115.
			assert.Equal(t, 115, admitted)
		})
	}
}

// TakeAll is all or nothing across keys: per IP and per API key.
func TestTakeAllAcrossKeys(t *testing.T) {
	ctx := context.Background()
	s, _ := clockedStore(t)
	perIP, err := bucket.NewKeyed(s, bucket.Config{Name: "ip", Rate: floodgate.PerMinute(1), Burst: 3})
	require.NoError(t, err)
	perKey, err := bucket.NewKeyed(s, bucket.Config{Name: "apikey", Rate: floodgate.PerMinute(1), Burst: 2})
	require.NoError(t, err)
	take := func(ip, key string) bool {
		d, err := floodgate.TakeAll(ctx, []floodgate.Check{{Limiter: perIP, Key: ip, N: 1}, {Limiter: perKey, Key: key, N: 1}})
		require.NoError(t, err)
		return d.Allowed
	}
	assert.True(t, take("10.0.0.1", "a"))
	assert.True(t, take("10.0.0.1", "a"))
	assert.False(t, take("10.0.0.1", "a"), "key a is out")
	assert.True(t, take("10.0.0.1", "b"), "the refusal above charged nothing to the IP")
	assert.False(t, take("10.0.0.1", "c"), "the IP is out")
	d, err := perKey.Peek(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Remaining, "the refusal charged nothing to key c")
}

// Two limiters built from one Config share no state unless they share a
// Name.
func TestLimitersShareStateOnlyByName(t *testing.T) {
	ctx := context.Background()
	s, _ := clockedStore(t)
	cfg := bucket.Config{Rate: floodgate.PerMinute(1), Burst: 5}
	a, err := bucket.NewKeyed(s, cfg)
	require.NoError(t, err)
	b, err := bucket.NewKeyed(s, cfg)
	require.NoError(t, err)
	d, err := a.Take(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = b.Take(ctx, "k", 5)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "an unnamed twin has its own state")

	cfg.Name = "shared"
	c, err := bucket.NewKeyed(s, cfg)
	require.NoError(t, err)
	cfg.Burst = 6 // a change of parameters keeps the identity
	e, err := bucket.NewKeyed(s, cfg)
	require.NoError(t, err)
	d, err = c.Take(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = e.Take(ctx, "k", 5)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the same Name is the same limit")
}

func TestTakeAllBadInput(t *testing.T) {
	ctx := context.Background()
	_, err := floodgate.TakeAll(ctx, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	var typedNil *store.Limiter
	_, err = floodgate.TakeAll(ctx, []floodgate.Check{{Limiter: typedNil, Key: "k", N: 1}})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = floodgate.All(typedNil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	s, _ := clockedStore(t)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 2})
	require.NoError(t, err)
	_, err = floodgate.TakeAll(ctx, []floodgate.Check{{Limiter: l, Key: "k", N: 3}})
	assert.ErrorIs(t, err, floodgate.ErrCostExceedsCapacity)
	assert.ErrorIs(t, err, floodgate.ErrInvalidCost)
}

// All over the store's limiters decides without allocating.
func TestAllDoesNotAllocate(t *testing.T) {
	s, _ := clockedStore(t)
	a, err := bucket.NewKeyed(s, bucket.Config{Name: "a", Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	require.NoError(t, err)
	b, err := bucket.NewKeyed(s, bucket.Config{Name: "b", Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	require.NoError(t, err)
	both, err := floodgate.All(a, b)
	require.NoError(t, err)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _, _ = both.Take(ctx, "k", 1) }); n != 0 {
		t.Fatalf("All.Take allocates %v times", n)
	}
}
