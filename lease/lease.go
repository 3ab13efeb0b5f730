package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// Global is the shared store a [Limiter] leases from: *redisstore.Store
// implements it. Apply (through a [store.Limiter]) decides cold keys and
// takes back what Close returns; Grant debits a lease; Heartbeat and Leave
// count the processes that share the limit.
type Global interface {
	store.Store
	Grant(ctx context.Context, key string, alg algo.Algorithm, c algo.Claim) (algo.Grant, error)
	Heartbeat(ctx context.Context, group, member string, ttl time.Duration) (int, error)
	Leave(ctx context.Context, group, member string) (int, error)
}

// Mode is how a [Limiter] enforces the global limit.
type Mode uint8

const (
	// Leased (the default): hot keys spend tokens leased from the global
	// bucket, cold keys go to it directly. Never above the global limit.
	Leased Mode = iota
	// Divided: every key is decided in memory at the global rate and burst
	// divided by the number of live processes (from the heartbeats), with
	// no I/O per decision. About the global limit, not at most it.
	Divided
)

// Defaults of a [Config].
const (
	defaultRefresh   = 100 * time.Millisecond
	defaultHotRate   = 20.0
	defaultMaxKeys   = 100_000
	defaultHeartbeat = time.Second
)

// Config configures a [Limiter]. Only Bucket is required; every other
// zero field means its documented default.
type Config struct {
	// Bucket is the global limit: a token bucket whose state lives in the
	// Global store, shared by every process. Its Name is required (it is
	// the limit's identity on Redis and the name of its heartbeat group).
	Bucket bucket.Config
	// Mode is Leased (default) or Divided.
	Mode Mode
	// Refresh is the refresh period P (default 100ms, 1ms..10s): a lease
	// is sized to last about 1.5 P at the key's recent rate and renewed
	// when what is left would last less than P/2, so a busy key costs
	// about one Grant per P.
	Refresh time.Duration
	// TTL is how long leased tokens live unspent (default 3 x Refresh, at
	// least Refresh): tokens not spent by then are dropped (they were
	// debited: dropping under-admits, it never over-admits).
	TTL time.Duration
	// HotRate is the demand per second, in units of cost, from which a
	// key is leased (default 20/s); below it every decision is one direct
	// call to the global store, unless the global bucket refuses the key
	// or is found under a tenth full while the key has a quarter of it
	// (the bucket is likely divided: the key takes part). A leased key
	// whose demand falls below HotRate/2 goes back to direct calls once
	// its lease is spent or expired, unless it has a share of a divided
	// bucket.
	HotRate float64
	// MaxKeys bounds the keys the limiter tracks, cold or leased (default
	// 100,000). Keys beyond it are decided by direct calls.
	MaxKeys int
	// StoreFailurePolicy: when the global store cannot answer, decide by the
	// store's own failure policy (for redisstore: WithFailurePolicy's
	// error, open, closed or Fallback) rather than by the divided local
	// limit. Off (the default), a key whose lease is spent, and a key
	// decided directly whose call fails with
	// [floodgate.ErrStoreUnavailable], is decided in memory at the global
	// rate and burst divided by the live processes, starting where the
	// global bucket was at this node's last grant (Decision.Fallback set,
	// reported as [floodgate.OutcomeFallback]): the limit holds through an
	// outage. With StoreFailurePolicy and a store that fails open, an outage
	// removes the limit: choose it on purpose.
	StoreFailurePolicy bool
	// Heartbeat is the heartbeat period (default 1s, 10ms..1m); a process
	// not heard from for 3 periods is no longer counted.
	Heartbeat time.Duration
	// Workers is how many goroutines renew leases in the background
	// (default 4, at most 256).
	Workers int
	// Observer receives the limiter's own outcomes (default none): each
	// decision of the divided fallback, as [floodgate.OutcomeFallback]
	// with Source [floodgate.SourceStore], Policy the bucket's Name and
	// Err the global store's last error. Every other decision is the
	// transport's to report, and the store's failure policy reports its
	// own (redisstore.WithObserver).
	Observer floodgate.Observer
	// Clock is for tests (default the system clock). The global store
	// keeps its own time (Redis: the server's).
	Clock floodgate.Clock

	inline bool   // tests: no goroutines; renewals in the calling goroutine, sweeps by hand
	seed   uint64 // tests (with inline): the jitter's seed, for a deterministic run
}

