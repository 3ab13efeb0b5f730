package grpclimit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/middleware"
)

// TestQuotaFailureNamesTheRefusingLimit: a rate-limited refusal's
// QuotaFailure detail names the limit that refused, through a real server:
// the main limit under WithName, an added limit (WithLimit) under its own
// name, the limiter's own name without WithName, and none at all for a
// limit without a name; a dry run refuses nothing.
func TestQuotaFailureNamesTheRefusingLimit(t *testing.T) {
	// Per minute: nothing refills during a test, however slow the machine.
	type limit struct {
		name  string
		burst int64
	}
	cases := []struct {
		name  string
		main  limit
		extra []limit
		opts  []Option
		calls int      // admitted before the refusal
		want  []string // the refusal's QuotaFailure subjects
	}{
		{name: "own name", main: limit{"per-peer", 2}, calls: 2, want: []string{"policy:per-peer"}},
		{name: "WithName", main: limit{"per-peer", 2}, opts: []Option{WithName("front")}, calls: 2, want: []string{"policy:front"}},
		{name: "no name", main: limit{"", 2}, calls: 2, want: nil},
		{name: "WithLimit, the second refuses", main: limit{"per-peer", 10}, extra: []limit{{"per-token", 3}}, calls: 3, want: []string{"policy:per-token"}},
		{name: "WithLimit, the main refuses", main: limit{"per-peer", 2}, extra: []limit{{"per-token", 10}}, calls: 2, want: []string{"policy:per-peer"}},
		{name: "WithLimit, WithName, the second refuses", main: limit{"per-peer", 10}, extra: []limit{{"per-token", 3}}, opts: []Option{WithName("front")}, calls: 3, want: []string{"policy:per-token"}},
		{name: "WithLimit, the second has no name", main: limit{"per-peer", 10}, extra: []limit{{"", 3}}, calls: 3, want: nil},
		{name: "WithLimit, three, the third refuses", main: limit{"per-peer", 10}, extra: []limit{{"per-route", 8}, {"per-token", 4}}, calls: 4, want: []string{"policy:per-token"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			opts := append([]Option{}, c.opts...)
			for _, x := range c.extra {
				opts = append(opts, WithLimit(namedBucket(t, s, x.name, floodgate.PerMinute(1), x.burst), nil))
			}
			ic, err := New(namedBucket(t, s, c.main.name, floodgate.PerMinute(1), c.main.burst), opts...)
			require.NoError(t, err)
			conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream())})
			hc := healthpb.NewHealthClient(conn)
			ctx := testCtx(t)
			for i := range c.calls {
				_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
				require.NoError(t, err, "call %d", i)
			}
			_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			_, ok := RetryDelay(err)
			assert.True(t, ok, "RetryInfo, whatever the name")
			assert.Equal(t, c.want, quotaSubjects(err), "unary")

			// A stream opened now is refused the same way.
			w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			_, err = w.Recv()
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Equal(t, c.want, quotaSubjects(err), "stream")
		})
	}

	t.Run("dry run", func(t *testing.T) {
		ic, err := New(namedBucket(t, newStore(t), "per-peer", floodgate.PerMinute(1), 1), WithDryRun(true))
		require.NoError(t, err)
		conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
		hc := healthpb.NewHealthClient(conn)
		for range 3 {
			_, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
			require.NoError(t, err, "a dry run refuses nothing")
		}
	})
}

// TestQuotaFailureNamesTheDelayingLimit: under DelayRefuse, a call refused
// because one limit would delay it names that limit, even when another
// limit that admits it at once has fewer units left.
func TestQuotaFailureNamesTheDelayingLimit(t *testing.T) {
	s := newStore(t)
	// A leaky bucket in delay mode: the first call passes at once, the
	// next ones (up to the burst of 5) would be delayed about a minute.
	shaper, err := leaky.NewKeyed(s, leaky.Config{Name: "shaper", Rate: floodgate.PerMinute(1), Burst: 5})
	require.NoError(t, err)
	// A bucket with fewer units left than the shaper after the first call.
	tight := namedBucket(t, s, "tight", floodgate.PerMinute(1), 2)
	for _, order := range []string{"shaper first", "tight first"} {
		t.Run(order, func(t *testing.T) {
			main, extra := floodgate.Limiter(shaper), floodgate.Limiter(tight)
			if order == "tight first" {
				main, extra = tight, shaper
			}
			ic, err := New(main, WithLimit(extra, nil), WithDelayMode(middleware.DelayRefuse), WithKeyPrefix(order+":"))
			require.NoError(t, err)
			conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
			hc := healthpb.NewHealthClient(conn)
			ctx := testCtx(t)
			_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
			require.NoError(t, err, "the first call is within the rate")
			_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "the second would be delayed: refused")
			assert.Equal(t, []string{"policy:shaper"}, quotaSubjects(err), "the limit that would have delayed it")
		})
	}
}
