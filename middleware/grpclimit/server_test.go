package grpclimit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"github.com/floodgate-go/floodgate/middleware"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/priority"
	"github.com/floodgate-go/floodgate/store"
)

const checkMethod = "/grpc.health.v1.Health/Check"

func pushbackOf(t *testing.T, md metadata.MD) time.Duration {
	t.Helper()
	v := md.Get(pushbackTrailer)
	require.Len(t, v, 1, "exactly one %s trailer", pushbackTrailer)
	ms, err := strconv.ParseInt(v[0], 10, 64)
	require.NoError(t, err)
	require.Positive(t, ms)
	return time.Duration(ms) * time.Millisecond
}

// quotaSubjects returns the subjects of err's google.rpc.QuotaFailure
// details.
func quotaSubjects(err error) []string {
	var subjects []string
	for _, det := range status.Convert(err).Details() {
		if qf, ok := det.(*errdetails.QuotaFailure); ok {
			for _, v := range qf.GetViolations() {
				subjects = append(subjects, v.GetSubject())
			}
		}
	}
	return subjects
}

func TestUnaryResourceExhaustedAfterBurst(t *testing.T) {
	// One token a minute: nothing refills during the test, however slow
	// the machine.
	rec := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 5)}
	obs := &events{}
	ic, err := New(rec, WithName("per-peer"), WithTier("edge"), WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)

	for i := range 5 {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "call %d within the burst", i)
	}
	var trailer metadata.MD
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, msgRateLimited, st.Message(), "fixed message, no key or internal text")
	assert.NotContains(t, st.Message(), "127.0.0.1")

	ra, ok := RetryDelay(err)
	require.True(t, ok, "RetryInfo detail present")
	assert.Equal(t, []string{"policy:per-peer"}, quotaSubjects(err), "the QuotaFailure detail names the refusing policy")
	takes := rec.all()
	require.Len(t, takes, 6)
	denied := takes[5].decision
	require.False(t, denied.Allowed)
	assert.Equal(t, denied.RetryAfter, ra, "RetryInfo is the decision's RetryAfter")
	assert.Greater(t, ra, 50*time.Second)
	pb := pushbackOf(t, trailer)
	assert.GreaterOrEqual(t, pb, ra, "pushback rounds up, never early")
	assert.Less(t, pb-ra, time.Millisecond)

	for _, tk := range takes {
		assert.Equal(t, "127.0.0.1", tk.key, "default key is the peer IP without port")
		assert.Equal(t, 1, tk.n)
	}
	evs := obs.all()
	require.Len(t, evs, 6)
	for i, ev := range evs {
		want := floodgate.OutcomeAllowed
		if i == 5 {
			want = floodgate.OutcomeDenied
		}
		assert.Equal(t, want, ev.Outcome, "event %d", i)
		assert.Equal(t, "per-peer", ev.Policy)
		assert.Equal(t, "edge", ev.Tier)
		assert.Equal(t, checkMethod, ev.Route)
		assert.Positive(t, ev.Latency)
		assert.Equal(t, takes[i].decision, ev.Decision)
	}
}