// Limiter is a keyed token bucket with a global limit, decided at local
// speed: a [floodgate.Limiter], [floodgate.Refunder] (a refund is one call
// to the global store) and
// [floodgate.Describer], safe for concurrent use. See the package
// documentation.
//
// A leased decision's Limit is the global burst, its Remaining the tokens
// this node's lease still holds for the key (what the node can admit
// without asking), and its ResetAfter the global bucket's as of the last
// grant. A decision made by the global store (a cold key) is the store's.
type Limiter struct {
	global  Global
	direct  *store.Limiter
	alg     algo.Algorithm
	cfg     bucket.Config
	mode    Mode
	burst   int64
	tokenUS int64 // the global bucket's interval as its step has it, µs
	refresh int64 // ns
	// sharePeriod is how often a node claims its share of a divided
	// bucket: the refresh period, or 0.9 of the time the bucket takes to
	// fill when that is shorter (claims further apart than that would
	// let the bucket overflow and lose the refill).
	sharePeriod int64 // ns
	ttl         int64 // ns
	hotRate     float64
	hotN        uint32 // cold-key demand in one window that promotes the key
	tick        int64  // ns, the sweeper's period
	window      int64  // ns, the window over which cold keys are counted
	windowAt    int64  // when the current window started (the sweeper's)
	maxKeys     int
	divFall     bool
	hbEvery     time.Duration
	clock       floodgate.Clock // nil: monotime.Nanotime
	observer    floodgate.Observer
	lastErr     atomic.Pointer[error] // the last failed grant's
	member      string

	tab     table
	nodes   atomic.Int64
	local   *memstore.Store
	divided atomic.Pointer[dividedLim]

	work     chan *entry
	inline   bool // tests: renew in the calling goroutine, no background
	jitter   func() float64
	quit     chan struct{}
	wg       sync.WaitGroup
	closed   atomic.Bool
	closeMu  sync.Mutex
	closeErr error

	st stats
}

type dividedLim struct {
	nodes int64
	lim   *store.Limiter
}

type stats struct {
	grants, granted, expired, returned, direct, failures, localDenied, shared atomic.Int64
}

// New returns a Limiter of c's global limit on global. It heartbeats once
// (bounded by the store's timeout; an error only leaves the count of
// processes at 1) and starts the background goroutines, which Close stops.
// Errors wrap [floodgate.ErrInvalidConfig].
func New(global Global, c Config) (*Limiter, error) {
	if nilcheck.Is(global) {
		return nil, fmt.Errorf("%w: lease: nil global store", floodgate.ErrInvalidConfig)
	}
	if c.Bucket.Name == "" {
		return nil, fmt.Errorf("%w: lease: the bucket needs a Name (its identity in the global store)", floodgate.ErrInvalidConfig)
	}
	direct, err := bucket.NewKeyed(global, c.Bucket)
	if err != nil {
		return nil, err
	}
	if c.Mode > Divided {
		return nil, fmt.Errorf("%w: lease: unknown mode %d", floodgate.ErrInvalidConfig, c.Mode)
	}
	if _, ok := direct.Algorithm().(algo.Granter); !ok {
		return nil, fmt.Errorf("%w: lease: the bucket cannot grant", floodgate.ErrInvalidConfig)
	}
	if err := c.withDefaults(); err != nil {
		return nil, err
	}
	local, err := memstore.New()
	if err != nil {
		return nil, err
	}
	tick := int64(c.Refresh) / 2
	window := max(tick, int64(coldWindow))
	l := &Limiter{
		global:      global,
		direct:      direct,
		alg:         direct.Algorithm(),
		cfg:         c.Bucket,
		mode:        c.Mode,
		burst:       c.Bucket.Burst,
		tokenUS:     (int64(c.Bucket.Rate.Per/time.Microsecond) + c.Bucket.Rate.N - 1) / c.Bucket.Rate.N,
		refresh:     int64(c.Refresh),
		sharePeriod: int64(min(float64(c.Refresh), 0.9*float64(c.Bucket.Burst)*float64(c.Bucket.Rate.Per)/float64(c.Bucket.Rate.N))),
		ttl:         int64(c.TTL),
		hotRate:     c.HotRate,
		hotN:        uint32(max(2, math.Ceil(c.HotRate*float64(window)/1e9))),
		tick:        tick,
		window:      window,
		maxKeys:     c.MaxKeys,
		divFall:     !c.StoreFailurePolicy,
		hbEvery:     c.Heartbeat,
		clock:       c.Clock,
		observer:    c.Observer,
		member:      strconv.FormatUint(rand.Uint64(), 36),
		local:       local,
		work:        make(chan *entry, 1024),
		quit:        make(chan struct{}),
	}
	l.jitter = rand.Float64
	if c.inline && c.seed != 0 {
		l.jitter = rand.New(rand.NewPCG(c.seed, c.seed)).Float64 // one goroutine only
		l.member = "sim" + strconv.FormatUint(c.seed, 36)
	}
	l.tab.init()
	l.nodes.Store(1)
	if _, err := l.dividedFor(1); err != nil {
		local.Close()
		return nil, err
	}
	l.heartbeat()
	if l.inline = c.inline; !l.inline {
		l.wg.Add(2 + c.Workers)
		go l.sweepLoop()
		go l.heartbeatLoop()
		for range c.Workers {
			go l.worker()
		}
	}
	return l, nil
}

// withDefaults puts the documented default in every zero field of c (but
// Bucket and Mode) and refuses the values outside their ranges.
func (c *Config) withDefaults() error {
	c.fillDefaults()
	if err := c.checkPeriods(); err != nil {
		return err
	}
	return c.checkRest()
}

