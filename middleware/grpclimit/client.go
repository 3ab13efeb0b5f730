package grpclimit

import (
	"context"
	"errors"
	"github.com/floodgate-go/floodgate/middleware"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
)

// retryPolicy is the client interceptor's retry of refused unary calls
// (WithMaxAttempts, WithBackoff, WithRetryable).
type retryPolicy struct {
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	retryable   func(fullMethod string) bool
}

type clientConfig struct {
	waiter      middleware.Waiter
	limiter     floodgate.Limiter
	limiterKey  KeyFunc
	cost        CostFunc
	pushback    bool
	maxPushback time.Duration
	retry       retryPolicy
	throttleSet bool
	perMethod   bool
	classMD     string // outgoing metadata entry holding the call's class; "": none
}

// WithThrottle throttles outgoing calls with w (for example a keyless
// bucket.Limiter): every call waits for its cost before it is sent.
func WithThrottle(w middleware.Waiter) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if nilcheck.Is(w) {
			return invalid("nil waiter")
		}
		if c.throttleSet {
			return invalid("more than one throttle (WithThrottle, WithThrottleLimiter)")
		}
		c.throttleSet, c.waiter = true, w
		return nil
	})
}

// WithThrottleLimiter throttles outgoing calls with a keyed limiter: every
// call waits (floodgate.Wait) for its cost under key(ctx, method). A nil key
// func keys by the full method name.
func WithThrottleLimiter(l floodgate.Limiter, key KeyFunc) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if nilcheck.Is(l) {
			return invalid("nil limiter")
		}
		if c.throttleSet {
			return invalid("more than one throttle (WithThrottle, WithThrottleLimiter)")
		}
		c.throttleSet, c.limiter, c.limiterKey = true, l, key
		return nil
	})
}

// WithPushback turns server pushback on or off (on by default). When on, a
// call refused with codes.ResourceExhausted or codes.Unavailable that
// carries a RetryInfo detail or a grpc-retry-pushback-ms trailer holds the
// later calls of its scope until the delay has passed (the longer of the
// two when both are present, capped by [WithMaxPushback]). The scope is
// what the server refused: the same method ([WithPushbackPerMethod]) and
// the same priority class ([WithPushbackClass]); calls of other scopes
// are sent as usual.
func WithPushback(on bool) ClientOption {
	return clientOption(func(c *clientConfig) error { c.pushback = on; return nil })
}

// WithPushbackPerMethod scopes pushback by method (on by default): a
// refusal holds only later calls to the method that was refused, so a tight
// limit on one expensive method, or a shed of one method's calls, does not
// hold the others. Turn it off when the server's limit covers the client as
// a whole (a rate limit per peer on every method), so that one refusal
// holds every method's calls instead of letting each be refused once.
func WithPushbackPerMethod(on bool) ClientOption {
	return clientOption(func(c *clientConfig) error { c.perMethod = on; return nil })
}

// WithPushbackClass scopes pushback by priority class: the class of a call
// is the first value of its outgoing metadata entry name (for example
// "x-priority", the entry the server's shedder classifies calls by; names
// are case-insensitive), and a refusal holds only later calls sent with the
// same class. A shed best-effort call then holds best-effort calls alone,
// not the critical ones the server still admits. Calls without the entry
// share one class of their own. By default calls are not told apart by
// class. Keep the values few (class names, not request IDs): the client
// keeps one pushback per method and class while it is in force.
func WithPushbackClass(name string) ClientOption {
	return clientOption(func(c *clientConfig) error {
		name = strings.ToLower(name)
		if !validMetadataName(name) {
			return invalid("bad metadata name %q", name)
		}
		c.classMD = name
		return nil
	})
}

// WithMaxPushback caps the delay a server may impose (default one minute),
// so that a wrong or hostile server cannot stall the client for hours.
func WithMaxPushback(d time.Duration) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if d <= 0 {
			return invalid("max pushback %v <= 0", d)
		}
		c.maxPushback = d
		return nil
	})
}