// TestClientRetryPolicyWaitsForPushback runs gRPC's own retry (service config
// retryPolicy) against the interceptor and measures, on the server, that the
// retry came no earlier than the pushback the refusal carried.
func TestClientRetryPolicyWaitsForPushback(t *testing.T) {
	// Burst 1 at 2/s: a call right after the bucket is drained is refused
	// with a pushback of up to 500ms.
	bucket := newBucket(t, floodgate.PerSecond(2), 1)
	rec := &recLimiter{l: bucket}
	ic, err := New(rec)
	require.NoError(t, err)
	const svcConfig = `{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],
	  "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s",
	  "backoffMultiplier":1,"retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())},
		grpc.WithDefaultServiceConfig(svcConfig))
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{}) // connect
	require.NoError(t, err)

	first, retry := refusedThenRetried(t, bucket, rec, func() error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	assertWaitedPushback(t, first, retry)
}

func TestStreamResourceExhausted(t *testing.T) {
	ic, err := New(newBucket(t, floodgate.PerMinute(1), 1))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.StreamInterceptor(ic.Stream())})
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)

	wctx, cancel := context.WithCancel(ctx)
	w1, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	resp, err := w1.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	cancel()

	w2, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w2.Recv()
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, msgRateLimited, st.Message())
	ra, ok := RetryDelay(err)
	require.True(t, ok)
	pb := pushbackOf(t, w2.Trailer())
	assert.GreaterOrEqual(t, pb, ra)
}

func TestFailModes(t *testing.T) {
	const secret = "dial tcp 10.9.8.7:6379: connection refused (password=hunter2)"
	limiters := map[string]floodgate.Limiter{
		"error": floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
			return floodgate.Decision{}, errors.New(secret)
		}),
		"panic": floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
			panic(secret)
		}),
	}
	for name, l := range limiters {
		for _, mode := range []middleware.FailMode{middleware.FailOpen, middleware.FailClosed} {
			t.Run(name+"/"+map[middleware.FailMode]string{middleware.FailOpen: "open", middleware.FailClosed: "closed"}[mode], func(t *testing.T) {
				obs := &events{}
				ic, err := New(l, WithFailMode(mode), WithObserver(obs))
				require.NoError(t, err)
				conn, _ := serve(t, []grpc.ServerOption{
					grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()),
				})
				hc := healthpb.NewHealthClient(conn)
				ctx := testCtx(t)
				// Several calls: the server survives every one of them.
				for range 3 {
					var trailer metadata.MD
					_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
					if mode == middleware.FailOpen {
						require.NoError(t, err)
						continue
					}
					st := status.Convert(err)
					require.Equal(t, codes.Unavailable, st.Code())
					assert.Equal(t, msgLimiterUnavailable, st.Message())
					assert.NotContains(t, st.Message(), "hunter2")
					for _, d := range st.Details() {
						assert.NotContains(t, strings.ToLower(fmtAny(d)), "hunter2")
					}
					ra, ok := RetryDelay(err)
					require.True(t, ok)
					assert.Equal(t, time.Second, ra)
					assert.Equal(t, time.Second, pushbackOf(t, trailer))
				}
				w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
				require.NoError(t, err)
				_, err = w.Recv()
				if mode == middleware.FailOpen {
					require.NoError(t, err)
				} else {
					require.Equal(t, codes.Unavailable, status.Code(err))
				}
				want := floodgate.OutcomeErrorOpen
				if mode == middleware.FailClosed {
					want = floodgate.OutcomeErrorClosed
				}
				assert.Equal(t, 4, obs.count(want))
				for _, ev := range obs.all() {
					require.Error(t, ev.Err, "the observer gets the cause")
					assert.Contains(t, ev.Err.Error(), "hunter2")
				}
			})
		}
	}
}

func fmtAny(v any) string {
	if s, ok := v.(interface{ String() string }); ok {
		return s.String()
	}
	return ""
}

func TestHeaderKeys(t *testing.T) {
	rec := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 2)}
	secret := []byte("0123456789abcdef-test-secret")
	ic, err := New(rec, WithHeaderKey("X-Service-Token"), WithKeySecret(secret))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)

	call := func(token string) codes.Code {
		c := ctx
		if token != "" {
			c = metadata.AppendToOutgoingContext(ctx, "x-service-token", token)
		}
		_, err := hc.Check(c, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	// Token A spends its own budget.
	assert.Equal(t, codes.OK, call("token-a"))
	assert.Equal(t, codes.OK, call("token-a"))
	assert.Equal(t, codes.ResourceExhausted, call("token-a"))
	// Token B is untouched.
	assert.Equal(t, codes.OK, call("token-b"))
	// No token: the peer's budget, separate from every token's.
	assert.Equal(t, codes.OK, call(""))
	assert.Equal(t, codes.OK, call(""))
	assert.Equal(t, codes.ResourceExhausted, call(""))
	// A token spelling the peer's address does not reach the peer's budget
	// (which is spent) nor anyone's: it lives in the metadata namespace.
	assert.Equal(t, codes.OK, call("127.0.0.1"))

	keys := map[string]int{}
	for _, tk := range rec.all() {
		keys[tk.key]++
		assert.NotContains(t, tk.key, "token", "the limiter never sees a credential")
	}
	h := newKeyHasher(secret)
	assert.Equal(t, map[string]int{
		h.Key("token-a"): 3, h.Key("token-b"): 1, "127.0.0.1": 3, h.Key("127.0.0.1"): 1,
	}, keys)
}

func TestKeysHostileAndIPv6(t *testing.T) {
	c, err := buildConfig(true, []Option{WithHeaderKey("x-token")}, Option.applyNew)
	require.NoError(t, err)
	hostile := []string{strings.Repeat("A", 64<<10), "a\x00b", "a\r\nb", "sp ace", "é", "plain"}
	seen := map[string]bool{}
	for _, v := range hostile {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-token", v))
		k := c.key(ctx, checkMethod)
		assert.True(t, strings.HasPrefix(k, "md#"), "value %q is digested", v[:min(len(v), 8)])
		assert.Len(t, k, keyLen)
		assert.False(t, seen[k], "digests stay distinct")
		seen[k] = true
	}

	v6 := peerCtx(t, "[2001:db8:1:2:3:4:5:6]:443")
	assert.Equal(t, "2001:db8:1:2::/64", c.key(v6, checkMethod))
	mapped := peerCtx(t, "[::ffff:192.0.2.7]:1")
	assert.Equal(t, "192.0.2.7", c.key(mapped, checkMethod), "IPv4-mapped addresses are unmapped")
	assert.Equal(t, unknownPeer, c.key(context.Background(), checkMethod))

	c2, err := buildConfig(true, []Option{WithIPPrefix(24, 48)}, Option.applyNew)
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.0/24", c2.key(peerCtx(t, "192.0.2.99:5"), checkMethod))
	assert.Equal(t, "2001:db8:1::/48", c2.key(v6, checkMethod))

	c3, err := buildConfig(true, []Option{WithKeyPrefix("search "), WithHeaderKey("x-token")}, Option.applyNew)
	require.NoError(t, err)
	assert.Equal(t, "search 192.0.2.99", c3.key(peerCtx(t, "192.0.2.99:5"), checkMethod))
	md := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-token", "t1"))
	assert.Equal(t, "search "+processHasher().Key("t1"), c3.key(md, checkMethod))
}

func TestOptionsValidation(t *testing.T) {
	l := newBucket(t, floodgate.PerSecond(1), 1)
	bad := map[string][]Option{
		"two key sources":   {WithHeaderKey("a"), WithKeyFunc(func(context.Context, string) string { return "" })},
		"reserved md":       {WithHeaderKey("grpc-timeout")},
		"bad md name":       {WithHeaderKey("a b")},
		"empty md name":     {WithHeaderKey("")},
		"nil observer":      {WithObserver(nil)},
		"nil key func":      {WithKeyFunc(nil)},
		"nil cost":          {WithCost(nil)},
		"nil route":         {WithRouteFunc(nil)},
		"nil filter":        {WithFilter(nil)},
		"fail mode":         {WithFailMode(7)},
		"envoy's fail mode": {WithFailMode(middleware.FailError)},
		"prefix":            {WithIPPrefix(0, 64)},
		"empty name":        {WithName("")},
		"nil option":        {nil},
	}
	for name, opts := range bad {
		_, err := New(l, opts...)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
	_, err := Shed(nopAcquirer, WithShedRetryAfter(0))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "shed retry")
	_, err = New(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = Shed(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

// TestDryRunCountsLikeEnforcement sends the same calls to an enforcing and a
// shadow interceptor: the shadow one lets everything through and reports a
// would-deny for exactly each call the enforcing one refused.
func TestDryRunCountsLikeEnforcement(t *testing.T) {
	const calls = 12
	run := func(dry bool) (*events, int) {
		obs := &events{}
		ic, err := New(newBucket(t, floodgate.PerMinute(1), 4), WithDryRun(dry), WithObserver(obs))
		require.NoError(t, err)
		conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
		hc := healthpb.NewHealthClient(conn)
		failures := 0
		for range calls {
			if _, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{}); err != nil {
				require.Equal(t, codes.ResourceExhausted, status.Code(err))
				failures++
			}
		}
		return obs, failures
	}
	enforced, refused := run(false)
	shadow, shadowFailures := run(true)
	assert.Equal(t, calls-4, refused)
	assert.Zero(t, shadowFailures, "dry-run never refuses")
	assert.Equal(t, refused, enforced.count(floodgate.OutcomeDenied))
	assert.Equal(t, refused, shadow.count(floodgate.OutcomeWouldDeny))
	assert.Zero(t, shadow.count(floodgate.OutcomeDenied))
	assert.Equal(t, 4, shadow.count(floodgate.OutcomeAllowed))
}

func TestShedder(t *testing.T) {
	var inFlight, releasedOK, releasedFail atomic.Int64
	acq := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) {
		if inFlight.Add(1) > 1 {
			inFlight.Add(-1)
			return nil, false, nil
		}
		return func(ok bool) {
			inFlight.Add(-1)
			if ok {
				releasedOK.Add(1)
			} else {
				releasedFail.Add(1)
			}
		}, true, nil
	})
	obs := &events{}
	hc, ctx, cancel := shedWithWatch(t, acq, WithObserver(obs), WithShedRetryAfter(1500*time.Millisecond))

	var trailer metadata.MD
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code())
	assert.Equal(t, msgOverloaded, st.Message())
	ra, ok := RetryDelay(err)
	require.True(t, ok)
	assert.Equal(t, 1500*time.Millisecond, ra)
	assert.Equal(t, 1500*time.Millisecond, pushbackOf(t, trailer))

	cancel()
	require.Eventually(t, func() bool { return inFlight.Load() == 0 }, 5*time.Second, time.Millisecond)
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), releasedOK.Load(), "a cancelled watch and a served check are no overload signal")
	assert.Equal(t, 1, obs.count(floodgate.OutcomeShed))
	assert.Equal(t, 2, obs.count(floodgate.OutcomeAllowed))
}

// shedWithWatch serves the health service behind a shedder on a, and opens a
// Watch that holds one slot until cancel is called.
func shedWithWatch(t *testing.T, a middleware.Acquirer, opts ...ShedOption) (hc healthpb.HealthClient, ctx context.Context, cancel context.CancelFunc) {
	t.Helper()
	ic, err := Shed(a, opts...)
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{
		grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()),
	})
	hc = healthpb.NewHealthClient(conn)
	ctx = testCtx(t)
	wctx, cancel := context.WithCancel(ctx)
	w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err, "the watch holds a slot")
	return hc, ctx, cancel
}

func TestShedderReleaseOnOverloadAndPanic(t *testing.T) {
	var got []bool
	acq := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) {
		return func(ok bool) { got = append(got, ok) }, true, nil
	})
	ic, err := Shed(acq)
	require.NoError(t, err)
	unary := ic.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	ctx := context.Background()

	_, err = unary(ctx, nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.DeadlineExceeded, "slow")
	})
	require.Error(t, err)
	_, err = unary(ctx, nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "bad request")
	})
	require.Error(t, err)
	assert.PanicsWithValue(t, "handler bug", func() {
		_, _ = unary(ctx, nil, info, func(context.Context, any) (any, error) { panic("handler bug") })
	}, "a handler's panic is not ours to swallow")
	assert.Equal(t, []bool{false, true, false}, got)

	// A panicking acquirer follows the fail mode.
	boom := middleware.AcquirerFunc(func(context.Context) (func(bool), bool, error) { panic("acquirer bug") })
	for _, mode := range []middleware.FailMode{middleware.FailOpen, middleware.FailClosed} {
		ic, err := Shed(boom, WithFailMode(mode))
		require.NoError(t, err)
		_, err = ic.Unary()(ctx, nil, info, func(context.Context, any) (any, error) { return "ok", nil })
		if mode == middleware.FailOpen {
			assert.NoError(t, err)
		} else {
			assert.Equal(t, codes.Unavailable, status.Code(err))
			assert.Equal(t, msgLimiterUnavailable, status.Convert(err).Message())
		}
	}
}

func TestFilterCostAndRoute(t *testing.T) {
	rec := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 10)}
	obs := &events{}
	ic, err := New(rec,
		WithFilter(Methods(checkMethod)),
		WithCost(func(context.Context, string) int { return 4 }),
		WithRouteFunc(func(m string) string { return "health" }),
		WithKeyFunc(func(ctx context.Context, _ string) string { return "tenant-1" }),
		WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{
		grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()),
	})
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)

	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "4+4+4 > 10")
	// Watch is not selected by the filter: never limited, never reported.
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err)

	takes := rec.all()
	require.Len(t, takes, 3)
	for _, tk := range takes {
		assert.Equal(t, 4, tk.n)
		assert.Equal(t, "tenant-1", tk.key)
	}
	for _, ev := range obs.all() {
		assert.Equal(t, "health", ev.Route)
	}
	assert.Len(t, obs.all(), 3)
}

// delayLimiter admits with a Delay, like a leaky bucket in delay mode, and
// counts refunds.
type delayLimiter struct {
	delay    atomic.Int64 // a time.Duration
	refunded atomic.Int64
}

func (d *delayLimiter) Take(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 1, Delay: time.Duration(d.delay.Load())}, nil
}

func (d *delayLimiter) Refund(_ context.Context, _ string, n int) error {
	d.refunded.Add(int64(n))
	return nil
}

func TestDelayHonouredOrRefused(t *testing.T) {
	dl := &delayLimiter{}
	dl.delay.Store(int64(80 * time.Millisecond))
	obs := &events{}
	ic, err := New(dl, WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)

	start := time.Now()
	_, err = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond, "the call was held for its delay")
	assert.Equal(t, 1, obs.count(floodgate.OutcomeDelayed))

	// A deadline shorter than the delay: refused at once, units given back.
	dl.delay.Store(int64(time.Hour))
	short, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start = time.Now()
	_, err = hc.Check(short, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Less(t, time.Since(start), 4*time.Second, "refused without waiting")
	ra, ok := RetryDelay(err)
	require.True(t, ok)
	assert.Equal(t, time.Hour, ra, "retry once the delay has passed")
	assert.Equal(t, int64(1), dl.refunded.Load(), "the units were given back before the answer")
	assert.Equal(t, 1, obs.count(floodgate.OutcomeDenied))
}

// A key or cost function that panics is a limiter that could not decide:
// the call follows the fail mode, the server goes on. A route function that
// panics only loses the label.
func TestPanickingKeyAndCostFuncs(t *testing.T) {
	l := newBucket(t, floodgate.PerMinute(1), 5)
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	handler := func(context.Context, any) (any, error) { return "served", nil }
	for name, opt := range map[string]Option{
		"key":  WithKeyFunc(func(context.Context, string) string { panic("key bug") }),
		"cost": WithCost(func(context.Context, string) int { panic("cost bug") }),
	} {
		for _, mode := range []middleware.FailMode{middleware.FailOpen, middleware.FailClosed} {
			obs := &events{}
			ic, err := New(l, opt, WithFailMode(mode), WithObserver(obs))
			require.NoError(t, err)
			resp, err := ic.Unary()(peerCtx(t, "192.0.2.1:1"), nil, info, handler)
			if mode == middleware.FailOpen {
				require.NoError(t, err, name)
				assert.Equal(t, "served", resp)
				assert.Equal(t, 1, obs.count(floodgate.OutcomeErrorOpen))
			} else {
				assert.Equal(t, codes.Unavailable, status.Code(err), name)
				assert.Equal(t, 1, obs.count(floodgate.OutcomeErrorClosed))
			}
			assert.Contains(t, obs.all()[0].Err.Error(), "bug")
		}
	}

	obs := &events{}
	ic, err := New(l, WithRouteFunc(func(string) string { panic("route bug") }), WithObserver(obs))
	require.NoError(t, err)
	resp, err := ic.Unary()(peerCtx(t, "192.0.2.2:1"), nil, info, handler)
	require.NoError(t, err)
	assert.Equal(t, "served", resp)
	require.Len(t, obs.all(), 1)
	assert.Equal(t, "unknown", obs.all()[0].Route)
	assert.Equal(t, floodgate.OutcomeAllowed, obs.all()[0].Outcome)
}

// FuzzHeaderKey: whatever a client puts in the metadata entry, the key is
// the HMAC oracle's, of fixed length, in the metadata namespace, and never
// holds the value.
func FuzzHeaderKey(f *testing.F) {
	for _, s := range []string{"svc-a", "", "127.0.0.1", "a\x00b", "a\r\nb", strings.Repeat("x", 300), "é"} {
		f.Add(s)
	}
	secret := []byte("fuzz-secret-0123456789")
	c, err := buildConfig(true, []Option{WithHeaderKey("x-token"), WithKeySecret(secret)}, Option.applyNew)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, v string) {
		ctx := metadata.NewIncomingContext(peerCtx(t, "192.0.2.1:1"), metadata.Pairs("x-token", v))
		k := c.key(ctx, checkMethod)
		if v == "" {
			require.Equal(t, "192.0.2.1", k, "an empty value falls back to the peer")
			return
		}
		require.Equal(t, oracleKey(secret, v), k)
		require.Len(t, k, keyLen)
		if len(v) >= 8 {
			require.NotContains(t, k, v)
		}
	})
}

// oracleKey is the header key of v computed the plain way: a fresh HMAC.
func oracleKey(secret []byte, v string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(v))
	return "md#" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// TestHeaderKeyPoolConcurrent: the pooled HMAC states give every goroutine
// the oracle's key, however the states are shared.
func TestHeaderKeyPoolConcurrent(t *testing.T) {
	secret := []byte("concurrent-secret-0123")
	h := newKeyHasher(secret)
	values := make([]string, 64)
	want := make([]string, len(values))
	for i := range values {
		values[i] = strings.Repeat(strconv.Itoa(i), i*13+1) // up to 800 bytes: several chunks
		want[i] = oracleKey(secret, values[i])
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for round := range 50 {
				j := (g*7 + round) % len(values)
				if got := h.Key(values[j]); got != want[j] {
					t.Errorf("key of value %d: got %q, want %q", j, got, want[j])
					return
				}
			}
		})
	}
	wg.Wait()
	assert.NotEqual(t, h.Key("v"), newKeyHasher([]byte("another-secret-0123456")).Key("v"), "the secret matters")
}

// TestKeyCacheNeverMixesPeers: far more peers than cache slots, looked up
// concurrently, each always gets its own key.
func TestKeyCacheNeverMixesPeers(t *testing.T) {
	kc := new(keyCache)
	var prefixes []netip.Prefix
	for i := range 2 * keyCacheSlots {
		v4 := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		prefixes = append(prefixes, netip.PrefixFrom(v4, 32))
		v6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 8), byte(i)})
		prefixes = append(prefixes, netip.PrefixFrom(v6, 64))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 2 {
				for i := range prefixes {
					p := prefixes[(i*7+g+round)%len(prefixes)]
					if got, want := kc.get(p), prefixKey(p); got != want {
						t.Errorf("key of %v: got %q, want %q", p, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, "10.0.0.1", kc.get(prefixes[2]))
	assert.Equal(t, "2001:db8:1::/64", kc.get(prefixes[3]))
}

// TestCostAboveCapacityNeverFits: a cost above the burst can never be
// admitted. It is refused whatever the fail mode (it used to go to the fail
// mode: FailOpen admitted 8 of 8 on a burst of 5), like httplimit does,
// with a fixed message, no RetryInfo and the pushback "-1" (do not retry).
func TestCostAboveCapacityNeverFits(t *testing.T) {
	for _, mode := range []middleware.FailMode{middleware.FailOpen, middleware.FailClosed} {
		obs := &events{}
		lim := newBucket(t, floodgate.PerMinute(1), 5)
		ic, err := New(lim, WithCost(func(context.Context, string) int { return 8 }),
			WithFailMode(mode), WithObserver(obs))
		require.NoError(t, err)
		conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream())})
		hc := healthpb.NewHealthClient(conn)
		ctx := testCtx(t)
		admitted := 0
		for range 8 {
			var trailer metadata.MD
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
			if err == nil {
				admitted++
				continue
			}
			st := status.Convert(err)
			require.Equal(t, codes.ResourceExhausted, st.Code())
			assert.Equal(t, msgCostExceedsCapacity, st.Message())
			_, hasRetry := RetryDelay(err)
			assert.False(t, hasRetry, "no RetryInfo: retrying is useless")
			assert.Equal(t, []string{noRetryPushback}, trailer.Get(pushbackTrailer))
		}
		assert.Zero(t, admitted, "fail mode %d", mode)
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = w.Recv()
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, []string{noRetryPushback}, w.Trailer().Get(pushbackTrailer))

		assert.Equal(t, 9, obs.count(floodgate.OutcomeDenied))
		for _, ev := range obs.all() {
			assert.ErrorIs(t, ev.Err, floodgate.ErrCostExceedsCapacity)
		}
		d, err := lim.Peek(context.Background(), "127.0.0.1")
		require.NoError(t, err)
		assert.Equal(t, int64(5), d.Remaining, "nothing charged")
	}
}

// TestNeverFitsNotRetriedByGRPC: gRPC's own retry policy, asked to retry
// RESOURCE_EXHAUSTED, sends a never-admissible call once (pushback "-1"),
// and a rate-limited one again.
func TestNeverFitsNotRetriedByGRPC(t *testing.T) {
	const svcConfig = `{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],
	  "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s",
	  "backoffMultiplier":1,"retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`
	rec := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 5)}
	ic, err := New(rec, WithCost(func(context.Context, string) int { return 8 }))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())}, grpc.WithDefaultServiceConfig(svcConfig))
	hc := healthpb.NewHealthClient(conn)
	_, err = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Len(t, rec.all(), 1, "one attempt: the client was told not to retry")
}

