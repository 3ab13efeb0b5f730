package leaky_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/storetest"
)

func newKeyed(t *testing.T, c leaky.Config) (*store.Limiter, *storetest.Clock) {
	t.Helper()
	clk := storetest.NewClock(time.UnixMicro(t0))
	k, err := leaky.NewKeyed(newMemstore(t, clk), c)
	require.NoError(t, err)
	return k, clk
}

// dryRun is what a transport in dry-run mode (limit_req_dry_run on) does
// with the limiter's decision: it admits the request at once.
func dryRun(d floodgate.Decision) floodgate.Decision {
	d.Allowed, d.RetryAfter, d.Delay = true, 0, 0
	return d
}

// Dry run is the transports' job: the limiter decides as when enforcing, a
// dry run admits everything (nginx's DELAYED_DRY_RUN and REJECTED_DRY_RUN
// are the enforcing verdicts, admitted), and the key's state goes through
// exactly the sequence it goes through when enforcing (a would-be rejection
// charges nothing, a would-be delay charges like a delay).
func TestDryRunStatuses(t *testing.T) {
	ctx := context.Background()
	c := leaky.Config{Rate: floodgate.PerSecond(1), Burst: 1}
	enforcing, clkE := newKeyed(t, c)
	shadow, clkD := newKeyed(t, c)

	script := []struct {
		advance          time.Duration
		allowed, delayed bool // PASSED, DELAYED or REJECTED
	}{
		{0, true, false},
		{0, true, true},
		{0, false, false},
		{0, false, false},
		{999 * time.Millisecond, false, false},
		{time.Millisecond, true, true},
		{3 * time.Second, true, false},
	}
	for i, st := range script {
		clkE.Advance(st.advance)
		clkD.Advance(st.advance)
		e, err := enforcing.Take(ctx, "k", 1)
		require.NoError(t, err)
		v, err := shadow.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, st.allowed, e.Allowed, "step %d", i)
		require.Equal(t, st.delayed, e.Delay > 0, "step %d", i)
		// The dry-run limiter reached the enforcing verdict...
		require.Equal(t, e, v, "step %d", i)
		// ... while the transport admitted the request at once.
		d := dryRun(v)
		require.True(t, d.Allowed, "step %d", i)
		checkInvariants(t, d)
		// Same state after every step.
		pe, err := enforcing.Peek(ctx, "k")
		require.NoError(t, err)
		pd, err := shadow.Peek(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, pe, pd, "step %d: the dry-run state left the enforcing one", i)
	}
}

// Two nginx limits on one request through floodgate.All: admitted only if
// both admit, with the larger delay; when the second rejects, the first is
// refunded exactly.
func TestAllCombinesLimits(t *testing.T) {
	ctx := context.Background()
	clk := storetest.NewClock(time.UnixMicro(t0))
	s := newMemstore(t, clk)
	perSec, err := leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerSecond(2), Burst: 3})
	require.NoError(t, err)
	perMin, err := leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerMinute(1), Burst: 1, NoDelay: true})
	require.NoError(t, err)
	both, err := floodgate.All(perSec, perMin)
	require.NoError(t, err)

	d, err := both.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, floodgate.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 62500 * time.Millisecond}, d)
	d, err = both.Take(ctx, "k", 1)
	require.NoError(t, err)
	// perSec delays by 500 ms; perMin has no room left.
	require.Equal(t, floodgate.Decision{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 125 * time.Second, Delay: 500 * time.Millisecond}, d)

	before, err := perSec.Peek(ctx, "k")
	require.NoError(t, err)
	for range 5 {
		d, err = both.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 62500*time.Millisecond, d.RetryAfter)
		require.Zero(t, d.Delay)
		after, err := perSec.Peek(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, before, after, "perSec charged for a rejected request")
	}
	// Once idle, a refund leaves perSec full, never beyond.
	clk.Advance(62500 * time.Millisecond)
	require.NoError(t, perSec.Refund(ctx, "k", 1))
	r, err := perSec.Peek(ctx, "k")
	require.NoError(t, err)
	require.EqualValues(t, 4, r.Remaining)
}

func TestInvalidCost(t *testing.T) {
	ctx := context.Background()
	k, _ := newKeyed(t, leaky.Config{Rate: floodgate.PerSecond(1), Burst: 4})
	for _, n := range []int{0, -1, 6, math.MaxInt} {
		_, err := k.Take(ctx, "k", n)
		require.ErrorIs(t, err, floodgate.ErrInvalidCost, "n=%d", n)
		require.ErrorIs(t, k.Refund(ctx, "k", n), floodgate.ErrInvalidCost, "n=%d", n)
	}
	d, err := k.Take(ctx, "k", 5) // Capacity() is the largest cost
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 4*time.Second, d.Delay)
}