// fillDefaults gives every zero field its documented default.
func (c *Config) fillDefaults() {
	if c.Refresh == 0 {
		c.Refresh = defaultRefresh
	}
	if c.TTL == 0 {
		c.TTL = 3 * c.Refresh
	}
	if c.HotRate == 0 {
		c.HotRate = defaultHotRate
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = defaultMaxKeys
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = defaultHeartbeat
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
}

// checkPeriods checks the durations: refresh, TTL and heartbeat.
func (c *Config) checkPeriods() error {
	if c.Refresh < time.Millisecond || c.Refresh > 10*time.Second {
		return fmt.Errorf("%w: lease: refresh %v outside 1ms..10s", floodgate.ErrInvalidConfig, c.Refresh)
	}
	if c.TTL < c.Refresh || c.TTL > time.Hour {
		return fmt.Errorf("%w: lease: TTL %v outside refresh (%v)..1h", floodgate.ErrInvalidConfig, c.TTL, c.Refresh)
	}
	if c.Heartbeat < 10*time.Millisecond || c.Heartbeat > time.Minute {
		return fmt.Errorf("%w: lease: heartbeat %v outside 10ms..1m", floodgate.ErrInvalidConfig, c.Heartbeat)
	}
	return nil
}

// checkRest checks the other fields.
func (c *Config) checkRest() error {
	if !(c.HotRate > 0) || math.IsInf(c.HotRate, 0) {
		return fmt.Errorf("%w: lease: hot rate %v, want a finite rate > 0", floodgate.ErrInvalidConfig, c.HotRate)
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("%w: lease: max keys %d < 0", floodgate.ErrInvalidConfig, c.MaxKeys)
	}
	if c.Workers < 1 || c.Workers > 256 {
		return fmt.Errorf("%w: lease: %d workers, want 1..256", floodgate.ErrInvalidConfig, c.Workers)
	}
	if c.Clock != nil && nilcheck.Is(c.Clock) {
		return fmt.Errorf("%w: lease: typed-nil clock", floodgate.ErrInvalidConfig)
	}
	if c.Observer != nil && nilcheck.Is(c.Observer) {
		return fmt.Errorf("%w: lease: typed-nil observer", floodgate.ErrInvalidConfig)
	}
	return nil
}

// now is the limiter's clock in nanoseconds.
func (l *Limiter) now() int64 {
	if l.clock == nil {
		return monotime.Nanotime()
	}
	return l.clock.Now().UnixNano()
}

// Describe implements [floodgate.Describer]: the global limit.
func (l *Limiter) Describe() floodgate.Description { return l.direct.Describe() }

// Shared reports true: a Limiter's state is the global bucket that every
// node shares, so that transports hashing credentials into its keys
// require the fleet's secret (see
// [github.com/floodgate-go/floodgate/store.IsShared]).
func (l *Limiter) Shared() bool { return true }

// Take implements [floodgate.Limiter]. A leased decision is made in memory
// (no clock read, no allocation, one atomic compare-and-swap); see the
// package documentation for the other paths.
func (l *Limiter) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if n < 1 || int64(n) > l.burst {
		return l.direct.Take(ctx, key, n) // the store limiter's cost error
	}
	if l.closed.Load() {
		return floodgate.Decision{}, fmt.Errorf("lease: %w", floodgate.ErrClosed)
	}
	if l.mode == Divided {
		return l.divided.Load().lim.Take(ctx, key, n)
	}
	e := l.tab.get(key)
	if e == nil {
		if e = l.tab.add(key, l.maxKeys, l.now()); e == nil {
			return l.directTake(ctx, nil, key, int64(n))
		}
	}
	if e.leased.Load() {
		cost := uint64(n)
		for {
			w := e.word.Load()
			if w&tokenMask < cost {
				break
			}
			if e.word.CompareAndSwap(w, w-cost+cost<<32) {
				left := int64(w&tokenMask) - int64(n)
				if left <= e.low.Load() && !e.flight.Load() {
					l.kick(e)
				}
				return floodgate.Decision{Allowed: true, Limit: l.burst, Remaining: left, ResetAfter: time.Duration(e.reset.Load())}, nil
			}
		}
	}
	return l.slow(ctx, e, key, int64(n))
}

// slow decides a request that the lease could not: a cold key, a lease
// spent or expired.
func (l *Limiter) slow(ctx context.Context, e *entry, key string, n int64) (floodgate.Decision, error) {
	dem := uint32((e.word.Add(uint64(n)<<32) >> 32))
	if !e.leased.Load() {
		if d, done, err := l.cold(ctx, e, key, n, dem); done {
			return d, err
		}
	}
	return l.leasedTake(ctx, e, key, n)
}

// cold decides a request of a key that does not lease yet, on the global
// bucket while its demand (dem, this window's count) is below the hot
// rate. done is false when the key turned leased instead: the lease then
// decides the request.
func (l *Limiter) cold(ctx context.Context, e *entry, key string, n int64, dem uint32) (d floodgate.Decision, done bool, err error) {
	if dem-e.window.Load() < l.hotN {
		d, err := l.directTake(ctx, e, key, n)
		if err == nil && !d.Fallback && (!d.Allowed || l.burst >= 10 && d.Remaining*10 < l.burst) && 4*(dem-e.window.Load()) >= l.hotN {
			// Refused by the global bucket, or finding it under a
			// tenth full, with a quarter of the hot demand: the key
			// leases from now on, so that this node takes part in the
			// division of a saturated bucket rather than taking the
			// refill that drips in between the others' claims.
			e.leased.Store(true)
		}
		if err != nil || d.Allowed || !e.leased.Load() {
			return d, true, err
		}
		// Refused while the key turned leased (here or by another
		// request): its bucket may be divided into this node's pool
		// by now; the refusal took nothing, so the lease decides (and
		// the decision is not a direct one).
		l.st.direct.Add(-1)
	}
	e.leased.Store(true) // hot: lease from this request on
	return floodgate.Decision{}, false, nil
}

