package shadow

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"

	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Config configures a [Recorder]. Its zero value means the defaults.
type Config struct {
	// Quantile is the quantile of the per-key demand per window that a
	// recommendation starts from. Default 0.95; 0 < Quantile < 1.
	Quantile float64
	// Headroom is added on top of the quantile: limit = quantile x (1 +
	// Headroom). Default 0.4 (40%); 0 <= Headroom <= 10.
	Headroom float64
	// BurstQuantile is the quantile of the per-key largest bursts that the
	// recommended burst covers (with the same headroom). Default 0.99.
	BurstQuantile float64
	// MinObservation is how long a policy must have been observed before
	// it gets a recommendation: a full traffic cycle (a day, a week) in
	// production. Default 1 hour; at least one second.
	MinObservation time.Duration
	// Slots is the size of each policy's table of sampled keys: a power
	// of two from 256 to 65,536. Default 4,096 (see the package
	// documentation, "Memory", for the bytes it costs).
	Slots int
	// TopK is how many of the heaviest keys each policy keeps, 1..64.
	// Default 16.
	TopK int
	// HideKeys keeps no key in the top-K, only its hash: for stores whose
	// keys a report must not show. (Keys that transports derive from
	// credentials are keyed hashes already; see the package documentation,
	// "Keys".)
	HideKeys bool
	// MaxPolicies bounds the number of policies recorded (default 64,
	// 1..4096): the decisions of further policies are not recorded.
	MaxPolicies int
	// Clock, when set, times every decision (it is read on each one: for
	// tests, or a cheap clock). By default decisions are timed by floodgate's
	// clock read every Resolution by a goroutine that Close stops.
	Clock floodgate.Clock
	// Resolution is the period of the default clock's readings. Default
	// 1 ms; 10 us .. 1 s. Windows shorter than 100 x Resolution are
	// measured coarsely.
	Resolution time.Duration
}

func (c Config) withDefaults() (Config, error) {
	c = c.filled()
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("%w: shadow: %w", floodgate.ErrInvalidConfig, err)
	}
	return c, nil
}

// filled returns c with each zero field set to its default.
func (c Config) filled() Config {
	if c.Quantile == 0 {
		c.Quantile = 0.95
	}
	if c.Headroom == 0 {
		c.Headroom = 0.4
	}
	if c.BurstQuantile == 0 {
		c.BurstQuantile = 0.99
	}
	if c.MinObservation == 0 {
		c.MinObservation = time.Hour
	}
	if c.Slots == 0 {
		c.Slots = 4096
	}
	if c.TopK == 0 {
		c.TopK = 16
	}
	if c.MaxPolicies == 0 {
		c.MaxPolicies = 64
	}
	if c.Resolution == 0 {
		c.Resolution = time.Millisecond
	}
	return c
}

// validate says what is out of range in a filled Config.
func (c Config) validate() error {
	switch {
	case !(c.Quantile > 0 && c.Quantile < 1):
		return fmt.Errorf("quantile %v outside (0, 1)", c.Quantile)
	case !(c.BurstQuantile > 0 && c.BurstQuantile < 1):
		return fmt.Errorf("burst quantile %v outside (0, 1)", c.BurstQuantile)
	case !(c.Headroom >= 0 && c.Headroom <= 10):
		return fmt.Errorf("headroom %v outside [0, 10]", c.Headroom)
	case c.MinObservation < time.Second:
		return fmt.Errorf("minimum observation %v, want at least 1s", c.MinObservation)
	case c.Clock != nil && nilcheck.Is(c.Clock):
		return errors.New("typed-nil clock")
	}
	return c.validateSizes()
}

// validateSizes says which size of a filled Config is out of range.
func (c Config) validateSizes() error {
	switch {
	case c.Slots < 256 || c.Slots > 65536 || c.Slots&(c.Slots-1) != 0:
		return fmt.Errorf("%d slots, want a power of two in 256..65536", c.Slots)
	case c.TopK < 1 || c.TopK > 64:
		return fmt.Errorf("top-K of %d, want 1..64", c.TopK)
	case c.MaxPolicies < 1 || c.MaxPolicies > 4096:
		return fmt.Errorf("%d policies, want 1..4096", c.MaxPolicies)
	case c.Resolution < 10*time.Microsecond || c.Resolution > time.Second:
		return fmt.Errorf("resolution %v outside 10us..1s", c.Resolution)
	}
	return nil
}