func TestValidate(t *testing.T) {
	bad := map[string]leaky.Config{
		"zero":           {},
		"zero rate":      {Rate: floodgate.Rate{N: 0, Per: time.Second}},
		"negative rate":  {Rate: floodgate.Rate{N: -1, Per: time.Second}},
		"negative per":   {Rate: floodgate.Rate{N: 1, Per: -time.Second}},
		"below 0.001r/s": {Rate: floodgate.PerHour(3)},
		"above 1e6r/s":   {Rate: floodgate.PerSecond(1_000_001)},
		"overflowing":    {Rate: floodgate.Rate{N: math.MaxInt64, Per: time.Nanosecond}},
		"negative burst": {Rate: floodgate.PerSecond(1), Burst: -1},
		"huge burst":     {Rate: floodgate.PerSecond(1), Burst: math.MaxInt64},
		"negative delay": {Rate: floodgate.PerSecond(1), Burst: 2, Delay: -1},
		"delay > burst":  {Rate: floodgate.PerSecond(1), Burst: 2, Delay: 3},
		"both":           {Rate: floodgate.PerSecond(1), Burst: 2, Delay: 1, NoDelay: true},
		"slow drain":     {Rate: floodgate.Rate{N: 1, Per: 1000 * time.Second}, Burst: 2_000_000},
	}
	for name, c := range bad {
		err := validate(c)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
		_, err = leaky.NewKeyed(newMapStore(t0), c)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
		_, err = c.Algorithm()
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
	_, err := leaky.NewKeyed(nil, leaky.Config{Rate: floodgate.PerSecond(1)})
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)

	good := []leaky.Config{
		{Rate: floodgate.PerSecond(1)},
		{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000_000},
		{Rate: floodgate.Rate{N: 1, Per: 1000 * time.Second}, Burst: 1_000_000},
		{Rate: floodgate.PerMinute(1), Burst: 5, Delay: 5},
	}
	for _, c := range good {
		require.NoError(t, validate(c), "%+v", c)
	}
}

func TestParseRate(t *testing.T) {
	for s, want := range map[string]floodgate.Rate{
		"10r/s": floodgate.PerSecond(10),
		"30r/m": floodgate.PerMinute(30),
		"5":     floodgate.PerSecond(5),
	} {
		got, err := leaky.ParseRate(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "r/s", "0r/s", "-1r/m", "10r/h", "1.5r/s", "ten"} {
		_, err := leaky.ParseRate(s)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, s)
	}
}

func TestKeyedErrorsPassThrough(t *testing.T) {
	k, _ := newKeyed(t, leaky.Config{Rate: floodgate.PerSecond(1)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := k.Take(ctx, "k", 1)
	require.True(t, errors.Is(err, context.Canceled))
	require.Equal(t, floodgate.Decision{}, d)
}

func TestParseNginx(t *testing.T) {
	for params, want := range map[string]leaky.Config{
		"zone=ip":                      {Rate: floodgate.PerSecond(10)},
		"zone=ip burst=20 nodelay":     {Rate: floodgate.PerSecond(10), Burst: 20, NoDelay: true},
		" zone=ip  burst=12 delay=8; ": {Rate: floodgate.PerSecond(10), Burst: 12, Delay: 8},
		"burst=5":                      {Rate: floodgate.PerSecond(10), Burst: 5},
		"zone=z burst=5 delay=5":       {Rate: floodgate.PerSecond(10), Burst: 5, Delay: 5},
		"zone=z nodelay burst=3":       {Rate: floodgate.PerSecond(10), Burst: 3, NoDelay: true},
	} {
		got, err := leaky.ParseNginx("10r/s", params)
		require.NoError(t, err, params)
		require.Equal(t, want, got, params)
	}
	for _, params := range []string{"burst=0", "burst=-1", "burst=x", "delay=0", "burst=2 delay=3", "burst=2 delay=1 nodelay", "nodelay=1", "zone", "foo=bar", "burst"} {
		_, err := leaky.ParseNginx("10r/s", params)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, params)
	}
	_, err := leaky.ParseNginx("10r/h", "burst=1")
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}