// leasedTake decides a request of a leased key: from what the node holds,
// renewing the lease (or waiting for the renewal in flight) when it holds
// too little, within the refusal the last grant left.
func (l *Limiter) leasedTake(ctx context.Context, e *entry, key string, n int64) (floodgate.Decision, error) {
	now := l.now()
	if d, ok := l.stillRefused(e, now, n); ok {
		return d, nil
	}
	for attempt := 0; attempt < 2 || e.shared.Load() && attempt < maxShareAttempts; attempt++ {
		if now < e.failedUntil.Load() {
			return l.onFailure(ctx, e, key, n)
		}
		if d, ok, err := l.awaitGrant(ctx, e, n); ok || err != nil {
			return d, err
		}
		now = l.now()
		if d, ok := l.stillRefused(e, now, n); ok {
			return d, nil
		}
	}
	if e.shared.Load() {
		// Others took this node's share each time: the bucket is divided
		// (a direct decision would find it empty); refuse until the next
		// claim (a millisecond when it may claim at once).
		e.denied.Add(1)
		wait := max(e.deniedUntil.Load()-l.now(), int64(time.Millisecond))
		return floodgate.Decision{Limit: l.burst, RetryAfter: time.Duration(wait), ResetAfter: time.Duration(e.reset.Load())}, nil
	}
	// Others took the grant meanwhile: the global bucket decides this one.
	return l.directTake(ctx, e, key, n)
}

// stillRefused refuses a request of n units at now when the last grant's
// refusal still covers it (and the crumbs held cannot pay for it).
func (l *Limiter) stillRefused(e *entry, now, n int64) (floodgate.Decision, bool) {
	until := e.deniedUntil.Load()
	if now >= until || n <= e.crumbs.Load() {
		return floodgate.Decision{}, false
	}
	e.denied.Add(1)
	return floodgate.Decision{Limit: l.burst, RetryAfter: time.Duration(until - now), ResetAfter: time.Duration(e.reset.Load())}, true
}

// awaitGrant renews the key's lease, or waits for the renewal another
// request has in flight, then takes n units from what the node holds. ok
// reports a decision taken; err is the context's end.
func (l *Limiter) awaitGrant(ctx context.Context, e *entry, n int64) (d floodgate.Decision, ok bool, err error) {
	f, mine := e.startFlight()
	if mine {
		l.renew(ctx, e, f, n)
		if err := ctx.Err(); err != nil {
			if d, ok := l.takeHeld(e, n); ok {
				return d, true, nil
			}
			return floodgate.Decision{}, false, fmt.Errorf("lease: %w", err)
		}
	} else {
		select {
		case <-f.done:
		case <-ctx.Done():
			return floodgate.Decision{}, false, fmt.Errorf("lease: %w", ctx.Err())
		}
	}
	d, ok = l.takeHeld(e, n)
	return d, ok, nil
}

// maxShareAttempts bounds the claims one request of a divided key makes
// when the other requests of the node take each share before it can.
const maxShareAttempts = 6

// directTake decides a request on the global store; when the store cannot
// answer, the divided fallback decides it (unless StoreFailurePolicy).
func (l *Limiter) directTake(ctx context.Context, e *entry, key string, n int64) (floodgate.Decision, error) {
	l.st.direct.Add(1)
	d, err := l.direct.Take(ctx, key, int(n))
	if err != nil && l.divFall && ctx.Err() == nil && errors.Is(err, floodgate.ErrStoreUnavailable) {
		l.lastErr.Store(&err)
		return l.divide(ctx, e, key, n)
	}
	if err == nil && e != nil {
		// Where the global bucket stands, for a fallback that starts.
		e.reset.Store(int64(d.ResetAfter))
		e.falling.Store(false)
	}
	return d, err
}

// Refund implements [floodgate.Refunder]: n units taken earlier on key go
// back to the global bucket (one call; never beyond its burst). They do
// not go back into this node's lease: the lease cannot tell units it
// handed out from units it never held, and crediting the latter would
// let the node spend tokens the global bucket never granted.
func (l *Limiter) Refund(ctx context.Context, key string, n int) error {
	if l.mode == Divided {
		return l.divided.Load().lim.Refund(ctx, key, n)
	}
	return l.direct.Refund(ctx, key, n)
}

