package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/store/algo"
)

// defaultPrefix is the key prefix of a [Store] built without [WithPrefix].
const defaultPrefix = "floodgate:"

// defaultTimeout is the per-decision timeout of a [Store] built without
// [WithTimeout].
const defaultTimeout = 50 * time.Millisecond

// Store is a [store.Store] on Redis, Redis Cluster or Sentinel, through a
// rueidis client. Every decision is one round trip (three for the first
// call of a library on a server, which loads it): one FCALL of a Redis
// function (EVALSHA of the same script on a server without functions) that
// embeds the algorithm's Lua twin, reads the time from the Redis server,
// and loads, steps and writes back the key's state atomically.
//
// A Store is safe for concurrent use. It holds no per-key state. A Store
// made by [New] does not own its client (closing the client is the
// caller's business); one made by [Dial] does.
type Store struct {
	client    rueidis.Client
	prefix    string
	timeout   time.Duration
	policy    FailurePolicy
	observer  floodgate.Observer
	name      string
	dl        *deadlines
	brk       breaker
	clock     floodgate.Clock // tests only: inject the time instead of Redis TIME
	coalesce  int             // max script calls in flight per algorithm before coalescing; 0: never
	groupCos  sync.Map        // *script (a group script) -> *groupCoalescer
	cluster   bool            // keys of one script must share a hash slot; set with client
	state     atomic.Int32    // stateUp, stateDialing, stateClosed
	dial      *dialer         // Dial only: makes the client and owns it
	between   func()          // tests only: runs between the phases of a multi-slot ApplyAll
	evalOnly  atomic.Bool     // EVALSHA, never FCALL (withEvalOnly)
	evalUntil atomic.Int64    // EVALSHA until this Nanotime: the server has no functions or the user may not use them

	mu       sync.Mutex
	policies atomic.Pointer[map[uint64][]*policy] // by namespace
}

type config struct {
	prefix   string
	timeout  time.Duration
	policy   FailurePolicy
	observer floodgate.Observer
	name     string
	clock    floodgate.Clock
	coalesce int
	evalOnly bool
	err      error
}

// Option configures a [Store]. Build one with a WithX function; the zero
// Option is refused by [New].
type Option struct{ apply func(*config) }

// WithPrefix sets the prefix of every key the store writes (default
// "floodgate:"). It must not contain '{' or '}': the store
// puts its own hash tag right after it.
func WithPrefix(prefix string) Option {
	return Option{func(c *config) {
		if strings.ContainsAny(prefix, "{}") {
			c.err = errors.Join(c.err, fmt.Errorf("%w: redisstore: prefix %q contains a brace", floodgate.ErrInvalidConfig, prefix))
		}
		c.prefix = prefix
	}}
}

// WithTimeout sets the per-decision timeout (default 50ms):
// a decision that Redis has not answered by then is a failure, handled by the
// [FailurePolicy]. A caller context with an earlier deadline wins. The timeout
// must be positive.
func WithTimeout(d time.Duration) Option {
	return Option{func(c *config) {
		if d <= 0 {
			c.err = errors.Join(c.err, fmt.Errorf("%w: redisstore: timeout %v <= 0", floodgate.ErrInvalidConfig, d))
		}
		c.timeout = d
	}}
}

// WithFailurePolicy sets what happens when Redis cannot decide (default
// [FailError]).
func WithFailurePolicy(p FailurePolicy) Option {
	return Option{func(c *config) { c.policy = p }}
}

// WithObserver reports the store's own outcomes to o (default none): the
// decisions of the failure policy ([floodgate.OutcomeErrorOpen],
// [floodgate.OutcomeErrorClosed], [floodgate.OutcomeFallback]), one event
// per call that Redis could not decide (a refund or a peek included), with
// Source [floodgate.SourceStore], the Redis error in Err and Policy the name
// set with [WithName]. Decisions Redis made are never reported: the
// transport (middleware, interceptor) reports each request once, with
// [floodgate.SourceRequest], and one observer can serve both. [FailError]
// reports nothing: the caller gets the error and reports what it did.
func WithObserver(o floodgate.Observer) Option {
	return Option{func(c *config) { c.observer = o }}
}

// defaultCoalescing is the coalescing threshold of a [Store] built without
// [WithCoalescing].
const defaultCoalescing = 2