// WithMaxAttempts makes the client interceptor retry unary calls refused
// with codes.ResourceExhausted or codes.Unavailable, up to n attempts in
// all, the first included (2..10; 1, the default, never retries). Only
// methods that [WithRetryable] accepts are retried: list the idempotent
// ones. The delay before attempt k+1 is drawn uniformly from [0, min(cap,
// base x 2^(k-1))] ([WithBackoff], "full jitter") and is never shorter than
// the server's pushback; a retry whose delay would pass the call's deadline
// is not attempted. Do not also enable gRPC's own retry policy (from the
// service config) for the same methods, or attempts multiply. It applies to
// NewClient; the same option of package httplimit does the same for HTTP.
func WithMaxAttempts(n int) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if n < 1 || n > 10 {
			return invalid("max attempts %d outside 1..10", n)
		}
		c.retry.maxAttempts = n
		return nil
	})
}

// WithBackoff sets the retry backoff: the bound of the first retry's random
// delay, doubled at each retry, and its cap (0 < base <= cap <= 1 h; the
// default is 100 ms and 10 s). It applies to NewClient.
func WithBackoff(base, cap time.Duration) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if base <= 0 || cap < base || cap > time.Hour {
			return invalid("backoff base %v, cap %v: want 0 < base <= cap <= 1h", base, cap)
		}
		c.retry.baseDelay, c.retry.maxDelay = base, cap
		return nil
	})
}

// WithRetryable says which methods ("/package.Service/Method") may be sent
// twice, for [WithMaxAttempts]. It applies to NewClient.
func WithRetryable(f func(fullMethod string) bool) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if f == nil {
			return invalid("nil retryable func")
		}
		c.retry.retryable = f
		return nil
	})
}

// clientOption is an Option of NewClient alone.
func clientOption(f func(*clientConfig) error) ClientOption {
	return clientOpt(func(c *config) error { return f(&c.client) })
}

// Client holds the state of the client-side interceptors: the throttle and,
// per scope (method and class, see [WithPushback]), the time until which
// the server asked this client to hold its calls. Use one Client per
// connection (or per group of connections to the same service), and
// register both its interceptors so that unary calls and streams share the
// pushback. A Client is safe for concurrent use.
type Client struct {
	cfg  clientConfig
	base time.Time // times below are ns since base, on the monotonic clock
	// gates maps a pushback scope to the time before which no call of the
	// scope is sent (an *atomic.Int64; 0: none). A scope gets a gate on
	// its first refusal; ngates counts them, to prune expired ones.
	gates  sync.Map
	ngates atomic.Int64
}

// maxGates is the number of pushback scopes past which a refusal first
// drops the scopes whose pushback has expired.
const maxGates = 1024

// NewClient returns the client-side interceptors configured by opts. With
// no option it only honours server pushback, per method.
func NewClient(opts ...ClientOption) (*Client, error) {
	cfg, err := buildConfig(false, opts, ClientOption.applyClient)
	if err != nil {
		return nil, err
	}
	cc := cfg.client
	cc.cost = cfg.cost
	if cc.retry.maxAttempts > 1 && cc.retry.retryable == nil {
		return nil, invalid("WithMaxAttempts(%d) without WithRetryable: say which methods may be sent twice", cc.retry.maxAttempts)
	}
	return &Client{cfg: cc, base: time.Now()}, nil
}

// methodPushback returns the time until which the server asked this client
// to hold its calls to method (to any method when pushback is not per
// method) that carry no class (see [Client.PushbackFor]); the zero Time
// when no pushback is in force.
func (c *Client) methodPushback(method string) time.Time {
	return c.pushbackUntil(c.scopeOf(method, ""))
}

// PushbackFor returns the time until which a call to method made with ctx
// would be held: the pushback of its method and of the class its outgoing
// metadata carries ([WithPushbackClass]); the zero Time when none is in
// force.
func (c *Client) PushbackFor(ctx context.Context, method string) time.Time {
	return c.pushbackUntil(c.scope(ctx, method))
}

func (c *Client) pushbackUntil(scope string) time.Time {
	u := c.gate(scope, false).Load()
	if u == 0 || u <= c.now() {
		return time.Time{}
	}
	return c.base.Add(time.Duration(u))
}

