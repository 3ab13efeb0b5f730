package grpclimit

import (
	"context"
	"fmt"
	"github.com/floodgate-go/floodgate/middleware"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/describe"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
)

// pushbackTrailer is the trailer gRPC clients read to delay their next retry
// (gRFC A6): a whole number of milliseconds to wait, or a negative one
// ([noRetryPushback]) meaning "do not retry".
const pushbackTrailer = "grpc-retry-pushback-ms"

// noRetryPushback is the pushback trailer value of a call that can never
// be admitted: gRPC clients do not retry it.
const noRetryPushback = "-1"

// The status messages of refused calls. They are fixed: they never carry the
// key, the peer, or the limiter's own error text. The retry delay travels in
// the RetryInfo detail and the pushback trailer.
const (
	// msgRateLimited is the message of codes.ResourceExhausted refusals by
	// a rate limit: retry after the RetryInfo delay.
	msgRateLimited = "rate limit exceeded"
	// msgCostExceedsCapacity is the message of codes.ResourceExhausted
	// refusals of a call whose cost no limit could ever admit (above the
	// limit's capacity, or below 1): retrying is useless.
	msgCostExceedsCapacity = "request cost exceeds the rate limit's capacity"
	// msgInvalidKey is the message of codes.ResourceExhausted refusals of a
	// call whose key the store refuses: retrying is useless.
	msgInvalidKey = "rate limit key refused"
	// msgOverloaded is the message of codes.Unavailable refusals by a
	// shedder.
	msgOverloaded = "server overloaded"
	// msgLimiterUnavailable is the message of codes.Unavailable refusals
	// under [middleware.FailClosed].
	msgLimiterUnavailable = "rate limiter unavailable"
)

// Interceptors holds one limiting policy and hands out the unary and stream
// server interceptors that enforce it. Build it with [New] (rate limiting)
// or [Shed] (load shedding); register its [Interceptors.Unary] and
// [Interceptors.Stream] with grpc.ChainUnaryInterceptor and
// grpc.ChainStreamInterceptor. An Interceptors is immutable and safe for
// concurrent use.
type Interceptors struct {
	cfg  config
	core *admit.Core         // New, Policies
	acq  middleware.Acquirer // Shed
	set  *describe.Set[call] // Policies
}

// New returns the server interceptors that rate-limit calls with l (and
// the limits of [WithLimit], all or nothing).
//
// Each call is keyed (by default by its peer's IP address, see
// [WithHeaderKey] and [WithKeyFunc]) and charged its cost (default 1;
// streams once, when they open). The decision is floodgate's one admission
// core's, the one httplimit uses, and is answered as the package
// documentation's response contract says: admitted (after any shaping
// delay), rate limited (codes.ResourceExhausted with RetryInfo and
// pushback), never admissible (codes.ResourceExhausted without RetryInfo,
// pushback "-1") or, when l fails and the fail mode is closed,
// codes.Unavailable.
//
// Each call decided is reported to the observer as one event per limit.
//
// New returns an error wrapping [floodgate.ErrInvalidConfig] when l is nil
// (or a typed nil), or an option is nil or invalid.
func New(l floodgate.Limiter, opts ...Option) (*Interceptors, error) {
	if nilcheck.Is(l) {
		return nil, invalid("nil limiter")
	}
	cfg, err := buildConfig(true, opts, Option.applyNew)
	if err != nil {
		return nil, err
	}
	limiters := make([]floodgate.Limiter, 0, 1+len(cfg.limits))
	limiters = append(limiters, l)
	for _, x := range cfg.limits {
		limiters = append(limiters, x.limiter)
	}
	if cfg.processSecret && credkey.Shared(limiters...) {
		return nil, invalid("WithHeaderKey on a store shared by several processes needs WithKeySecret, the same secret on every node (a random one per process would give each node its own budget per credential)")
	}
	acfg := admit.Config{Name: cfg.name, Tier: cfg.tier, Observer: cfg.observer, DryRun: cfg.dryRun,
		FailMode: cfg.failMode, DelayMode: cfg.delayMode}
	core, err := admit.New(acfg, limiters...)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return &Interceptors{cfg: cfg, core: core}, nil
}

