package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
)

// PushbackTrailer is the trailer gRPC clients read to delay their next retry
// (gRFC A6): a non-negative whole number of milliseconds.
const PushbackTrailer = "grpc-retry-pushback-ms"

// The status messages of refused calls. They are fixed: they never carry the
// key, the peer, or the limiter's own error text. The retry delay travels in
// the RetryInfo detail and the pushback trailer.
const (
	// MsgRateLimited is the message of codes.ResourceExhausted refusals.
	MsgRateLimited = "rate limit exceeded"
	// MsgOverloaded is the message of codes.Unavailable refusals by a
	// shedder.
	MsgOverloaded = "server overloaded"
	// MsgLimiterUnavailable is the message of codes.Unavailable refusals
	// under [FailClosed].
	MsgLimiterUnavailable = "rate limiter unavailable"
)

// failClosedRetry is the retry delay suggested when the limiter could not
// decide and the fail mode is closed.
const failClosedRetry = time.Second

// Acquirer is a concurrency limiter as [NewShedder] sees it: something that
// hands out slots for in-flight work and sheds what it cannot take. The
// adaptive and priority limiters of floodgate fit it through a small adapter;
// its method set is the one httplimit.Acquirer has, so one value serves both.
//
// Implementations must be safe for concurrent use.
type Acquirer interface {
	// Acquire claims a slot for one call. ok false means the call is shed
	// (overload); err non-nil means the limiter could not decide. When ok
	// is true, release must be called exactly once when the work ends, with
	// success false when the work failed in a way that signals overload (a
	// drop that an adaptive limit learns from). release may be nil when there
	// is nothing to release.
	Acquire(ctx context.Context) (release func(success bool), ok bool, err error)
}

// AcquirerFunc adapts a function to the [Acquirer] interface.
type AcquirerFunc func(ctx context.Context) (release func(success bool), ok bool, err error)

// Acquire calls f(ctx).
func (f AcquirerFunc) Acquire(ctx context.Context) (func(success bool), bool, error) {
	return f(ctx)
}

// Interceptors holds one limiting policy and hands out the unary and stream
// server interceptors that enforce it. Build it with [New] (rate limiting)
// or [NewShedder] (load shedding); register its [Interceptors.Unary] and
// [Interceptors.Stream] with grpc.ChainUnaryInterceptor and
// grpc.ChainStreamInterceptor. An Interceptors is immutable and safe for
// concurrent use.
type Interceptors struct {
	cfg     config
	limiter floodgate.Limiter
	acq     Acquirer
}

// New returns the server interceptors that rate-limit calls with l.
//
// Each call is keyed (by default by its peer's IP address, see
// [WithMetadataKey] and [WithKeyFunc]) and charged its cost (default 1;
// streams once, when they open). A call l denies is refused with
// codes.ResourceExhausted, the message [MsgRateLimited], a
// google.rpc.RetryInfo detail holding the decision's RetryAfter, and the
// [PushbackTrailer] trailer holding the same delay in milliseconds, rounded
// up. A decision with a Delay (a shaping limiter) holds the call for that
// long before running the handler, unless the delay would pass the call's
// deadline: then the call is refused like a denial and the units are given
// back when l implements [floodgate.Refunder].
//
// When l errors or panics, the call follows the [FailMode]. Every decision is
// reported to the observer with its latency.
//
// New returns an error wrapping [floodgate.ErrInvalidConfig] when l is nil or
// an option is invalid.
func New(l floodgate.Limiter, opts ...Option) (*Interceptors, error) {
	if l == nil {
		return nil, invalid("nil limiter")
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Interceptors{cfg: cfg, limiter: l}, nil
}

// NewShedder returns the server interceptors that shed load with a
// concurrency limiter. A call a refuses is answered with codes.Unavailable,
// the message [MsgOverloaded], a RetryInfo detail and the pushback trailer
// (one second by default, see [WithShedRetryAfter]); it is reported as
// floodgate.OutcomeShed. An admitted call's slot is released when its handler
// returns, with success false when the handler panicked or returned
// codes.DeadlineExceeded, codes.ResourceExhausted or codes.Unavailable (the
// errors that signal overload), true otherwise.
//
// Keys and costs do not apply (WithMetadataKey, WithKeyFunc, WithIPPrefix and
// WithCost are accepted and ignored); dry-run, fail mode, filter and the
// observer labels do.
//
// NewShedder returns an error wrapping [floodgate.ErrInvalidConfig] when a
// is nil or an option is invalid.
func NewShedder(a Acquirer, opts ...Option) (*Interceptors, error) {
	if a == nil {
		return nil, invalid("nil acquirer")
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Interceptors{cfg: cfg, acq: a}, nil
}

// UnaryServerInterceptor is shorthand for New(l, opts...) followed by
// Unary.
func UnaryServerInterceptor(l floodgate.Limiter, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	i, err := New(l, opts...)
	if err != nil {
		return nil, err
	}
	return i.Unary(), nil
}

// StreamServerInterceptor is shorthand for New(l, opts...) followed by
// Stream.
func StreamServerInterceptor(l floodgate.Limiter, opts ...Option) (grpc.StreamServerInterceptor, error) {
	i, err := New(l, opts...)
	if err != nil {
		return nil, err
	}
	return i.Stream(), nil
}

// Unary returns the unary server interceptor.
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if i.cfg.filter != nil && !i.cfg.filter(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		release, err := i.admit(ctx, info.FullMethod, nil)
		if err != nil {
			return nil, err
		}
		if release == nil {
			return handler(ctx, req)
		}
		var resp any
		finished := false
		defer func() { safeRelease(release, finished && success(err)) }()
		resp, err = handler(ctx, req)
		finished = true
		return resp, err
	}
}

// Stream returns the stream server interceptor. A stream is decided once,
// when it opens.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if i.cfg.filter != nil && !i.cfg.filter(ctx, info.FullMethod) {
			return handler(srv, ss)
		}
		release, err := i.admit(ctx, info.FullMethod, ss)
		if err != nil {
			return err
		}
		if release == nil {
			return handler(srv, ss)
		}
		finished := false
		defer func() { safeRelease(release, finished && success(err)) }()
		err = handler(srv, ss)
		finished = true
		return err
	}
}