// WithCoalescing sets how many script calls of one algorithm may be in flight
// before further calls are coalesced into one script call (default
// 2; 0 or less turns coalescing off). A coalesced call waits
// for an in-flight call to finish, then runs with the other waiting calls in
// one script call (one TIME, then each decision in turn, atomically): under
// concurrency this cuts the server's work per decision by about half. It
// applies to single-node and Sentinel clients (on a Cluster the keys of one
// script must share a slot), to single-policy calls (coalesced per
// algorithm) and to ApplyAll groups (coalesced per set of Lua twins: the
// waiting groups run one after the other in one script call, each all or
// nothing as alone).
func WithCoalescing(maxInFlight int) Option {
	return Option{func(c *config) { c.coalesce = maxInFlight }}
}

// WithName names the store in observer events (Event.Policy); default
// "redis".
func WithName(name string) Option {
	return Option{func(c *config) { c.name = name }}
}

// withClock is for tests only: the store passes clock's time to the script
// (in ARGV) instead of reading Redis TIME, so that a test controls time
// exactly. Keys then get a TTL of at least a minute whatever their time to
// full, because the injected time need not follow the server's.
func withClock(c floodgate.Clock) Option {
	return Option{func(cf *config) { cf.clock = c }}
}

// withEvalOnly is for tests and benchmarks only: the store runs its
// scripts with EVALSHA from the first call, as it does on a server without
// functions.
func withEvalOnly() Option {
	return Option{func(cf *config) { cf.evalOnly = true }}
}

// New returns a Store on client. The client may be a single node, Sentinel
// or Cluster client; a client built with DisableCache (client-side caching is
// of no use here) saves a little memory. Errors wrap
// [floodgate.ErrInvalidConfig]. To build a store while Redis may be down,
// use [Dial].
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if nilcheck.Is(client) {
		return nil, fmt.Errorf("%w: redisstore: nil client", floodgate.ErrInvalidConfig)
	}
	c, err := configure(opts)
	if err != nil {
		return nil, err
	}
	s := newStore(c)
	s.client = client
	s.cluster = client.Mode() == rueidis.ClientModeCluster
	s.state.Store(stateUp)
	return s, nil
}

// The states of a Store: its client is there (stateUp), not yet (Dial), or
// the store is closed.
const (
	stateUp int32 = iota
	stateDialing
	stateClosed
)

// configure applies opts to the defaults.
func configure(opts []Option) (config, error) {
	c := config{prefix: defaultPrefix, timeout: defaultTimeout, name: "redis", coalesce: defaultCoalescing}
	for _, o := range opts {
		if o.apply == nil {
			return c, fmt.Errorf("%w: redisstore: zero Option", floodgate.ErrInvalidConfig)
		}
		o.apply(&c)
	}
	if c.err != nil {
		return c, c.err
	}
	return c, c.policy.validate()
}

// newStore returns a Store of configuration c, without a client, in
// stateDialing.
func newStore(c config) *Store {
	s := &Store{
		prefix:   c.prefix,
		timeout:  c.timeout,
		policy:   c.policy,
		observer: c.observer,
		name:     c.name,
		dl:       newDeadlines(c.timeout),
		clock:    c.clock,
		coalesce: max(c.coalesce, 0),
	}
	s.state.Store(stateDialing)
	s.evalOnly.Store(c.evalOnly)
	s.brk.probe = s.ping
	empty := map[uint64][]*policy{}
	s.policies.Store(&empty)
	return s
}

// ping is the breaker's probe: a PING (to any node of a Cluster), bounded
// by the timeout. It is built as an arbitrary command, which rueidis does
// not retry: its own PING would be retried after a connection error until
// the context ends, one dial per retry.
func (s *Store) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	c := s.client
	return c.Do(noDeadline{ctx}, c.B().Arbitrary("PING").Build()).Error()
}

// admit is the gate of every call to Redis: a nil error, with the time the
// call is sent, when it may go; else the error to fail with (not
// connected yet, closed, or the breaker's).
func (s *Store) admit() (int64, error) {
	if st := s.state.Load(); st != stateUp {
		return 0, s.notUp(st)
	}
	return s.brk.admit()
}

// Close closes the store: every call from then on returns an error
// wrapping [floodgate.ErrClosed] (calls in flight decide or return it).
// A store made by [Dial] stops dialling and closes the client it made; one
// made by [New] leaves its client open (it is the caller's). Close is
// idempotent and returns nil.
func (s *Store) Close() error {
	if s.state.Swap(stateClosed) == stateClosed {
		return nil
	}
	if s.dial != nil {
		s.dial.close()
	}
	return nil
}

