package grpclimit

import (
	"context"
	"errors"
	"github.com/floodgate-go/floodgate/middleware"
	"io"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/priority"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// refusal builds a status error like a server would send, with a RetryInfo
// detail when retry > 0.
func refusal(code codes.Code, retry time.Duration) error {
	st := status.New(code, "refused")
	if retry > 0 {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	return st.Err()
}

// setTrailer does what grpc.Trailer does after a real call.
func setTrailer(opts []grpc.CallOption, md metadata.MD) {
	for _, o := range opts {
		if tr, ok := o.(grpc.TrailerCallOption); ok {
			*tr.TrailerAddr = md
		}
	}
}

// script is a fake invoker: call i returns results[i] (the last one once
// past the end) and records when it was made.
type script struct {
	results []func(opts []grpc.CallOption) error
	at      []time.Time
}

func (s *script) invoke(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	s.at = append(s.at, time.Now())
	i := min(len(s.at), len(s.results)) - 1
	return s.results[i](opts)
}

func ok(opts []grpc.CallOption) error { return nil }

func refused(code codes.Code, retry time.Duration, trailerMs string) func([]grpc.CallOption) error {
	return func(opts []grpc.CallOption) error {
		if trailerMs != "" {
			setTrailer(opts, metadata.Pairs(pushbackTrailer, trailerMs))
		}
		return refusal(code, retry)
	}
}

func newClient(t *testing.T, opts ...ClientOption) *Client {
	t.Helper()
	c, err := NewClient(opts...)
	require.NoError(t, err)
	return c
}

func TestClientPushbackHoldsLaterCalls(t *testing.T) {
	cases := []struct {
		name  string
		first func([]grpc.CallOption) error
		opts  []ClientOption
		hold  time.Duration
	}{
		{"retry info", refused(codes.ResourceExhausted, 200*time.Millisecond, ""), nil, 200 * time.Millisecond},
		{"trailer", refused(codes.Unavailable, 0, "300"), nil, 300 * time.Millisecond},
		{"longer of both", refused(codes.ResourceExhausted, 700*time.Millisecond, "300"), nil, 700 * time.Millisecond},
		{"capped", refused(codes.ResourceExhausted, 0, "999999999999"), []ClientOption{WithMaxPushback(2 * time.Second)}, 2 * time.Second},
		{"off", refused(codes.ResourceExhausted, time.Second, "1000"), []ClientOption{WithPushback(false)}, 0},
		{"not a refusal", refused(codes.Internal, time.Second, "1000"), nil, 0},
		{"malformed trailer", refused(codes.Unavailable, 0, "-5"), nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newClient(t, tc.opts...)
				s := &script{results: []func([]grpc.CallOption) error{tc.first, ok}}
				u := c.Unary()
				err := u(context.Background(), checkMethod, nil, nil, nil, s.invoke)
				require.Error(t, err)
				if tc.hold > 0 {
					assert.WithinDuration(t, time.Now().Add(tc.hold), c.methodPushback(checkMethod), 0)
				} else {
					assert.True(t, c.methodPushback(checkMethod).IsZero())
				}
				require.NoError(t, u(context.Background(), checkMethod, nil, nil, nil, s.invoke))
				require.Len(t, s.at, 2)
				assert.Equal(t, tc.hold, s.at[1].Sub(s.at[0]), "the next call went out exactly after the pushback")
			})
		})
	}
}

// TestClientPushbackPerMethod: by default a refusal holds only its method;
// with WithPushbackPerMethod(false) it holds every method of the client.
func TestClientPushbackPerMethod(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []ClientOption
		// how long the other method's call was held
		other time.Duration
	}{
		{"default", nil, 0},
		{"on", []ClientOption{WithPushbackPerMethod(true)}, 0},
		{"off", []ClientOption{WithPushbackPerMethod(false)}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newClient(t, tc.opts...)
				s := &script{results: []func([]grpc.CallOption) error{refused(codes.ResourceExhausted, time.Second, ""), ok}}
				u := c.Unary()
				require.Error(t, u(context.Background(), "/x.Y/Expensive", nil, nil, nil, s.invoke))
				assert.WithinDuration(t, time.Now().Add(time.Second), c.methodPushback("/x.Y/Expensive"), 0)
				assert.Equal(t, tc.other == 0, c.methodPushback("/x.Y/Cheap").IsZero())
				require.NoError(t, u(context.Background(), "/x.Y/Cheap", nil, nil, nil, s.invoke))
				require.NoError(t, u(context.Background(), "/x.Y/Expensive", nil, nil, nil, s.invoke))
				require.Len(t, s.at, 3)
				assert.Equal(t, tc.other, s.at[1].Sub(s.at[0]), "the other method")
				assert.Equal(t, time.Second, s.at[2].Sub(s.at[0]), "the refused method is held")
			})
		})
	}
}