// TestInvalidKeyNeverFits: a key the store refuses is never admitted,
// whatever the fail mode, and not retried.
func TestInvalidKeyNeverFits(t *testing.T) {
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		return floodgate.Decision{}, floodgate.ErrInvalidKey
	})
	ic, err := New(l)
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	var trailer metadata.MD
	_, err = healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, msgInvalidKey, st.Message())
	assert.Empty(t, st.Details())
	assert.Equal(t, []string{noRetryPushback}, trailer.Get(pushbackTrailer))
}

// TestEventPolicyTierRouteClass: one event per call, from the request
// layer, named after the limit that decided (the limiter's Config Name when
// WithName is not given), with the tier and the route class.
func TestEventPolicyTierRouteClass(t *testing.T) {
	s := newStore(t)
	lim := namedBucket(t, s, "api-per-peer", floodgate.PerMinute(1), 2)
	obs := &events{}
	ic, err := New(lim, WithTier("edge"), WithObserver(obs),
		WithRouteFunc(func(m string) string { return strings.Split(m, "/")[1] }))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream())})
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		_, _ = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	}
	evs := obs.all()
	require.Len(t, evs, 3, "one event per call")
	for i, ev := range evs {
		assert.Equal(t, floodgate.SourceRequest, ev.Source)
		assert.Equal(t, "api-per-peer", ev.Policy)
		assert.Equal(t, "edge", ev.Tier)
		assert.Equal(t, "grpc.health.v1.Health", ev.Route)
		assert.Empty(t, ev.Class, "a rate limit does not classify")
		assert.Equal(t, []floodgate.Outcome{floodgate.OutcomeAllowed, floodgate.OutcomeAllowed, floodgate.OutcomeDenied}[i], ev.Outcome)
	}
}