// now reads the client's clock: nanoseconds since base, monotonic, so that
// a wall clock stepped back cannot stretch a pushback.
func (c *Client) now() int64 { return int64(time.Since(c.base)) }

// Unary returns the unary client interceptor: it waits for pushback and the
// throttle, sends the call, records the server's pushback, and retries by
// [WithMaxAttempts].
//
// A call that cannot be sent in time fails without reaching the network:
// codes.DeadlineExceeded when the wait would pass its deadline,
// codes.Canceled or codes.DeadlineExceeded when its context ends while
// waiting.
func (c *Client) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		retry := c.cfg.retry.maxAttempts > 1 && c.cfg.retry.retryable(method)
		var trailer metadata.MD
		if c.cfg.pushback || retry {
			opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
		}
		scope := c.scope(ctx, method)
		for attempt := 1; ; attempt++ {
			if err := c.before(ctx, method, scope); err != nil {
				return err
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil {
				return nil
			}
			pushback := c.record(scope, err, trailer)
			if !retry || attempt >= c.cfg.retry.maxAttempts || !retryable(err) || pushback < 0 {
				return err
			}
			wait := max(c.backoff(attempt), pushback)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				return err
			}
			if serr := sleep(ctx, wait); serr != nil {
				return serr
			}
			trailer = nil
		}
	}
}

// Stream returns the stream client interceptor: it waits for pushback and
// the throttle before opening the stream, and records the pushback a
// refused stream carries. Streams are not retried.
func (c *Client) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		scope := c.scope(ctx, method)
		if err := c.before(ctx, method, scope); err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.record(scope, err, nil)
			return nil, err
		}
		if !c.cfg.pushback {
			return cs, nil
		}
		return &watchedStream{ClientStream: cs, c: c, scope: scope}, nil
	}
}

// watchedStream records the pushback of a stream that ends refused.
type watchedStream struct {
	grpc.ClientStream
	c     *Client
	scope string
}

// RecvMsg receives like the wrapped stream and records a refusal's pushback.
func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && err != io.EOF {
		s.c.record(s.scope, err, s.ClientStream.Trailer())
	}
	return err
}

// scope returns the pushback scope of a call to method made with ctx.
func (c *Client) scope(ctx context.Context, method string) string {
	class := ""
	if c.cfg.classMD != "" {
		if v := metadataValue(ctx, c.cfg.classMD); len(v) > 0 {
			class = v[0]
		}
	}
	return c.scopeOf(method, class)
}

// scopeOf names the scope of a method and a class: the method (or "" when
// pushback is not per method), then, when there is a class, a NUL (which
// neither a method nor a metadata value holds) and the class.
func (c *Client) scopeOf(method, class string) string {
	if !c.cfg.perMethod {
		method = ""
	}
	if class == "" {
		return method
	}
	return method + "\x00" + class
}

// metadataValue returns the values of the outgoing metadata entry name
// (lower case), the call's own and those appended to ctx.
func metadataValue(ctx context.Context, name string) []string {
	md, _ := metadata.FromOutgoingContext(ctx)
	return md.Get(name)
}

// before waits for the pushback to pass and for the throttle to admit the
// call.
func (c *Client) before(ctx context.Context, method, scope string) error {
	if err := c.waitPushback(ctx, scope); err != nil {
		return err
	}
	if !c.cfg.throttleSet {
		return nil
	}
	n := 1
	if c.cfg.cost != nil {
		n = c.cfg.cost(ctx, method)
	}
	var err error
	if c.cfg.waiter != nil {
		err = c.cfg.waiter.WaitN(ctx, n)
	} else {
		key := method
		if c.cfg.limiterKey != nil {
			key = c.cfg.limiterKey(ctx, method)
		}
		_, err = floodgate.Wait(ctx, c.cfg.limiter, key, n)
	}
	if err != nil {
		return localError(err, "local rate limit")
	}
	return nil
}