// success reports whether a handler's error leaves an adaptive limit
// nothing to learn about overload.
func success(err error) bool {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.ResourceExhausted, codes.Unavailable:
		return false
	}
	return true
}

func safeRelease(release func(bool), ok bool) {
	defer func() { _ = recover() }() // a broken release must not crash the server
	release(ok)
}

// admit decides one call. It returns the status error refusing the call, or
// the release function to call when the call ends (nil when there is none).
// ss is the stream for stream calls, nil for unary calls (the trailer then
// goes through the context).
func (i *Interceptors) admit(ctx context.Context, method string, ss grpc.ServerStream) (func(bool), error) {
	if i.acq != nil {
		return i.admitShed(ctx, method, ss)
	}
	start := i.now()
	d, n, key, err := i.take(ctx, method)
	ev := floodgate.Event{
		Policy:   i.cfg.name,
		Tier:     i.cfg.tier,
		Route:    i.route(method),
		Decision: d,
		Err:      err,
		Latency:  i.since(start),
	}
	switch {
	case err != nil:
		return nil, i.failed(ctx, ev, ss)
	case !d.Allowed:
		if i.cfg.dryRun {
			ev.Outcome = floodgate.OutcomeWouldDeny
			i.cfg.observer.Observe(ev)
			return nil, nil
		}
		ev.Outcome = floodgate.OutcomeDenied
		i.cfg.observer.Observe(ev)
		return nil, refuse(ctx, ss, codes.ResourceExhausted, MsgRateLimited, d.RetryAfter)
	case d.Delay > 0 && !i.cfg.dryRun:
		return nil, i.delay(ctx, ev, ss, key, n)
	case d.Delay > 0:
		ev.Outcome = floodgate.OutcomeDelayed
	default:
		ev.Outcome = floodgate.OutcomeAllowed
	}
	i.cfg.observer.Observe(ev)
	return nil, nil
}

// take computes the key and the cost and asks the limiter, turning a panic
// anywhere on the way into an error.
func (i *Interceptors) take(ctx context.Context, method string) (d floodgate.Decision, n int, key string, err error) {
	defer func() {
		if r := recover(); r != nil {
			d, err = floodgate.Decision{}, fmt.Errorf("grpclimit: limiter panicked: %v", r)
		}
	}()
	key = i.cfg.key(ctx, method)
	n = 1
	if i.cfg.cost != nil {
		n = i.cfg.cost(ctx, method)
	}
	d, err = i.limiter.Take(ctx, key, n)
	return d, n, key, err
}

// now and since time a decision for the observer; without one, the clock
// is not read at all (on some machines a clock read costs more than the rest
// of the decision).
func (i *Interceptors) now() int64 {
	if !i.cfg.timed {
		return 0
	}
	return floodgate.Nanotime()
}

func (i *Interceptors) since(start int64) time.Duration {
	if !i.cfg.timed {
		return 0
	}
	return time.Duration(floodgate.Nanotime() - start)
}