// Look tells what this node's lease on key would decide for a cost of n,
// taking nothing: admitted when the lease holds n tokens (Remaining is
// what it holds), refused while the global bucket's last answer to this
// node says to wait. ok is false when this node would ask the global
// bucket (the key is not leased here, its lease is spent, the limiter is
// divided or closed): its store limiter's Peek then tells the answer.
func (l *Limiter) Look(key string, n int) (d floodgate.Decision, ok bool) {
	if n < 1 || int64(n) > l.burst || l.closed.Load() || l.mode == Divided {
		return floodgate.Decision{}, false
	}
	e := l.tab.get(key)
	if e == nil || !e.leased.Load() {
		return floodgate.Decision{}, false
	}
	if held := int64(e.word.Load() & tokenMask); held >= int64(n) {
		return floodgate.Decision{Allowed: true, Limit: l.burst, Remaining: held, ResetAfter: time.Duration(e.reset.Load())}, true
	}
	if now := l.now(); now < e.deniedUntil.Load() && int64(n) > e.crumbs.Load() {
		return floodgate.Decision{Limit: l.burst, RetryAfter: time.Duration(e.deniedUntil.Load() - now), ResetAfter: time.Duration(e.reset.Load())}, true
	}
	return floodgate.Decision{}, false
}

// takeHeld takes n from the lease, if it holds them.
func (l *Limiter) takeHeld(e *entry, n int64) (floodgate.Decision, bool) {
	for {
		w := e.word.Load()
		if int64(w&tokenMask) < n {
			return floodgate.Decision{}, false
		}
		if e.word.CompareAndSwap(w, w-uint64(n)) {
			return floodgate.Decision{Allowed: true, Limit: l.burst, Remaining: int64(w&tokenMask) - n, ResetAfter: time.Duration(e.reset.Load())}, true
		}
	}
}

// onFailure decides a request whose key's lease is spent while the global
// store cannot answer.
func (l *Limiter) onFailure(ctx context.Context, e *entry, key string, n int64) (floodgate.Decision, error) {
	if l.divFall {
		return l.divide(ctx, e, key, n)
	}
	l.st.direct.Add(1)
	return l.direct.Take(ctx, key, int(n))
}

// divide decides a request in memory at the global limit divided by the
// live nodes. A tracked key's first such decision since its last grant
// first spends, from its local bucket, what the global bucket had spent
// at that grant (divided too): the fallback starts where the limit was,
// not with a full burst on every node.
func (l *Limiter) divide(ctx context.Context, e *entry, key string, n int64) (floodgate.Decision, error) {
	start := monotime.Nanotime()
	lim := l.divided.Load().lim
	switch {
	case e == nil:
		// An untracked key (beyond MaxKeys): where the global bucket
		// stands is unknown, so its local bucket starts drained.
		if d, err := lim.Peek(ctx, key); err == nil && d.Remaining == lim.Describe().Capacity {
			l.drain(ctx, lim, key, l.burst*l.tokenUS*int64(time.Microsecond))
		}
	case !e.falling.Load():
		// The switch: drain before any decision of the key is made on
		// the local bucket (the others wait for it).
		e.mu.Lock()
		if !e.falling.Load() {
			l.drain(ctx, lim, key, e.reset.Load())
			e.falling.Store(true)
		}
		e.mu.Unlock()
	}
	d, err := lim.Take(ctx, key, int(n))
	if err != nil {
		return d, err
	}
	d.Fallback = true
	if l.observer != nil {
		var cause error
		if p := l.lastErr.Load(); p != nil {
			cause = *p
		}
		l.observer.Observe(floodgate.Event{Source: floodgate.SourceStore, Policy: l.cfg.Name, Outcome: floodgate.OutcomeFallback,
			Decision: d, Err: cause, Latency: time.Duration(monotime.Nanotime() - start)})
	}
	return d, nil
}

// drain spends from the divided bucket of key what the global bucket had
// spent at the last grant (reset: its time to full then, ns), divided by
// the nodes.
func (l *Limiter) drain(ctx context.Context, lim *store.Limiter, key string, reset int64) {
	nodes := max(1, l.nodes.Load())
	spent := min(l.burst, (reset/int64(time.Microsecond)+l.tokenUS-1)/max(1, l.tokenUS))
	k := int((spent + nodes - 1) / nodes)
	if k < 1 {
		return
	}
	if d, err := lim.Take(ctx, key, k); err == nil && !d.Allowed && d.Remaining > 0 {
		lim.Take(ctx, key, int(d.Remaining)) // it had fewer: spend what it has
	}
}

// kick asks a worker to renew e's lease, unless a renewal is in flight.
func (l *Limiter) kick(e *entry) {
	f, mine := e.startFlight()
	if !mine {
		return
	}
	if l.inline {
		l.renew(context.Background(), e, f, 0)
		return
	}
	select {
	case l.work <- e:
		if l.closed.Load() {
			// Close may have drained the queue already: no worker will
			// take this one.
			l.drainWork()
		}
	default:
		e.endFlight(f) // every worker busy: a later decision asks again
	}
}

// drainWork ends the flights of the renewals queued for the workers that
// no worker took (the workers have quit): without it Close, and the
// requests waiting for such a renewal, would wait for it forever.
func (l *Limiter) drainWork() {
	for {
		select {
		case e := <-l.work:
			e.mu.Lock()
			f := e.fl
			e.mu.Unlock()
			if f != nil {
				e.endFlight(f)
			}
		default:
			return
		}
	}
}