// TestFallbackReachesObserver: a decision the store's local fallback made
// (Decision.Fallback) is reported as OutcomeFallback, admitted or refused
// as it says.
func TestFallbackReachesObserver(t *testing.T) {
	var allow atomic.Bool
	l := floodgate.LimiterFunc(func(context.Context, string, int) (floodgate.Decision, error) {
		if allow.Load() {
			return floodgate.Decision{Allowed: true, Fallback: true, Limit: 5, Remaining: 4}, nil
		}
		return floodgate.Decision{Fallback: true, Limit: 5, RetryAfter: 2 * time.Second}, nil
	})
	obs := &events{}
	ic, err := New(l, WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	allow.Store(true)
	_, err = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	allow.Store(false)
	_, err = hc.Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	ra, ok := RetryDelay(err)
	require.True(t, ok)
	assert.Equal(t, 2*time.Second, ra)
	evs := obs.all()
	require.Len(t, evs, 2)
	for _, ev := range evs {
		assert.Equal(t, floodgate.OutcomeFallback, ev.Outcome)
		assert.True(t, ev.Decision.Fallback)
	}
	assert.True(t, evs[0].Decision.Allowed)
	assert.False(t, evs[1].Decision.Allowed)
}

// TestShedderEventsCarryClass: a priority shedder classifies calls from
// their metadata; the event carries the class as Class and the method as
// Route (the shedder used to report the method alone, where the class
// belongs), and the Acquirer claims the slot for that class.
func TestShedderEventsCarryClass(t *testing.T) {
	fixed, err := adaptive.NewConstant(1)
	require.NoError(t, err)
	gate, err := adaptive.NewGate(fixed)
	require.NoError(t, err)
	p, err := priority.NewShedder(gate)
	require.NoError(t, err)
	var asked []string
	var mu sync.Mutex
	acq := middleware.AcquirerFunc(adaptive.SlotFunc(func(ctx context.Context) (*adaptive.Token, error) {
		name := ClassFromContext(ctx)
		mu.Lock()
		asked = append(asked, name)
		mu.Unlock()
		c, ok := p.Class(name)
		if !ok {
			return nil, errors.New("unknown class " + name)
		}
		return p.Acquire(ctx, c)
	}))
	obs := &events{}
	hc, ctx, cancel := shedWithWatch(t, acq, WithName("shed"), WithTier("edge"), WithObserver(obs),
		WithClassFunc(HeaderClass("X-Priority", "standard", "critical", "standard", "best-effort")))
	defer cancel()

	// The watch (no x-priority: standard) holds the only slot: every
	// class is shed now.
	for _, class := range []string{"critical", "best-effort", "bogus", ""} {
		c := ctx
		if class != "" {
			c = metadata.AppendToOutgoingContext(ctx, "x-priority", class)
		}
		_, err := hc.Check(c, &healthpb.HealthCheckRequest{})
		require.Equal(t, codes.Unavailable, status.Code(err))
	}
	evs := obs.all()
	require.Len(t, evs, 5, "one event per call")
	wantClass := []string{"standard", "critical", "best-effort", "standard", "standard"}
	wantRoute := []string{"/grpc.health.v1.Health/Watch", checkMethod, checkMethod, checkMethod, checkMethod}
	for i, ev := range evs {
		assert.Equal(t, floodgate.SourceRequest, ev.Source)
		assert.Equal(t, "shed", ev.Policy)
		assert.Equal(t, "edge", ev.Tier)
		assert.Equal(t, wantClass[i], ev.Class, "event %d", i)
		assert.Equal(t, wantRoute[i], ev.Route, "event %d", i)
		want := floodgate.OutcomeShed
		if i == 0 {
			want = floodgate.OutcomeAllowed
		}
		assert.Equal(t, want, ev.Outcome, "event %d", i)
	}
	mu.Lock()
	assert.Equal(t, wantClass, asked, "the middleware.Acquirer got the same class")
	mu.Unlock()
	st := p.Stats()
	assert.Equal(t, uint64(1), st[0].Shed+st[0].Admitted, "critical")
	assert.Equal(t, uint64(1), st[2].Shed, "best-effort")
}

// TestPerPeerAndPerToken: one interceptor, two limits checked all or
// nothing: a token's refusal charges nothing to the peer, a peer's refusal
// nothing to the token. The event names the limit that refused.
func TestPerPeerAndPerToken(t *testing.T) {
	s := newStore(t)
	perToken := namedBucket(t, s, "per-token", floodgate.PerMinute(1), 2)
	perPeer := namedBucket(t, s, "per-peer", floodgate.PerMinute(1), 3)
	secret := []byte("per-peer-and-token-secret")
	obs := &events{}
	ic, err := New(perToken, WithHeaderKey("x-token"), WithKeySecret(secret),
		WithLimit(perPeer, PeerKey), WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	call := func(token string) error {
		ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-token", token)
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	remaining := func(l *store.Limiter, key string) int64 {
		d, err := l.Peek(context.Background(), key)
		require.NoError(t, err)
		return d.Remaining
	}
	h := newKeyHasher(secret)

	require.NoError(t, call("a"))
	require.NoError(t, call("a"))
	err = call("a")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "token a is spent")
	ra, ok := RetryDelay(err)
	require.True(t, ok)
	assert.Greater(t, ra, 50*time.Second)
	assert.Equal(t, int64(1), remaining(perPeer, "127.0.0.1"), "the token's refusal cost the peer nothing")

	require.NoError(t, call("b"))
	assert.Zero(t, remaining(perPeer, "127.0.0.1"))
	require.Equal(t, codes.ResourceExhausted, status.Code(call("b")), "the peer is spent")
	assert.Equal(t, int64(1), remaining(perToken, h.Key("b")), "the peer's refusal cost token b nothing")

	// One event per (call, limit): 5 calls, 10 events; each refusal is
	// counted under the limit that refused, the other limit's event says
	// it would have admitted.
	var denied, all []string
	for _, ev := range obs.all() {
		all = append(all, ev.Policy+" "+ev.Outcome.String())
		if ev.Outcome == floodgate.OutcomeDenied {
			denied = append(denied, ev.Policy)
		}
	}
	assert.Len(t, all, 10, "%q", all)
	assert.Equal(t, []string{"per-token", "per-peer"}, denied)
	assert.ElementsMatch(t, []string{"per-token denied", "per-peer allowed"}, all[4:6], "the token's refusal, per limit")
}

// TestWithLimitMainKeyAndPrefix: an extra limit without key function is
// charged the main key (its prefix included); an extra limit with its own
// key function is charged that key, unprefixed, as on HTTP.
func TestWithLimitMainKeyAndPrefix(t *testing.T) {
	main := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 5)}
	extra := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 5)}
	byTenant := &recLimiter{l: newBucket(t, floodgate.PerMinute(1), 5)}
	ic, err := New(main, WithKeyPrefix("api "), WithLimit(extra, nil),
		WithLimit(byTenant, func(context.Context, string) string { return "tenant-7" }),
		WithCost(func(context.Context, string) int { return 2 }))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	_, err = healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	// The memstore limiters decide the group themselves (TakeGroup): the
	// wrappers see no Take, so read the keys' state instead.
	for l, key := range map[*recLimiter]string{main: "api 127.0.0.1", extra: "api 127.0.0.1", byTenant: "tenant-7"} {
		d, err := l.l.(*store.Limiter).Peek(context.Background(), key)
		require.NoError(t, err)
		assert.Equal(t, int64(3), d.Remaining, key)
	}
}

