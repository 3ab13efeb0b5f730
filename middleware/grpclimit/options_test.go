package grpclimit

import (
	"context"
	"github.com/floodgate-go/floodgate/middleware"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

var (
	nopAcquirer = middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { return nil, true, nil })
	nopKey      = KeyFunc(func(context.Context, string) string { return "" })
)

// TestNilAndTypedNilRefused: a nil or typed-nil limiter, acquirer, observer
// or extra limit is refused when the interceptors are built, instead of
// making every call fail open.
func TestNilAndTypedNilRefused(t *testing.T) {
	l := newBucket(t, floodgate.PerMinute(1), 1)
	for name, build := range map[string]func() error{
		"nil limiter":         func() error { _, err := New(nil); return err },
		"typed-nil limiter":   func() error { _, err := New((*store.Limiter)(nil)); return err },
		"nil limiter func":    func() error { _, err := New(floodgate.LimiterFunc(nil)); return err },
		"nil acquirer":        func() error { _, err := Shed(nil); return err },
		"nil acquirer func":   func() error { _, err := Shed(middleware.AcquirerFunc(nil)); return err },
		"typed-nil acquirer":  func() error { _, err := Shed((*ptrAcquirer)(nil)); return err },
		"nil observer":        func() error { _, err := New(l, WithObserver(nil)); return err },
		"typed-nil observer":  func() error { _, err := New(l, WithObserver((*events)(nil))); return err },
		"nil observer func":   func() error { _, err := Shed(nopAcquirer, WithObserver(floodgate.ObserverFunc(nil))); return err },
		"typed-nil extra":     func() error { _, err := New(l, WithLimit((*store.Limiter)(nil), nil)); return err },
		"nil extra":           func() error { _, err := New(l, WithLimit(nil, nopKey)); return err },
		"typed-nil lim+extra": func() error { _, err := New((*store.Limiter)(nil), WithLimit(l, nil)); return err },
	} {
		assert.ErrorIs(t, build(), floodgate.ErrInvalidConfig, name)
	}
}

// TestTypedNilLimiterNeverServes: what used to happen to a typed-nil
// limiter (every call failed open) cannot happen: there is no interceptor
// to register. A real server with a well-built one limits.
func TestTypedNilLimiterNeverServes(t *testing.T) {
	var lim *store.Limiter // e.g. a constructor's result whose error was dropped
	ic, err := New(lim, WithFailMode(middleware.FailOpen))
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	require.Nil(t, ic)

	ic, err = New(newBucket(t, floodgate.PerMinute(1), 1))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	_, err = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.Error(t, err)
}

type ptrAcquirer struct{ n int }

func (p *ptrAcquirer) Acquire(context.Context) (func(bool), bool, error) {
	p.n++ // a typed nil would panic here on every call
	return nil, true, nil
}

// TestOptionMask: each constructor takes the options of its family (an
// option given to another constructor does not compile: see
// middleware.TestOptionsAreCheckedByTheCompiler); a nil option is refused.
func TestOptionMask(t *testing.T) {
	l := newBucket(t, floodgate.PerMinute(1), 1)
	newOnly := map[string]Option{
		"WithHeaderKey": WithHeaderKey("x-token"),
		"WithKeySecret": WithKeySecret([]byte("0123456789abcdef")),
		"WithKeyFunc":   WithKeyFunc(nopKey),
		"WithKeyPrefix": WithKeyPrefix("p "),
		"WithIPPrefix":  WithIPPrefix(24, 48),
		"WithCost":      WithCost(func(context.Context, string) int { return 2 }),
		"WithLimit":     WithLimit(l, nil),
		"WithDelayMode": WithDelayMode(middleware.DelayRefuse),
	}
	shedOnly := map[string]ShedOption{
		"WithShedRetryAfter": WithShedRetryAfter(time.Second),
		"WithClassFunc":      WithClassFunc(HeaderClass("x-priority", "standard", "critical", "standard")),
	}
	both := map[string]CommonOption{
		"WithName":      WithName("n"),
		"WithTier":      WithTier("edge"),
		"WithRouteFunc": WithRouteFunc(func(string) string { return "r" }),
		"WithObserver":  WithObserver(&events{}),
		"WithFilter":    WithFilter(Methods(checkMethod)),
		"WithFailMode":  WithFailMode(middleware.FailClosed),
		"WithDryRun":    WithDryRun(true),
	}
	for name, o := range newOnly {
		_, err := New(l, o)
		assert.NoError(t, err, name)
	}
	for name, o := range shedOnly {
		_, err := Shed(nopAcquirer, o)
		assert.NoError(t, err, name)
	}
	for name, o := range both {
		_, err := New(l, o)
		assert.NoError(t, err, name)
		_, err = Shed(nopAcquirer, o)
		assert.NoError(t, err, name)
	}
	_, err := Shed(nopAcquirer, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "nil ShedOption")
	_, err = New(l, WithName("n"), nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "nil Option")
}