func (l *Limiter) worker() {
	defer l.wg.Done()
	for {
		select {
		case <-l.quit:
			return
		case e := <-l.work:
			e.mu.Lock()
			f := e.fl
			e.mu.Unlock()
			if f != nil {
				l.renew(context.Background(), e, f, 0)
			}
		}
	}
}

// renew asks the global store for e's next lease (need: a waiting
// request's cost, 0 for a background renewal) and ends the flight f.
func (l *Limiter) renew(ctx context.Context, e *entry, f *flight, need int64) {
	defer e.endFlight(f)
	size, demand := l.size(e, l.now())
	c := l.claim(e, size, demand, need)
	g, err := l.global.Grant(ctx, e.key, l.alg, c)
	l.st.grants.Add(1)
	if err == nil && !g.Shared && g.Granted == 0 && need > 0 && g.Remaining >= need {
		// Fewer than a batch, but enough for the request that waits:
		// take what is there (what a direct decision would have
		// admitted), rather than deny it with tokens in the bucket.
		// (c stays the batch asked: what the answer is judged against.)
		retry := c
		retry.Want, retry.Least = g.Remaining, need
		g, err = l.global.Grant(ctx, e.key, l.alg, retry)
		l.st.grants.Add(1)
	}
	now := l.now()
	if err != nil {
		l.renewFailed(ctx, e, err, now)
		return
	}
	l.granted(ctx, e, g, c, size, now)
}

// claim is what e's renewal asks: a lease of size units (the share of a
// divided bucket: up to two periods of demand), at least need.
func (l *Limiter) claim(e *entry, size, demand, need int64) algo.Claim {
	want := max(size, need)
	if e.shared.Load() {
		// The bucket is divided: take the share (what accrued for this
		// node since its last claim, less than its demand over a period),
		// up to two periods of demand, which leaves what a node would
		// hoard (the burst spread at the start of a storm) in its pool.
		want = min(l.burst, maxLease, max(size, int64(math.Ceil(2*float64(demand)*float64(l.sharePeriod)/1e9))))
	}
	least := max(need, (size+3)/4)
	if need > 0 && e.starved.Load() && l.nodes.Load() == 1 {
		// The bucket had fewer than a batch: a waiting request takes
		// what there is, as a direct decision would.
		least = need
	}
	least = max(1, min(least, want))
	return algo.Claim{Want: want, Least: least, Member: l.member, Demand: demand, Period: time.Duration(2 * l.ttl)}
}

// renewFailed records a renewal the store could not answer.
func (l *Limiter) renewFailed(ctx context.Context, e *entry, err error, now int64) {
	if ctx.Err() != nil {
		return // the caller gave up: that says nothing about the store
	}
	l.st.failures.Add(1)
	if errors.Is(err, floodgate.ErrStoreUnavailable) {
		// The store is away: the failure policy decides for a while.
		// Any other error (a refused claim) leaves the key to the
		// direct decision, which returns it.
		l.lastErr.Store(&err)
		e.failedUntil.Store(now + retryAfterFailure)
	}
}

// granted records the answer g to the claim c of e's renewal, and hands
// the node what it was granted.
func (l *Limiter) granted(ctx context.Context, e *entry, g algo.Grant, c algo.Claim, size, now int64) {
	e.failedUntil.Store(0)
	e.falling.Store(false)
	e.reset.Store(g.Reset * int64(time.Microsecond))
	e.shared.Store(g.Shared)
	switch {
	case g.Shared:
		l.shareGranted(e, g, c.Want, size, now)
		if g.Granted == 0 {
			return
		}
	case g.Granted == 0:
		l.starvedFor(e, g, c.Least, now)
		return
	}
	l.st.granted.Add(g.Granted)
	if l.closed.Load() {
		// Close gave back what the leases held: return this one too.
		if l.direct.Refund(context.WithoutCancel(ctx), e.key, int(g.Granted)) == nil {
			l.st.returned.Add(g.Granted)
		}
		return
	}
	if !g.Shared {
		e.deniedUntil.Store(0)
		e.crumbs.Store(0)
		e.starved.Store(g.Granted < c.Least)
		// Renew when what is left would last less than P/2 at the key's
		// rate, and at the latest with half the lease left.
		e.low.Store(min(int64(float64(c.Demand)*float64(l.refresh)/2e9), size/2))
	}
	if g.Granted > 0 {
		e.expires.Store(now + l.ttl)
		e.word.Add(uint64(g.Granted))
	}
	e.size.Store(size)
}

// shareGranted records a claim on a divided bucket: one claim per period,
// the share growing with the refill until then; sooner when the burst
// capped the claim (want granted), later when the share needs longer for
// a unit.
func (l *Limiter) shareGranted(e *entry, g algo.Grant, want, size, now int64) {
	e.claimed.Store(true)
	l.st.shared.Add(1)
	next := l.sharePeriod
	if g.Granted == want {
		next = 0
	} else if g.Granted == 0 {
		next = max(next, min(g.Wait*int64(time.Microsecond), l.ttl))
	}
	e.crumbs.Store(0)
	e.deniedUntil.Store(now + next)
	e.low.Store(-1)
	e.size.Store(size)
}