// Recorder records the demand of every policy whose decisions reach it:
// through a store it wraps ([Recorder.Store]: every named limit on that
// store, the policies of a policy.Live among them), or through a policy's
// [Demand] directly. It is safe for concurrent use.
type Recorder struct {
	cfg  Config
	seed maphash.Seed

	mu      sync.Mutex
	byName  map[string]*Demand // under mu
	ignored atomic.Uint64      // decisions of policies beyond MaxPolicies

	// cache maps the memory namespaces of the algorithms seen to their
	// Demand (nil for unnamed limits): copied on write, read on every
	// decision without a lock.
	cache atomic.Pointer[[]nsEntry]

	// lives are the Lives whose running limits the reports show (Follow).
	lives atomic.Pointer[[]*policy.Live]

	coarse    atomic.Int64
	stop      chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

type nsEntry struct {
	ns uint64
	d  *Demand
}

// maxCache bounds the namespace cache (each live change of a policy adds
// a namespace); beyond it the cache starts again.
const maxCache = 256

// New returns a Recorder. Errors wrap [floodgate.ErrInvalidConfig]. Call
// Close when done with it (it stops the clock's goroutine).
func New(cfg Config) (*Recorder, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Recorder{cfg: cfg, seed: maphash.MakeSeed(), byName: map[string]*Demand{}, done: make(chan struct{})}
	empty := []nsEntry{}
	r.cache.Store(&empty)
	if cfg.Clock == nil {
		r.coarse.Store(monotime.Nanotime())
		r.stop = make(chan struct{})
		go r.tick()
	} else {
		close(r.done)
	}
	return r, nil
}

func (r *Recorder) tick() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Resolution)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.coarse.Store(monotime.Nanotime())
		}
	}
}

// Close stops the Recorder's clock. Decisions recorded afterwards are
// timed at the moment of Close. It is safe to call more than once.
func (r *Recorder) Close() error {
	r.closeOnce.Do(func() {
		if r.stop != nil {
			close(r.stop)
		}
	})
	<-r.done
	return nil
}

// nanos is the time of a decision, Unix nanoseconds.
func (r *Recorder) nanos() int64 {
	if r.cfg.Clock != nil {
		return r.cfg.Clock.Now().UnixNano()
	}
	return r.coarse.Load()
}

// Track returns the Demand of the named policy, making it when it is new:
// windows of the given length, the policy's current limit per window (0
// when unknown). A policy seen again with another window length starts
// its recording afresh (its demand per window is another quantity); a new
// limit is only noted.
func (r *Recorder) Track(name string, window time.Duration, limit int64) (*Demand, error) {
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: shadow: a policy needs a name", floodgate.ErrInvalidConfig)
	case window <= 0:
		return nil, fmt.Errorf("%w: shadow: policy %q: window %v", floodgate.ErrInvalidConfig, name, window)
	case limit < 0:
		return nil, fmt.Errorf("%w: shadow: policy %q: limit %d", floodgate.ErrInvalidConfig, name, limit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.track(name, window, limit)
	if d == nil {
		return nil, fmt.Errorf("%w: shadow: policy %q: already recording %d policies", floodgate.ErrInvalidConfig, name, r.cfg.MaxPolicies)
	}
	return d, nil
}

// track is Track under r.mu; nil beyond MaxPolicies.
func (r *Recorder) track(name string, window time.Duration, limit int64) *Demand {
	if d, ok := r.byName[name]; ok && d.window == int64(window) {
		d.limit.Store(limit)
		return d
	} else if !ok && len(r.byName) >= r.cfg.MaxPolicies {
		return nil
	}
	d := newDemand(r, name, window, limit, r.nanos())
	r.byName[name] = d
	return d
}

// Demand returns the recording of the named policy.
func (r *Recorder) Demand(name string) (*Demand, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.byName[name]
	return d, ok
}

// lookup returns the Demand of the policy alg runs, nil when it is not
// recorded (an unnamed limit, or beyond MaxPolicies).
func (r *Recorder) lookup(alg algo.Algorithm) *Demand {
	ns := algo.MemoryNamespace(alg)
	for _, e := range *r.cache.Load() {
		if e.ns == ns {
			return e.d
		}
	}
	return r.miss(ns, alg)
}

func (r *Recorder) miss(ns uint64, alg algo.Algorithm) *Demand {
	sp := alg.Spec()
	r.mu.Lock()
	defer r.mu.Unlock()
	var d *Demand
	if sp.Policy != "" && sp.Window > 0 {
		d = r.track(sp.Policy, sp.Window, sp.Quota)
	}
	old := *r.cache.Load()
	next := make([]nsEntry, 0, len(old)+1)
	if len(old) < maxCache {
		for _, e := range old {
			if e.ns != ns && (e.d == nil || r.byName[e.d.name] == e.d) {
				next = append(next, e)
			}
		}
	}
	next = append(next, nsEntry{ns: ns, d: d})
	r.cache.Store(&next)
	return d
}

// Store returns s with every decision of its named limits recorded: the
// store to give to policy.NewLive (every policy of the Live is then
// recorded by its name, dry-run policies included) or to the algorithm
// packages' keyed limiters. Only charged demand is recorded: a cost n >= 1
// (refunds and peeks are not demand), decided by s (a store error records
// nothing); an ApplyAll that only evaluates is recorded when it refuses (a
// refused request is not committed afterwards). A decision is refused
// when the limit denied it (or would have, for a dry-run policy).
//
// Use the returned store for every limiter that should be recorded, and
// only it: limiters on s and on the wrapper are on different stores for
// floodgate.TakeAll.
func (r *Recorder) Store(s store.Store) (store.Store, error) {
	if nilcheck.Is(s) {
		return nil, fmt.Errorf("%w: shadow: nil store", floodgate.ErrInvalidConfig)
	}
	return &recordingStore{inner: s, rec: r}, nil
}

type recordingStore struct {
	inner store.Store
	rec   *Recorder
}

func (s *recordingStore) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	d, err := s.inner.Apply(ctx, key, alg, n)
	if err == nil && n > 0 {
		if dm := s.rec.lookup(alg); dm != nil {
			dm.observeAt(s.rec.nanos(), key, n, !d.Allowed)
		}
	}
	return d, err
}