func TestDurationAndSecretRanges(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, 24*time.Hour + 1, 1 << 62} {
		_, err := Shed(nopAcquirer, WithShedRetryAfter(d))
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%v", d)
	}
	for _, d := range []time.Duration{1, time.Millisecond, 24 * time.Hour} {
		_, err := Shed(nopAcquirer, WithShedRetryAfter(d))
		assert.NoError(t, err, "%v", d)
	}
	l := newBucket(t, floodgate.PerMinute(1), 1)
	for _, s := range [][]byte{nil, {}, []byte("fifteen bytes!!")} {
		_, err := New(l, WithHeaderKey("x-token"), WithKeySecret(s))
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "secret of %d bytes", len(s))
	}
	_, err := New(l, WithKeySecret([]byte("sixteen bytes!!!")))
	assert.NoError(t, err)
	for _, m := range []middleware.DelayMode{2, 255} {
		_, err := New(l, WithDelayMode(m))
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
}

// TestKeySecretCopied: changing the caller's slice afterwards changes
// nothing.
func TestKeySecretCopied(t *testing.T) {
	secret := []byte("0123456789abcdef")
	c, err := buildConfig(true, []Option{WithHeaderKey("x-token"), WithKeySecret(secret)}, Option.applyNew)
	require.NoError(t, err)
	before := c.hasher.Key("token")
	secret[0] = 'X'
	assert.Equal(t, before, c.hasher.Key("token"))
	assert.Equal(t, oracleKey([]byte("0123456789abcdef"), "token"), before)
}

// FuzzOptions: whatever the values given to the options, building the
// interceptors never panics, and every refusal wraps ErrInvalidConfig; the
// range rules hold exactly.
func FuzzOptions(f *testing.F) {
	f.Add("n", "edge", "x-token", "p ", 32, 64, uint8(0), uint8(0), int64(time.Second), []byte("0123456789abcdef"), true)
	f.Add("", "", "grpc-timeout", "", 0, 129, uint8(7), uint8(9), int64(-1), []byte("short"), false)
	f.Add("x", "y", "A b", "\x00", 33, 0, uint8(1), uint8(1), int64(24*time.Hour+1), []byte(nil), true)
	l := newBucket(f, floodgate.PerMinute(1), 1)
	f.Fuzz(func(t *testing.T, name, tier, header, prefix string, v4, v6 int, fail, delay uint8, retry int64, secret []byte, dry bool) {
		newOpts := []Option{
			WithName(name), WithTier(tier), WithHeaderKey(header), WithKeySecret(secret), WithKeyPrefix(prefix),
			WithIPPrefix(v4, v6), WithFailMode(middleware.FailMode(fail)), WithDelayMode(middleware.DelayMode(delay)), WithDryRun(dry),
		}
		for i, o := range newOpts {
			_, err := New(l, o)
			if err != nil {
				require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "option %d", i)
			}
		}
		_, err := New(l, newOpts...)
		if err != nil {
			require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
		}
		d := time.Duration(retry)
		_, err = Shed(nopAcquirer, WithShedRetryAfter(d), WithName(name), WithFailMode(middleware.FailMode(fail)))
		if err != nil {
			require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
		}
		_, err = Shed(nopAcquirer, WithShedRetryAfter(d))
		require.Equal(t, d > 0 && d <= 24*time.Hour, err == nil, "retry %v: %v", d, err)
		_, err = New(l, WithKeySecret(secret))
		require.Equal(t, len(secret) >= minKeySecret, err == nil)
		_, err = New(l, WithIPPrefix(v4, v6))
		require.Equal(t, v4 >= 1 && v4 <= 32 && v6 >= 1 && v6 <= 128, err == nil)
	})
}