// withClass returns ctx with the outgoing metadata entry x-priority: class.
func withClass(ctx context.Context, class string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-priority", class)
}

// TestClientPushbackPerClass: with WithPushbackClass, a refusal holds only
// the calls sent with the refused call's class (and method); calls of
// another class, or of none, go out at once.
func TestClientPushbackPerClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, WithPushbackClass("X-Priority"))
		s := &script{results: []func([]grpc.CallOption) error{refused(codes.Unavailable, time.Second, ""), ok}}
		u := c.Unary()
		bg := context.Background()
		be, crit := withClass(bg, "best-effort"), withClass(bg, "critical")
		require.Error(t, u(be, checkMethod, nil, nil, nil, s.invoke))
		assert.WithinDuration(t, time.Now().Add(time.Second), c.PushbackFor(be, checkMethod), 0)
		assert.True(t, c.PushbackFor(crit, checkMethod).IsZero())
		assert.True(t, c.PushbackFor(bg, checkMethod).IsZero())
		assert.True(t, c.methodPushback(checkMethod).IsZero(), "pushbackUntil is the scope of calls without a class")
		assert.True(t, c.PushbackFor(be, "/x.Y/Other").IsZero())

		for range 24 {
			require.NoError(t, u(crit, checkMethod, nil, nil, nil, s.invoke))
		}
		require.NoError(t, u(bg, checkMethod, nil, nil, nil, s.invoke))
		require.NoError(t, u(be, "/x.Y/Other", nil, nil, nil, s.invoke))
		require.Len(t, s.at, 27)
		assert.Zero(t, s.at[26].Sub(s.at[0]), "other classes and methods were not held")
		require.NoError(t, u(be, checkMethod, nil, nil, nil, s.invoke))
		require.Len(t, s.at, 28)
		assert.Equal(t, time.Second, s.at[27].Sub(s.at[0]), "the refused class was held")

		for _, name := range []string{"", "grpc-priority", "x priority"} {
			_, err := NewClient(WithPushbackClass(name))
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%q", name)
		}
	})
}

// TestClientPushbackScopesPruned: scopes whose pushback has expired are
// dropped once there are more than maxGates of them, so that many class
// values cannot grow the client without bound; scopes in force are kept.
func TestClientPushbackScopesPruned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, WithPushbackClass("x-priority"))
		u := c.Unary()
		short := &script{results: []func([]grpc.CallOption) error{refused(codes.Unavailable, time.Millisecond, "")}}
		long := &script{results: []func([]grpc.CallOption) error{refused(codes.Unavailable, time.Minute, "")}}
		ctx := withClass(context.Background(), "held")
		require.Error(t, u(ctx, checkMethod, nil, nil, nil, long.invoke))
		for i := range maxGates {
			require.Error(t, u(withClass(context.Background(), strconv.Itoa(i)), checkMethod, nil, nil, nil, short.invoke))
		}
		assert.EqualValues(t, maxGates+1, c.ngates.Load())
		time.Sleep(time.Millisecond)
		require.Error(t, u(withClass(context.Background(), "new"), checkMethod, nil, nil, nil, short.invoke))
		assert.EqualValues(t, 2, c.ngates.Load(), "the scope in force and the new one remain")
		assert.False(t, c.PushbackFor(ctx, checkMethod).IsZero())
		assert.False(t, c.PushbackFor(withClass(context.Background(), "new"), checkMethod).IsZero())
	})
}

func TestClientPushbackPastDeadlineFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t)
		s := &script{results: []func([]grpc.CallOption) error{refused(codes.ResourceExhausted, time.Second, ""), ok}}
		u := c.Unary()
		require.Error(t, u(context.Background(), checkMethod, nil, nil, nil, s.invoke))

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := u(ctx, checkMethod, nil, nil, nil, s.invoke)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.ErrorIs(t, err, ErrPushbackDeadline)
		assert.Zero(t, time.Since(start), "no sleeping into the deadline")
		assert.Len(t, s.at, 1, "the call never went out")

		// Cancelled while held.
		ctx2, cancel2 := context.WithCancel(context.Background())
		go func() {
			time.Sleep(300 * time.Millisecond)
			cancel2()
		}()
		err = u(ctx2, checkMethod, nil, nil, nil, s.invoke)
		assert.Equal(t, codes.Canceled, status.Code(err))
		assert.Len(t, s.at, 1)
	})
}

func TestClientRetry(t *testing.T) {
	policy := []ClientOption{
		WithMaxAttempts(4),
		WithBackoff(100*time.Millisecond, 250*time.Millisecond),
		WithRetryable(func(m string) bool { return m == checkMethod }),
	}
	t.Run("succeeds after refusals, waiting at least the pushback", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newClient(t, policy...)
			pb := refused(codes.ResourceExhausted, 50*time.Millisecond, "")
			s := &script{results: []func([]grpc.CallOption) error{pb, pb, pb, ok}}
			require.NoError(t, c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke))
			require.Len(t, s.at, 4)
			for i, ceil := range []time.Duration{100, 200, 250} {
				gap := s.at[i+1].Sub(s.at[i])
				assert.GreaterOrEqual(t, gap, 50*time.Millisecond, "retry %d honours the pushback", i+1)
				assert.LessOrEqual(t, gap, ceil*time.Millisecond, "retry %d within the capped backoff", i+1)
			}
		})
	})
	t.Run("bounded attempts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newClient(t, policy...)
			s := &script{results: []func([]grpc.CallOption) error{refused(codes.Unavailable, 0, "")}}
			err := c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke)
			assert.Equal(t, codes.Unavailable, status.Code(err))
			assert.Len(t, s.at, 4)
		})
	})
	t.Run("non-idempotent method is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newClient(t, policy...)
			s := &script{results: []func([]grpc.CallOption) error{refused(codes.ResourceExhausted, 0, ""), ok}}
			err := c.Unary()(context.Background(), "/pkg.Bank/Transfer", nil, nil, nil, s.invoke)
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Len(t, s.at, 1)
		})
	})
	t.Run("other codes are not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newClient(t, policy...)
			s := &script{results: []func([]grpc.CallOption) error{refused(codes.InvalidArgument, 0, ""), ok}}
			err := c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Len(t, s.at, 1)
		})
	})
	t.Run("retry past the deadline is not attempted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newClient(t, policy...)
			s := &script{results: []func([]grpc.CallOption) error{refused(codes.ResourceExhausted, 5*time.Second, ""), ok}}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			err := c.Unary()(ctx, checkMethod, nil, nil, nil, s.invoke)
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the server's answer, not a timeout")
			assert.Zero(t, time.Since(start))
			assert.Len(t, s.at, 1)
		})
	})
}

type fakeWaiter struct {
	ns  []int
	err error
}

func (w *fakeWaiter) WaitN(_ context.Context, n int) error {
	w.ns = append(w.ns, n)
	return w.err
}

func TestClientThrottle(t *testing.T) {
	w := &fakeWaiter{}
	c := newClient(t, WithThrottle(w), WithCost(func(context.Context, string) int { return 3 }))
	s := &script{results: []func([]grpc.CallOption) error{ok}}
	require.NoError(t, c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke))
	assert.Equal(t, []int{3}, w.ns)

	w.err = floodgate.ErrWouldExceedDeadline
	err := c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	w.err = errors.New("misconfigured")
	err = c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke)
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Len(t, s.at, 1, "throttled calls never went out")

	_, err = NewClient(WithThrottle(w), WithThrottleLimiter(newBucket(t, floodgate.PerSecond(1), 1), nil))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	for _, o := range []ClientOption{
		WithThrottle(nil), WithThrottleLimiter(nil, nil), WithCost(nil), WithMaxPushback(0),
		WithMaxAttempts(0), WithMaxAttempts(11), WithMaxAttempts(3), // the last without WithRetryable
		WithBackoff(time.Second, time.Millisecond), WithBackoff(0, time.Second), WithBackoff(time.Second, 2*time.Hour),
		WithRetryable(nil), nil,
	} {
		_, err := NewClient(o)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%#v", o)
	}
}

func TestClientThrottleLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newBucket(t, floodgate.PerSecond(10), 1, memstore.WithClock(floodgate.ClockFunc(time.Now)))
		c := newClient(t, WithThrottleLimiter(l, nil))
		s := &script{results: []func([]grpc.CallOption) error{ok}}
		for range 3 {
			require.NoError(t, c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke))
		}
		require.Len(t, s.at, 3)
		assert.Equal(t, 100*time.Millisecond, s.at[1].Sub(s.at[0]))
		assert.Equal(t, 100*time.Millisecond, s.at[2].Sub(s.at[1]))
	})
}

// fakeStream is a client stream refused on its first RecvMsg.
type fakeStream struct {
	grpc.ClientStream
	err     error
	trailer metadata.MD
}

func (f *fakeStream) RecvMsg(any) error    { return f.err }
func (f *fakeStream) Trailer() metadata.MD { return f.trailer }

func TestClientStreamPushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t)
		var opened []time.Time
		streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			opened = append(opened, time.Now())
			return &fakeStream{err: refusal(codes.ResourceExhausted, 0), trailer: metadata.Pairs(pushbackTrailer, "400")}, nil
		}
		s := c.Stream()
		cs, err := s(context.Background(), &grpc.StreamDesc{}, nil, "/x.Y/Watch", streamer)
		require.NoError(t, err)
		require.Error(t, cs.RecvMsg(nil))
		_, err = s(context.Background(), &grpc.StreamDesc{}, nil, "/x.Y/Watch", streamer)
		require.NoError(t, err)
		require.Len(t, opened, 2)
		assert.Equal(t, 400*time.Millisecond, opened[1].Sub(opened[0]))

		// A stream that ends normally sets nothing.
		c2 := newClient(t)
		eof := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return &fakeStream{err: io.EOF}, nil
		}
		cs, err = c2.Stream()(context.Background(), &grpc.StreamDesc{}, nil, "/x.Y/Watch", eof)
		require.NoError(t, err)
		assert.Equal(t, io.EOF, cs.RecvMsg(nil))
		assert.True(t, c2.methodPushback("/x.Y/Watch").IsZero())
	})
}

// TestClientAgainstRealServer: the client interceptor meets the server
// interceptor over loopback; after a refusal the next call reaches the
// server no earlier than the pushback allows, and the interceptor's own
// retry turns the refusal into a success.
func TestClientAgainstRealServer(t *testing.T) {
	b := newBucket(t, floodgate.PerSecond(2), 1)
	rec := &recLimiter{l: b}
	ic, err := New(rec)
	require.NoError(t, err)
	cl := newClient(t, WithMaxAttempts(3), WithBackoff(time.Millisecond, time.Millisecond),
		WithRetryable(func(string) bool { return true }))
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())},
		grpc.WithUnaryInterceptor(cl.Unary()))
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	first, retry := refusedThenRetried(t, b, rec, func() error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	assertWaitedPushback(t, first, retry)
}