// starvedFor records a calm bucket's "not yet": fewer tokens than the
// batch asked (least).
func (l *Limiter) starvedFor(e *entry, g algo.Grant, least, now int64) {
	// Nodes that wait for the same tokens would all ask again at once,
	// and all but one get nothing: spread their next attempts over up to
	// min(N-1, 4) more waits.
	wait := g.Wait * int64(time.Microsecond)
	if l.nodes.Load() == 1 {
		// No other node competes for the refill: deny locally until one
		// token is there (what a direct decision would say), not until
		// the batch asked for; the next request then takes what there is.
		wait = max(0, g.Wait-(least-1)*l.tokenUS) * int64(time.Microsecond)
		e.starved.Store(true)
	} else if n := min(l.nodes.Load()-1, 4); n > 0 {
		wait += int64(l.jitter() * float64(n) * float64(wait))
	}
	e.crumbs.Store(g.Remaining)
	e.deniedUntil.Store(now + wait)
}

// coldWindow is the shortest window over which the demand of a cold key
// is counted: a key needs at least 2 requests in one to lease, so a key
// seen about once a second never does.
const coldWindow = 250 * time.Millisecond

// retryAfterFailure is how long a key whose renewal failed waits before
// the next attempt (the store's breaker paces the connection attempts).
const retryAfterFailure = int64(20 * time.Millisecond)

// size samples e's demand rate and returns the lease to ask for (the rate
// times 1.5 P, at least 1, at most a fair share of the burst) and the
// demand to report, in units per second.
func (l *Limiter) size(e *entry, now int64) (int64, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sample(now, l.refresh)
	share := (l.burst + l.nodes.Load() - 1) / l.nodes.Load()
	s := int64(math.Ceil(e.rate * 1.5 * float64(l.refresh) / 1e9))
	return max(1, min(s, share, l.burst, maxLease)), int64(max(1, min(math.Round(e.rate), maxDemand)))
}

// maxDemand bounds the demand a claim reports (algo.Claim: below 2^32).
const maxDemand = 1<<32 - 1

// maxLease bounds one lease (the tokens held live in 32 bits).
const maxLease = 1 << 30

// dividedFor returns the in-memory limiter at the global limit divided by
// nodes, building it when nodes changed.
func (l *Limiter) dividedFor(nodes int64) (*store.Limiter, error) {
	if d := l.divided.Load(); d != nil && d.nodes == nodes {
		return d.lim, nil
	}
	c := l.cfg
	c.Name += "/divided"
	c.Rate.Per *= time.Duration(nodes)
	c.Burst = max(1, (c.Burst+nodes-1)/nodes)
	lim, err := bucket.NewKeyed(l.local, c)
	if err != nil {
		return nil, err
	}
	l.divided.Store(&dividedLim{nodes: nodes, lim: lim})
	return lim, nil
}

// heartbeat records this process as live and learns how many are.
func (l *Limiter) heartbeat() {
	n, err := l.global.Heartbeat(context.Background(), l.cfg.Name, l.member, 3*l.hbEvery)
	if err != nil || n < 1 {
		return
	}
	// The divided limiter first: Stats then never shows a count whose
	// limiter is not in force yet.
	if _, err := l.dividedFor(int64(n)); err == nil {
		l.nodes.Store(int64(n))
	}
}

func (l *Limiter) heartbeatLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.hbEvery)
	defer t.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-t.C:
			l.heartbeat()
		}
	}
}

func (l *Limiter) sweepLoop() {
	defer l.wg.Done()
	t := time.NewTicker(time.Duration(l.tick))
	defer t.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-t.C:
			l.sweep(l.now())
		}
	}
}

// sweep gives back the tokens of expired leases, samples every key's
// rate, demotes keys gone cold and forgets keys idle for a TTL.
func (l *Limiter) sweep(now int64) {
	newWindow := now-l.windowAt >= l.window
	if newWindow {
		l.windowAt = now
	}
	var back []expiredLease
	l.tab.each(func(e *entry) bool {
		if n := l.expire(e, now); n > 0 {
			back = append(back, expiredLease{e.key, n})
		}
		e.mu.Lock()
		e.sample(now, l.refresh)
		rate, seen := e.rate, e.seen
		e.mu.Unlock()
		if newWindow {
			e.window.Store(uint32(e.word.Load() >> 32))
		}
		held := e.word.Load() & tokenMask
		l.tend(e, now, rate, seen, held)
		return !l.forget(e, now, seen, held)
	})
	l.giveBack(back)
}

// expire takes back the tokens of e's lease when its TTL has passed (and
// no renewal is in flight): it returns how many it held.
func (l *Limiter) expire(e *entry, now int64) int64 {
	exp := e.expires.Load()
	if exp == 0 || now < exp || e.flight.Load() {
		return 0
	}
	var n int64
	for {
		w := e.word.Load()
		if w&tokenMask == 0 || e.word.CompareAndSwap(w, w&^tokenMask) {
			n = int64(w & tokenMask)
			break
		}
	}
	e.expires.Store(0)
	return n
}