// ErrPushbackDeadline is the error of a call the client interceptor did not
// send because the server's pushback would outlast the call's deadline
// (codes.DeadlineExceeded; test with errors.Is).
var ErrPushbackDeadline = status.Error(codes.DeadlineExceeded, "grpclimit: server pushback would outlast the call's deadline")

// gate returns the pushback time of a scope, made on first need when create
// is true (a scope never refused has none: a shared zero is returned).
func (c *Client) gate(scope string, create bool) *atomic.Int64 {
	if g, ok := c.gates.Load(scope); ok {
		return g.(*atomic.Int64)
	}
	if !create {
		return &noPushback
	}
	g, loaded := c.gates.LoadOrStore(scope, new(atomic.Int64))
	if !loaded && c.ngates.Add(1) > maxGates {
		c.prune(scope)
	}
	return g.(*atomic.Int64)
}

// prune drops the gates whose pushback has expired, except keep's. A refusal
// racing with it may record its pushback in a gate just dropped: the next
// call of that scope is then sent, and its refusal recorded anew.
func (c *Client) prune(keep string) {
	now := c.now()
	c.gates.Range(func(k, g any) bool {
		if k != keep && g.(*atomic.Int64).Load() <= now && c.gates.CompareAndDelete(k, g) {
			c.ngates.Add(-1)
		}
		return true
	})
}

// noPushback is the gate of scopes never refused; it is only read.
var noPushback atomic.Int64

// waitPushback holds the call until the pushback of its scope has passed.
func (c *Client) waitPushback(ctx context.Context, scope string) error {
	for {
		until := c.gate(scope, false).Load()
		if until == 0 {
			return nil
		}
		wait := time.Duration(until - c.now())
		if wait <= 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return ErrPushbackDeadline
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		// Loop: a refusal seen meanwhile may have moved the pushback on.
	}
}

// record reads the pushback a refused call carries and, when pushback is
// on, holds later calls of its scope until it has passed. It returns the
// delay (0 when there is none), or -1 when the server said that retrying is
// useless (a negative pushback, gRFC A6: the call can never be admitted).
func (c *Client) record(scope string, err error, trailer metadata.MD) time.Duration {
	if !retryable(err) {
		return 0
	}
	d, ok := RetryDelay(err)
	if never(trailer) {
		return -1
	}
	if v := trailer.Get(pushbackTrailer); len(v) == 1 {
		if ms, perr := strconv.ParseInt(v[0], 10, 64); perr == nil && ms >= 0 {
			ok = true
			if ms > int64(c.cfg.maxPushback/time.Millisecond) {
				d = c.cfg.maxPushback
			} else {
				d = max(d, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	if !ok || d <= 0 {
		return 0
	}
	d = min(d, c.cfg.maxPushback)
	if c.cfg.pushback {
		g := c.gate(scope, true)
		until := c.now() + int64(d)
		for {
			cur := g.Load()
			if cur >= until || g.CompareAndSwap(cur, until) {
				break
			}
		}
	}
	return d
}

// backoff draws the full-jitter delay after the given attempt (1-based).
func (c *Client) backoff(attempt int) time.Duration {
	p := c.cfg.retry
	ceil := p.maxDelay
	if shift := attempt - 1; shift < 32 && p.baseDelay<<shift < p.maxDelay && p.baseDelay<<shift > 0 {
		ceil = p.baseDelay << shift
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// retryable reports whether err is a refusal that pushback and retries apply
// to.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable:
		return true
	}
	return false
}

// sleep waits for d or until ctx ends, returning the context's status then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// localError turns a throttle's error into a status: the context's code
// when the wait ended with (or would pass) the context, Internal otherwise
// (a misconfigured local limiter; its text is the caller's own).
func localError(err error, what string) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "grpclimit: "+what+": "+err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "grpclimit: "+what+": "+err.Error())
	}
	return status.Error(codes.Internal, "grpclimit: "+what+": "+err.Error())
}

// never reports whether trailer holds a negative pushback: the server says
// that no retry of the call can succeed.
func never(trailer metadata.MD) bool {
	v := trailer.Get(pushbackTrailer)
	if len(v) != 1 {
		return false
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	return err == nil && ms < 0
}