// route maps a method to its route class. A route function that panics
// gets the class "unknown" rather than crashing the server.
func (i *Interceptors) route(method string) (route string) {
	if i.cfg.route == nil {
		return method
	}
	defer func() {
		if r := recover(); r != nil {
			route = "unknown"
		}
	}()
	return i.cfg.route(method)
}

// failed applies the fail mode to a call the limiter could not decide (in
// dry-run mode the call always passes, reported as error_open). A call whose
// own context has ended gets the context's status instead of a misleading
// Unavailable.
func (i *Interceptors) failed(ctx context.Context, ev floodgate.Event, ss grpc.ServerStream) error {
	ev.Decision = floodgate.Decision{}
	if i.cfg.failMode == FailOpen || i.cfg.dryRun {
		ev.Outcome = floodgate.OutcomeErrorOpen
		i.cfg.observer.Observe(ev)
		return nil
	}
	ev.Outcome = floodgate.OutcomeErrorClosed
	i.cfg.observer.Observe(ev)
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	return refuse(ctx, ss, codes.Unavailable, MsgLimiterUnavailable, failClosedRetry)
}

// delay holds an admitted call for its Delay, or refuses it when the delay
// would pass its deadline.
func (i *Interceptors) delay(ctx context.Context, ev floodgate.Event, ss grpc.ServerStream, key string, n int) error {
	wait := ev.Decision.Delay
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		if r, ok := i.limiter.(floodgate.Refunder); ok {
			_ = r.Refund(context.WithoutCancel(ctx), key, n)
		}
		ev.Outcome = floodgate.OutcomeDenied
		i.cfg.observer.Observe(ev)
		return refuse(ctx, ss, codes.ResourceExhausted, MsgRateLimited, wait)
	}
	ev.Outcome = floodgate.OutcomeDelayed
	i.cfg.observer.Observe(ev)
	return sleep(ctx, wait)
}

// admitShed is admit for a shedder.
func (i *Interceptors) admitShed(ctx context.Context, method string, ss grpc.ServerStream) (func(bool), error) {
	start := i.now()
	release, ok, err := i.acquire(ctx)
	ev := floodgate.Event{
		Policy:  i.cfg.name,
		Tier:    i.cfg.tier,
		Route:   i.route(method),
		Err:     err,
		Latency: i.since(start),
	}
	switch {
	case err != nil:
		return nil, i.failed(ctx, ev, ss)
	case !ok && i.cfg.dryRun:
		ev.Outcome = floodgate.OutcomeWouldDeny
		i.cfg.observer.Observe(ev)
		return nil, nil
	case !ok:
		ev.Outcome = floodgate.OutcomeShed
		i.cfg.observer.Observe(ev)
		return nil, refuse(ctx, ss, codes.Unavailable, MsgOverloaded, i.cfg.shedRetry)
	}
	ev.Outcome = floodgate.OutcomeAllowed
	i.cfg.observer.Observe(ev)
	return release, nil
}

func (i *Interceptors) acquire(ctx context.Context) (release func(bool), ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			release, ok, err = nil, false, fmt.Errorf("grpclimit: acquirer panicked: %v", r)
		}
	}()
	release, ok, err = i.acq.Acquire(ctx)
	if err != nil && release != nil {
		safeRelease(release, false)
		release = nil
	}
	return release, ok, err
}

// refuse builds the status of a refused call, with a RetryInfo detail, and
// sets the pushback trailer.
func refuse(ctx context.Context, ss grpc.ServerStream, code codes.Code, msg string, retry time.Duration) error {
	st := status.New(code, msg)
	if retry <= 0 {
		return st.Err()
	}
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = withInfo
	}
	md := metadata.MD{PushbackTrailer: []string{strconv.FormatInt(pushbackMillis(retry), 10)}}
	if ss != nil {
		ss.SetTrailer(md)
	} else {
		// Fails only when ctx is not a server call's context (a test calling
		// the interceptor directly); the status still carries RetryInfo.
		_ = grpc.SetTrailer(ctx, md)
	}
	return st.Err()
}

// pushbackMillis rounds d up to whole milliseconds, at least 1: a client
// that waits that long is never early.
func pushbackMillis(d time.Duration) int64 {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return max(int64(ms), 1)
}

// RetryDelay extracts the retry delay a refused call carries in its status:
// the google.rpc.RetryInfo detail. ok is false when err carries none.
func RetryDelay(err error) (d time.Duration, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return 0, false
	}
	for _, det := range st.Details() {
		if ri, is := det.(*errdetails.RetryInfo); is && ri.GetRetryDelay() != nil {
			if e := ri.GetRetryDelay().CheckValid(); e != nil {
				continue
			}
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}