// keyOf returns the Redis key that holds key's state for alg: the prefix, a
// hash tag made of the 64-bit FNV-1a hash of key in hex (so that braces in
// key never steer the Cluster slot, and the keys of one user key share a
// slot across algorithms), the algorithm's namespace in hex, ':', and key
// itself (so that two user keys never share a Redis key, whatever their
// hashes).
func (s *Store) keyOf(key string, alg algo.Algorithm) string {
	return s.redisKey(key, hex16(alg.Spec().Namespace))
}

func (s *Store) redisKey(key, nsHex string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 2 + 16 + 16 + 1 + len(key))
	b.WriteString(s.prefix)
	var tag [18]byte
	tag[0] = '{'
	putHex16(tag[1:17], fnv64a(key))
	tag[17] = '}'
	b.Write(tag[:])
	b.WriteString(nsHex)
	b.WriteByte(':')
	b.WriteString(key)
	return b.String()
}

// maxPerNamespace bounds the prepared policies a Store keeps per namespace
// (the same limit with other parameters, after live changes).
const maxPerNamespace = 8

// prepare returns the cached policy for alg, preparing it on first use.
func (s *Store) prepare(alg algo.Algorithm) (*policy, error) {
	if alg == nil {
		return nil, fmt.Errorf("%w: redisstore: nil algorithm", floodgate.ErrInvalidConfig)
	}
	sp := alg.Spec()
	for _, p := range (*s.policies.Load())[sp.Namespace] {
		if p.same(&sp) {
			return p, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.policies.Load()
	for _, p := range old[sp.Namespace] {
		if p.same(&sp) {
			return p, nil
		}
	}
	p, err := newPolicy(alg, s.policy)
	if err != nil {
		return nil, err
	}
	if d, ok := p.local.(*dividedAlg); ok {
		d.trips = &s.brk.trips
	}
	if s.coalesce > 0 {
		p.co = newCoalescer(s, p, s.coalesce)
	}
	next := make(map[uint64][]*policy, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	list := append([]*policy{p}, old[sp.Namespace]...)
	next[sp.Namespace] = list[:min(len(list), maxPerNamespace)]
	s.policies.Store(&next)
	return p, nil
}

// Apply implements [store.Store]: one FCALL (or EVALSHA) that steps alg on key's state
// with cost n at the Redis server's time. See [FailurePolicy] for what
// happens when Redis cannot decide.
func (s *Store) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	var start int64
	if s.observer != nil {
		start = monotime.Nanotime()
	}
	p, err := s.prepare(alg)
	if err != nil {
		return floodgate.Decision{}, err
	}
	sent, err := s.admit()
	if err != nil {
		return s.fail(ctx, key, p, n, err, start)
	}
	var d floodgate.Decision
	if p.co != nil && !s.cluster {
		d, err = p.co.do(ctx, key, n)
	} else {
		d, err = s.eval(ctx, key, p, n)
	}
	s.brk.done(sent, err, ctx.Err() != nil)
	if err != nil {
		return s.fail(ctx, key, p, n, err, start)
	}
	return d, nil
}

// injectedNow is "" (use Redis TIME) unless a test injected a clock.
func (s *Store) injectedNow() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
}

// eval runs p's script for one call on key.
func (s *Store) eval(ctx context.Context, key string, p *policy, n int64) (floodgate.Decision, error) {
	cctx, cancel := s.callContext(ctx)
	if cancel != nil {
		defer cancel()
	}
	var kbuf [1]string
	var abuf [24]string
	keys, args := s.scriptArgs(kbuf[:0], abuf[:0], key, p, n)
	arr, err := s.call(cctx, p.script, keys, args).ToArray()
	if err != nil {
		return floodgate.Decision{}, err
	}
	if !p.oneWord { // the group script: {all, decision}
		if len(arr) != 7 {
			return floodgate.Decision{}, errReply
		}
		arr = arr[1:]
	}
	return decode(arr)
}

// scriptArgs appends the KEYS and ARGV of p's script for one call on key to
// keys and args.
func (s *Store) scriptArgs(keys, args []string, key string, p *policy, n int64) ([]string, []string) {
	keys = append(keys, s.redisKey(key, p.nsHex))
	cost := strconv.FormatInt(n, 10)
	if p.oneWord {
		args = append(args, cost, s.injectedNow())
		return keys, append(args, p.args...)
	}
	// One policy (twin 1) and one op (key 1, policy 1), every state kept.
	args = append(args, s.injectedNow(), "2", "1", "1")
	args = append(args, p.args...)
	return keys, append(args, "1", "1", cost)
}

var errReply = errors.New("redisstore: malformed script reply")

// decode turns the 6 numbers of a decision in a script's reply into a
// Decision.
func decode(arr []rueidis.RedisMessage) (floodgate.Decision, error) {
	if len(arr) < 6 {
		return floodgate.Decision{}, errReply
	}
	var v [6]int64
	for i := range v {
		x, err := arr[i].AsInt64()
		if err != nil {
			return floodgate.Decision{}, fmt.Errorf("%w: %w", errReply, err)
		}
		v[i] = x
	}
	return floodgate.Decision{
		Allowed:    v[0] != 0,
		Limit:      v[1],
		Remaining:  v[2],
		RetryAfter: micros.Dur(v[3]),
		ResetAfter: micros.Dur(v[4]),
		Delay:      micros.Dur(v[5]),
	}, nil
}

// callContext bounds one call by the store's timeout. A context without a
// Done channel (context.Background) gets a shared deadline context (no
// allocation); a context whose deadline is no later than the timeout is used
// as it is; any other one is wrapped with context.WithTimeout. rueidis is
// never shown the deadline (see sharedDeadline.Deadline): it waits on Done.
func (s *Store) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return s.dl.get(), nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		if s.dl.show {
			return ctx, nil
		}
		return noDeadline{ctx}, nil
	}
	c, cancel := context.WithTimeout(ctx, s.timeout)
	if s.dl.show {
		return c, cancel
	}
	return noDeadline{c}, cancel
}