// Shed returns the server interceptors that shed load with a concurrency
// limiter. A call a refuses is answered with codes.Unavailable, the message
// "server overloaded", a RetryInfo detail and the pushback trailer (one second
// by default, see [WithShedRetryAfter]); it is reported as
// floodgate.OutcomeShed. An admitted call's slot is released when its
// handler returns, with success false when the handler panicked or returned
// codes.DeadlineExceeded, codes.ResourceExhausted or codes.Unavailable (the
// errors that signal overload), true otherwise.
//
// [WithClassFunc] classifies calls for a priority shedder. The options
// about keys, costs, extra limits and delays are not ShedOptions: the
// compiler refuses them.
// When the Acquirer reports to an observer of its own (adaptive's
// WithObserver), give the observer to only one of the two, or each call is
// counted twice.
//
// Shed returns an error wrapping [floodgate.ErrInvalidConfig] when a is nil
// (or a typed nil), or an option is nil or invalid.
func Shed(a middleware.Acquirer, opts ...ShedOption) (*Interceptors, error) {
	if nilcheck.Is(a) {
		return nil, invalid("nil acquirer")
	}
	cfg, err := buildConfig(false, opts, ShedOption.applyShed)
	if err != nil {
		return nil, err
	}
	return &Interceptors{cfg: cfg, acq: a}, nil
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
	start := i.core.Start()
	var ev floodgate.Event
	if i.cfg.observer != nil {
		ev.Route = i.route(method)
	}
	if i.set != nil {
		return nil, i.admitPolicies(ctx, ss, method, ev, start)
	}
	var v admit.Verdict
	key, n, checks, err := i.request(ctx, method)
	switch {
	case err != nil:
		v = i.core.Fail(ctx, err, ev, start)
	case checks == nil:
		v = i.core.DecideOne(ctx, key, n, ev, start)
	default:
		v = i.core.Decide(ctx, checks, ev, start)
	}
	if v.Kind == admit.Deny {
		return nil, answer(ctx, ss, v, i.core.Deciding(checks, v))
	}
	return nil, answer(ctx, ss, v, "")
}

// request computes the call's key and cost and, with extra limits, its
// checks, turning a panic of a key or cost function into an error.
func (i *Interceptors) request(ctx context.Context, method string) (key string, n int, checks []floodgate.Check, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: grpclimit: a key or cost function: %v", middleware.ErrLimiterPanic, r)
		}
	}()
	key = i.cfg.key(ctx, method)
	n = 1
	if i.cfg.cost != nil {
		n = i.cfg.cost(ctx, method)
	}
	if len(i.cfg.limits) == 0 {
		return key, n, nil, nil
	}
	checks = make([]floodgate.Check, 1+len(i.cfg.limits))
	checks[0].Key, checks[0].N = key, n
	for j, x := range i.cfg.limits {
		k := key
		if x.key != nil {
			// An added limit's own key, as on HTTP: "" is the peer, and the
			// prefix belongs to the main key alone.
			if k = x.key(ctx, method); k == "" {
				k = i.cfg.peerKey(ctx)
			}
		}
		checks[j+1].Key, checks[j+1].N = k, n
	}
	return key, n, checks, nil
}

// answer translates the core's verdict into the call's fate: nil to run
// the handler, or the status refusing the call (with its trailer set).
// policy names the limit that refused a rate-limited call (a QuotaFailure
// detail), "" for none.
func answer(ctx context.Context, ss grpc.ServerStream, v admit.Verdict, policy string) error {
	switch v.Kind {
	case admit.Admit:
		return nil
	case admit.Deny:
		if cerr := ctx.Err(); cerr != nil && v.Reason == admit.ReasonDelay {
			// The call ended while it was held for its delay.
			return status.FromContextError(cerr).Err()
		}
		return refuse(ctx, ss, codes.ResourceExhausted, msgRateLimited, v.RetryAfter, quotaFailure(policy))
	case admit.NeverFits:
		msg := msgCostExceedsCapacity
		if v.Reason == admit.ReasonKey {
			msg = msgInvalidKey
		}
		setPushback(ctx, ss, noRetryPushback)
		return status.Error(codes.ResourceExhausted, msg)
	}
	// Unavailable. A call whose own context has ended gets the context's
	// status instead of a misleading Unavailable.
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	return refuse(ctx, ss, codes.Unavailable, msgLimiterUnavailable, admit.UnavailableRetry)
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

// classKey is the context key of the call's class.
type classKey struct{}

// ClassFromContext returns the class [WithClassFunc] gave the call, in the
// context a shedder's [middleware.Acquirer] receives; "" when there is none.
func ClassFromContext(ctx context.Context) string {
	c, _ := ctx.Value(classKey{}).(string)
	return c
}

// HeaderClass returns a [ClassFunc] that reads a call's class from the
// first value of the incoming metadata entry name (for example
// "x-priority"): the value when it is one of classes, fallback otherwise
// (missing, empty or unknown), so that a client cannot invent labels. The
// client chooses among classes: give a class only trusted callers may claim
// through a function of your own.
func HeaderClass(name, fallback string, classes ...string) ClassFunc {
	name = strings.ToLower(name)
	set := make(map[string]struct{}, len(classes))
	for _, c := range classes {
		set[c] = struct{}{}
	}
	return func(ctx context.Context, _ string) string {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			if _, ok := set[v[0]]; ok {
				return v[0]
			}
		}
		return fallback
	}
}