// TestClientPushbackScopedToShedClass: a real server sheds with a priority
// shedder that classifies calls by their x-priority metadata. Best-effort
// is full, critical has room. One best-effort call is shed; the client then
// holds best-effort calls locally, and sends the 24 critical calls that
// follow, which the server admits. (The client used to hold every call of
// the connection after the shed.)
func TestClientPushbackScopedToShedClass(t *testing.T) {
	fixed, err := adaptive.NewConstant(20)
	require.NoError(t, err)
	gate, err := adaptive.NewGate(fixed)
	require.NoError(t, err)
	classes, err := priority.NewShedder(gate)
	require.NoError(t, err)
	ctx := testCtx(t)
	for range 17 { // best-effort's 85% of 20, held for the whole test
		tok, err := classes.Acquire(ctx, priority.BestEffort)
		require.NoError(t, err)
		t.Cleanup(tok.Success)
	}
	acq := middleware.AcquirerFunc(func(ctx context.Context) (func(bool), bool, error) {
		var name string
		if v := metadata.ValueFromIncomingContext(ctx, "x-priority"); len(v) > 0 {
			name = v[0]
		}
		c, _ := classes.Class(name) // missing or unknown: best-effort
		return adaptive.SlotFunc(func(ctx context.Context) (*adaptive.Token, error) {
			return classes.Acquire(ctx, c)
		})(ctx)
	})
	ic, err := Shed(acq, WithShedRetryAfter(time.Minute))
	require.NoError(t, err)
	cl := newClient(t, WithPushbackClass("x-priority"))
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())},
		grpc.WithUnaryInterceptor(cl.Unary()))
	hc := healthpb.NewHealthClient(conn)
	be, crit := withClass(ctx, "best-effort"), withClass(ctx, "critical")

	_, err = hc.Check(be, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "best-effort is shed by the server")
	require.False(t, cl.PushbackFor(be, checkMethod).IsZero())
	for i := range 24 {
		_, err := hc.Check(crit, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "critical call %d", i)
	}
	_, err = hc.Check(be, &healthpb.HealthCheckRequest{})
	assert.ErrorIs(t, err, ErrPushbackDeadline, "best-effort is held locally")

	st := classes.Stats()
	assert.Equal(t, priority.ClassStats{Name: "best-effort", Admitted: 17, Shed: 1}, st[priority.BestEffort], "the held call never reached the server")
	assert.Equal(t, priority.ClassStats{Name: "critical", Admitted: 24}, st[priority.Critical])
}

// The keyless token bucket is a Waiter: a client throttled at 10 calls per
// second with bursts of 1 spaces its calls 100ms apart.
var _ middleware.Waiter = (*bucket.Limiter)(nil)

func TestClientThrottleKeylessBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, WithThrottle(bucket.NewLimiter(10, 1)))
		s := &script{results: []func([]grpc.CallOption) error{ok}}
		for range 3 {
			require.NoError(t, c.Unary()(context.Background(), checkMethod, nil, nil, nil, s.invoke))
		}
		require.Len(t, s.at, 3)
		for i := 1; i < 3; i++ {
			gap := s.at[i].Sub(s.at[i-1])
			assert.InDelta(t, float64(100*time.Millisecond), float64(gap), float64(time.Millisecond), "gap %d", i)
		}
		// A call whose deadline comes before its token fails at once.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		err := c.Unary()(ctx, checkMethod, nil, nil, nil, s.invoke)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Len(t, s.at, 3)
	})
}

// TestClientStreamAgainstRealServer: a real refused stream carries the
// pushback to the client interceptor, which then holds the next stream.
func TestClientStreamAgainstRealServer(t *testing.T) {
	ic, err := New(newBucket(t, floodgate.PerMinute(1), 1))
	require.NoError(t, err)
	cl := newClient(t)
	conn, _ := serve(t, []grpc.ServerOption{grpc.StreamInterceptor(ic.Stream())},
		grpc.WithStreamInterceptor(cl.Stream()))
	hc := healthpb.NewHealthClient(conn)
	ctx := testCtx(t)

	wctx, cancel := context.WithCancel(ctx)
	w1, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w1.Recv()
	require.NoError(t, err)
	cancel()

	w2, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w2.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	until := cl.methodPushback("/grpc.health.v1.Health/Watch")
	require.False(t, until.IsZero(), "the refusal's pushback was recorded")
	assert.InDelta(t, float64(time.Minute), float64(time.Until(until)), float64(5*time.Second))

	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	_, err = hc.Watch(short, &healthpb.HealthCheckRequest{})
	assert.ErrorIs(t, err, ErrPushbackDeadline, "held locally, not sent")
}

// A call refused as never admissible (pushback -1) is not retried by the
// client interceptor, whatever its retry options.
func TestClientNeverRetriesNeverFits(t *testing.T) {
	rec := &recLimiter{l: newBucket(t, floodgate.PerSecond(1), 2)}
	ic, err := New(rec, WithCost(func(context.Context, string) int { return 3 })) // above the burst
	require.NoError(t, err)
	cl := newClient(t, WithMaxAttempts(3), WithBackoff(time.Millisecond, time.Millisecond),
		WithRetryable(func(string) bool { return true }))
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())},
		grpc.WithUnaryInterceptor(cl.Unary()))
	_, err = healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Len(t, rec.all(), 1, "sent once: the server said no retry can succeed")
	assert.True(t, cl.methodPushback(checkMethod).IsZero(), "and no pushback is held")
}