// tend claims the share of a divided key once a period while it has demand,
// and demotes a leased key gone cold.
func (l *Limiter) tend(e *entry, now int64, rate float64, seen int64, held uint64) {
	if e.shared.Load() && e.leased.Load() && now-seen < l.refresh && now >= e.deniedUntil.Load() && !e.flight.Load() {
		// A divided bucket: claim the share once a period while the
		// key has demand, whatever the lease still holds, so that
		// the share comes to this node as it accrues and the report
		// of its demand stays current.
		l.kick(e)
	}
	if e.leased.Load() && rate < l.hotRate/2 && held == 0 && !e.flight.Load() && !e.shared.Load() {
		e.leased.Store(false)
	}
}

// forget reports whether the sweep drops e: nothing held, no demand for a
// TTL (for a key with a share of a divided bucket, as long as its report
// lives on the board: 2 TTL; forgotten sooner, a light node would decide it
// directly again, outside the division).
func (l *Limiter) forget(e *entry, now, seen int64, held uint64) bool {
	idle := l.ttl
	if e.claimed.Load() {
		idle = 2 * l.ttl
	}
	if held != 0 || e.flight.Load() || now-seen < idle {
		return false
	}
	l.st.localDenied.Add(e.denied.Load()) // its count outlives it
	return true
}

// expiredLease is what a lease held when its TTL passed.
type expiredLease struct {
	key string
	n   int64
}

// giveBack returns the tokens of expired leases to the global bucket (a
// node whose demand fell holds what it can no longer spend: the fleet's
// other nodes may), and drops what the store does not take back.
func (l *Limiter) giveBack(back []expiredLease) {
	for _, b := range back {
		for b.n > 0 {
			k := min(b.n, l.burst)
			if l.direct.Refund(context.Background(), b.key, int(k)) != nil {
				l.st.expired.Add(b.n)
				break
			}
			l.st.returned.Add(k)
			b.n -= k
		}
	}
}

// Stats are a Limiter's counters since New.
type Stats struct {
	// Grants is how many Grant calls the limiter made (background and
	// waiting), Granted the tokens they brought.
	Grants, Granted int64
	// Returned is how many leased tokens went back to the global bucket
	// unspent (at their TTL, and at Close), Expired how many were dropped
	// unspent at their TTL (the store could not take them back).
	Expired, Returned int64
	// Held is how many leased tokens the limiter holds now.
	Held int64
	// Direct is how many decisions went to the global store directly
	// (cold keys, keys beyond MaxKeys, the store's failure policy).
	Direct int64
	// LocalDenied is how many requests were denied in memory because the
	// global bucket had said when it would have tokens again.
	LocalDenied int64
	// Failures is how many Grant calls failed.
	Failures int64
	// Shared is how many grants were shares of a saturated global bucket
	// (divided among the nodes in proportion to their demands).
	Shared int64
	// Keys is how many keys are tracked now, Leased how many of them lease.
	Keys, Leased int
	// Nodes is the number of live processes last learnt from the
	// heartbeats.
	Nodes int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{
		Grants: l.st.grants.Load(), Granted: l.st.granted.Load(), Expired: l.st.expired.Load(), Returned: l.st.returned.Load(),
		Direct: l.st.direct.Load(), LocalDenied: l.st.localDenied.Load(), Failures: l.st.failures.Load(), Shared: l.st.shared.Load(), Nodes: l.nodes.Load(),
	}
	l.tab.each(func(e *entry) bool {
		s.Keys++
		if e.leased.Load() {
			s.Leased++
		}
		s.Held += int64(e.word.Load() & tokenMask)
		s.LocalDenied += e.denied.Load()
		return true
	})
	return s
}

// Close stops the background goroutines, gives every leased token back to
// the global bucket (one refund per key holding tokens, bounded by ctx and
// the store's timeout) and leaves the heartbeat group. Takes after Close
// return an error wrapping [floodgate.ErrClosed]. Close is idempotent; it
// returns the errors of the give-back.
func (l *Limiter) Close(ctx context.Context) error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed.Swap(true) {
		return l.closeErr
	}
	close(l.quit)
	l.wg.Wait()
	l.drainWork()
	var errs []error
	l.tab.each(func(e *entry) bool {
		// A flight a caller still runs installs after this: wait for it.
		e.mu.Lock()
		f := e.fl
		e.mu.Unlock()
		if f != nil {
			<-f.done
		}
		held := int64(e.word.Swap(0) & tokenMask)
		if e.claimed.Load() {
			// Withdraw from the key's board: what the store kept for
			// this node comes back with the lease.
			g, err := l.global.Grant(ctx, e.key, l.alg, algo.Claim{Want: l.burst, Least: 1, Member: l.member, Period: time.Duration(2 * l.ttl)})
			if err != nil {
				errs = append(errs, err)
			}
			l.st.granted.Add(g.Granted)
			held += g.Granted
		}
		if held > 0 {
			for held > 0 {
				k := min(held, l.burst)
				if err := l.direct.Refund(ctx, e.key, int(k)); err != nil {
					errs = append(errs, err)
					break
				}
				l.st.returned.Add(k)
				held -= k
			}
		}
		return true
	})
	if _, err := l.global.Leave(ctx, l.cfg.Name, l.member); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, l.local.Close())
	l.closeErr = errors.Join(errs...)
	return l.closeErr
}