// failure classifies the error of a call: [floodgate.ErrClosed] once the
// store is closed, the caller's own context error (returned as it is), an invalid configuration (returned as it is), or a
// Redis failure, which the failure policy handles: then handle is true and
// err wraps [floodgate.ErrStoreUnavailable] and the cause.
func (s *Store) failure(ctx context.Context, cause error) (err error, handle bool) {
	if s.state.Load() == stateClosed {
		return fmt.Errorf("redisstore: %w", floodgate.ErrClosed), false
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: %w", err), false
	}
	if errors.Is(cause, floodgate.ErrInvalidConfig) {
		return cause, false
	}
	return fmt.Errorf("%w: redis: %w", floodgate.ErrStoreUnavailable, cause), true
}

// fail applies the failure policy to a call of Apply that Redis could not
// decide.
func (s *Store) fail(ctx context.Context, key string, p *policy, n int64, cause error, start int64) (floodgate.Decision, error) {
	cause, handle := s.failure(ctx, cause)
	if !handle {
		return floodgate.Decision{}, cause
	}
	var d floodgate.Decision
	var outcome floodgate.Outcome
	switch s.policy.mode {
	case modeOpen:
		// Limit 0: a blanket answer, with no quota to advertise.
		d = floodgate.Decision{Allowed: true, Fallback: true}
		outcome = floodgate.OutcomeErrorOpen
	case modeClosed:
		d = floodgate.Decision{Allowed: n < 0, Fallback: true}
		if n >= 0 {
			d.RetryAfter = s.policy.retryAfter
		}
		outcome = floodgate.OutcomeErrorClosed
	case modeFallback:
		var err error
		d, err = s.policy.local.Apply(ctx, key, p.local, n)
		if err != nil {
			return floodgate.Decision{}, errors.Join(cause, fmt.Errorf("redisstore: fallback: %w", err))
		}
		d.Fallback = true
		outcome = floodgate.OutcomeFallback
	default:
		return floodgate.Decision{}, cause
	}
	s.report(outcome, d, cause, start)
	return d, nil
}

// report tells the observer about an outcome of the failure policy.
func (s *Store) report(outcome floodgate.Outcome, d floodgate.Decision, cause error, start int64) {
	if s.observer == nil {
		return
	}
	s.observer.Observe(floodgate.Event{
		Source:   floodgate.SourceStore,
		Policy:   s.name,
		Outcome:  outcome,
		Decision: d,
		Err:      cause,
		Latency:  time.Duration(monotime.Nanotime() - start),
	})
}