// TestPerTokenConcurrent: many concurrent calls with one token through a
// real server: exactly the token's burst is admitted, and the peer is
// charged for exactly those.
func TestPerTokenConcurrent(t *testing.T) {
	s := newStore(t)
	perToken := namedBucket(t, s, "per-token", floodgate.PerHour(1), 5)
	perPeer := namedBucket(t, s, "per-peer", floodgate.PerHour(1), 100)
	ic, err := New(perToken, WithHeaderKey("x-token"), WithLimit(perPeer, PeerKey))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-token", "t")
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			switch status.Code(err) {
			case codes.OK:
				ok.Add(1)
			case codes.ResourceExhausted:
				refused.Add(1)
			default:
				t.Errorf("unexpected %v", err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(5), ok.Load())
	assert.Equal(t, int64(35), refused.Load())
	d, err := perPeer.Peek(context.Background(), "127.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, int64(95), d.Remaining, "the peer paid for the admitted calls only")
}

// TestDelayRefuseMode: with DelayRefuse a delayed admission is refused at
// once, with the delay as retry time, and refunded.
func TestDelayRefuseMode(t *testing.T) {
	dl := &delayLimiter{}
	dl.delay.Store(int64(time.Minute))
	ic, err := New(dl, WithDelayMode(middleware.DelayRefuse))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	var trailer metadata.MD
	_, err = healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, time.Minute, pushbackOf(t, trailer))
	assert.Equal(t, int64(1), dl.refunded.Load())
}