func (s *recordingStore) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	ok, err := s.inner.ApplyAll(ctx, ops, out, commit)
	if err != nil || (!commit && ok) {
		return ok, err
	}
	now := s.rec.nanos()
	for i := range ops {
		if ops[i].N > 0 {
			if dm := s.rec.lookup(ops[i].Alg); dm != nil {
				dm.observeAt(now, ops[i].Key, ops[i].N, !out[i].Allowed)
			}
		}
	}
	return ok, err
}

// Unwrap returns the store the recording store wraps.
func (s *recordingStore) Unwrap() store.Store { return s.inner }

// Follow makes the reports of live's policies show their running limits:
// a report reads the policy's limit per window from live's running Set
// when it is taken, so that it follows every change (the tuner's or not)
// without waiting for a decision. A policy whose window length changed
// shows the limit of its latest decision until its recording starts
// afresh. A report also reads there whether the policy runs in dry run:
// an enforcing policy whose refusals dominate its demand gets its
// recommendation from its admitted demand (see [Recommendation].From).
// Without Follow a report shows the limit of the policy's latest
// decision that started a recording or changed its store namespace, and
// takes the policy as enforcing. A [Tuner] follows its Live. Following
// the same Live twice is harmless.
func (r *Recorder) Follow(live *policy.Live) {
	if live == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var next []*policy.Live
	if p := r.lives.Load(); p != nil {
		next = append(next, *p...)
	}
	for _, l := range next {
		if l == live {
			return
		}
	}
	next = append(next, live)
	r.lives.Store(&next)
}

// runningPolicy is what a followed Live says of a recorded policy.
type runningPolicy struct {
	quota      int64 // its limit per window
	sameWindow bool  // its window is the recording's
	dryRun     bool
}

// running returns the named policy as the latest followed Live that has
// it runs it; false when none has it.
func (r *Recorder) running(name string, window int64) (runningPolicy, bool) {
	p := r.lives.Load()
	if p == nil {
		return runningPolicy{}, false
	}
	for i := len(*p) - 1; i >= 0; i-- {
		set := (*p)[i].Set()
		if l, ok := set.Limiter(name); ok {
			sp := l.Algorithm().Spec()
			pol, _ := set.Policy(name)
			return runningPolicy{quota: sp.Quota, sameWindow: int64(sp.Window) == window, dryRun: pol.DryRun}, true
		}
	}
	return runningPolicy{}, false
}