// classify runs the class function; a panic gives "unknown".
func (i *Interceptors) classify(ctx context.Context, method string) (class string) {
	defer func() {
		if r := recover(); r != nil {
			class = "unknown"
		}
	}()
	return i.cfg.class(ctx, method)
}

// admitShed is admit for a shedder.
func (i *Interceptors) admitShed(ctx context.Context, method string, ss grpc.ServerStream) (func(bool), error) {
	obs := i.cfg.observer
	var start int64
	if obs != nil {
		start = monotime.Nanotime()
	}
	ev := floodgate.Event{Source: floodgate.SourceRequest, Policy: i.cfg.name, Tier: i.cfg.tier}
	actx := ctx
	if i.cfg.class != nil {
		ev.Class = i.classify(ctx, method)
		actx = context.WithValue(ctx, classKey{}, ev.Class)
	}
	release, ok, err := i.acquire(actx)
	var refusal error
	switch {
	case err != nil && (i.cfg.failMode == middleware.FailOpen || i.cfg.dryRun):
		ev.Outcome = floodgate.OutcomeErrorOpen
	case err != nil:
		ev.Outcome = floodgate.OutcomeErrorClosed
		if cerr := ctx.Err(); cerr != nil {
			refusal = status.FromContextError(cerr).Err()
		} else {
			refusal = refuse(ctx, ss, codes.Unavailable, msgLimiterUnavailable, admit.UnavailableRetry)
		}
	case !ok && i.cfg.dryRun:
		ev.Outcome = floodgate.OutcomeWouldDeny
	case !ok:
		ev.Outcome = floodgate.OutcomeShed
		refusal = refuse(ctx, ss, codes.Unavailable, msgOverloaded, i.cfg.shedRetry)
	default:
		ev.Outcome = floodgate.OutcomeAllowed
	}
	if obs != nil {
		ev.Route, ev.Err = i.route(method), err
		ev.Latency = time.Duration(monotime.Nanotime() - start)
		obs.Observe(ev)
	}
	if refusal != nil || !ok {
		return nil, refusal
	}
	return release, nil
}

func (i *Interceptors) acquire(ctx context.Context) (release func(bool), ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			release, ok, err = nil, false, fmt.Errorf("%w: grpclimit: the acquirer: %v", middleware.ErrLimiterPanic, r)
		}
	}()
	release, ok, err = i.acq.Acquire(ctx)
	if err != nil && release != nil {
		safeRelease(release, false)
		release = nil
	}
	return release, ok, err
}

// refuse builds the status of a refused call, with a RetryInfo detail (and
// quota, when not nil), and sets the pushback trailer.
func refuse(ctx context.Context, ss grpc.ServerStream, code codes.Code, msg string, retry time.Duration, quota ...*errdetails.QuotaFailure) error {
	st := status.New(code, msg)
	if retry <= 0 {
		return st.Err()
	}
	details := []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}}
	if len(quota) == 1 && quota[0] != nil {
		details = append(details, quota[0])
	}
	if withInfo, err := st.WithDetails(details...); err == nil {
		st = withInfo
	}
	setPushback(ctx, ss, strconv.FormatInt(pushbackMillis(retry), 10))
	return st.Err()
}

// quotaFailure is the google.rpc.QuotaFailure detail naming the policy
// that refused a call ("policy:" and its name), nil when it has no name.
func quotaFailure(policy string) *errdetails.QuotaFailure {
	if policy == "" {
		return nil
	}
	return &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject: "policy:" + policy, Description: msgRateLimited,
	}}}
}

// setPushback sets the pushback trailer of a refused call.
func setPushback(ctx context.Context, ss grpc.ServerStream, pushback string) {
	md := metadata.MD{pushbackTrailer: []string{pushback}}
	if ss != nil {
		ss.SetTrailer(md)
		return
	}
	// Fails only when ctx is not a server call's context (a test calling
	// the interceptor directly); the status still says what it says.
	_ = grpc.SetTrailer(ctx, md)
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
