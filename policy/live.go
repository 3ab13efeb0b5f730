package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/credkey"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/store"
)

// Live holds the running Set of a service and swaps it, atomically, when the
// config changes: a reload applies to every key at once and keeps every
// key's state (policies are identified by name), so that raising or
// lowering a limit never hands anyone a fresh burst. It is safe for
// concurrent use.
type Live struct {
	store    store.Store
	resolver *resolver
	hasher   *credkey.Hasher
	onChange func(Change)
	observer floodgate.Observer
	// ownSecret: credentials are hashed with the process's secret.
	ownSecret bool

	mu       sync.Mutex // serialises updates
	cur      atomic.Pointer[Set]
	version  atomic.Uint64
	lineages lineages    // under mu: see lineage.go
	timer    *time.Timer // under mu: the next retire
	now      func() time.Time
	// leases are the lease limiters of the running Leased policies, and
	// retiring those replaced, each closed by its timer (leaseGrace after
	// it was replaced) or by Close; closing counts the timers' closes in
	// progress. All under mu.
	leases   map[string]leased
	retiring map[*lease.Limiter]*time.Timer
	closing  sync.WaitGroup
	closed   bool
}

// Change describes one applied config change, for an audit log.
type Change struct {
	// Version counts the configs applied, from 1.
	Version uint64
	// Source says where the config came from (a file path, "api").
	Source string
	// At is when the change was applied.
	At time.Time
	// Added, Removed and Changed list policy names; Changed holds the
	// policies whose parameters changed (old -> new in Details).
	Added, Removed, Changed []string
	// Details describes each changed policy: "pro: token-bucket 100/s
	// burst 100 -> token-bucket 200/s burst 200".
	Details []string
	// Dropped lists the policies of which a version older than the last
	// [github.com/floodgate-go/floodgate/store/algo.MaxPredecessors] was
	// forgotten while its keys could still hold
	// state (more changes than that within the algorithm's time to full):
	// on a memory store, the keys it held start full. Empty in the normal
	// course of things.
	Dropped []string
	// Err is set for a config that was refused; the running one stays.
	Err error
}

// Option configures [NewLive].
type Option struct{ apply func(*liveConfig) error }

type liveConfig struct {
	secret   []byte
	resolve  ResolveFunc
	ttl      time.Duration
	max      int
	onChange func(Change)
	observer floodgate.Observer
}

// WithResolver places keys without an override on a plan with f (e.g. from
// an API key to its plan in a database), caching each answer for ttl
// (1 s .. 24 h) and at most max keys (>= 1).
//
// f is called once at a time per key: requests that miss the cache for a
// key together wait for one call. A failure of f (an error, a panic) is
// remembered for a second, so that a resolver's database going away costs
// it one call per key per second, not one per request: meanwhile a key
// whose answer expired keeps its last plan (stale, until f answers again),
// and a key never placed is on the DefaultPlan, or, without one, gets the
// error (for the caller's fail mode to decide). A call whose caller's
// context ends is not remembered. An answer that names no policy of the
// running config is an error wrapping [floodgate.ErrInvalidConfig] (a
// typo in the plans table must not put keys on another plan unnoticed).
func WithResolver(f ResolveFunc, ttl time.Duration, max int) Option {
	return Option{func(c *liveConfig) error {
		if f == nil {
			return fmt.Errorf("%w: policy: nil resolver", floodgate.ErrInvalidConfig)
		}
		if ttl < time.Second || ttl > 24*time.Hour {
			return fmt.Errorf("%w: policy: resolver cache ttl %v outside 1s..24h", floodgate.ErrInvalidConfig, ttl)
		}
		if max < 1 {
			return fmt.Errorf("%w: policy: resolver cache of %d keys", floodgate.ErrInvalidConfig, max)
		}
		c.resolve, c.ttl, c.max = f, ttl, max
		return nil
	}}
}

// WithKeySecret sets the secret of the keyed hash (HMAC-SHA256) that turns
// descriptors holding a credential into store keys (at least 16 bytes).
// Without it each process draws a random one, which only a store of its
// own allows: on a shared store ([store.IsShared], e.g. Redis), credential
// entries are refused without the secret (see [Live.CheckCredentials]),
// since nodes with different secrets would each keep their own budget per
// credential.
func WithKeySecret(secret []byte) Option {
	return Option{func(c *liveConfig) error {
		if len(secret) < 16 {
			return fmt.Errorf("%w: policy: key secret of %d bytes, want at least 16", floodgate.ErrInvalidConfig, len(secret))
		}
		c.secret = append([]byte(nil), secret...)
		return nil
	}}
}

// WithOnChange calls f after every applied change and every refused one
// (Change.Err set), synchronously, from the goroutine that applied it.
func WithOnChange(f func(Change)) Option {
	return Option{func(c *liveConfig) error {
		if f == nil {
			return fmt.Errorf("%w: policy: nil change callback", floodgate.ErrInvalidConfig)
		}
		c.onChange = f
		return nil
	}}
}

// WithObserver reports every config change to o as an event of
// [floodgate.SourceConfig]: [floodgate.OutcomeConfigApplied], or
// [floodgate.OutcomeConfigRefused] with the error (file:line) in Err, so
// that the observer adapters count reloads and a refused file shows in the
// metrics and the logs (promobserver's floodgate_config_reloads_total and
// floodgate_config_last_reload_successful). The change callback
// ([WithOnChange]) gets the details.
func WithObserver(o floodgate.Observer) Option {
	return Option{func(c *liveConfig) error {
		if nilcheck.Is(o) {
			return fmt.Errorf("%w: policy: nil observer", floodgate.ErrInvalidConfig)
		}
		c.observer = o
		return nil
	}}
}

// NewLive compiles cfg on s and returns it running. Errors wrap
// [floodgate.ErrInvalidConfig].
func NewLive(cfg Config, s store.Store, opts ...Option) (*Live, error) {
	if nilcheck.Is(s) {
		return nil, fmt.Errorf("%w: policy: nil store", floodgate.ErrInvalidConfig)
	}
	c, err := liveOptions(s, opts)
	if err != nil {
		return nil, err
	}
	l := &Live{store: s, onChange: c.onChange, observer: c.observer, ownSecret: c.secret == nil, hasher: credkey.New(c.secret, "cred#"), lineages: lineages{}, now: time.Now}
	if c.resolve != nil {
		l.resolver = newResolver(c.resolve, c.ttl, c.max)
	}
	if _, err := l.Update(cfg, "initial"); err != nil {
		return nil, err
	}
	return l, nil
}

// liveOptions applies opts for a Live on s.
func liveOptions(s store.Store, opts []Option) (liveConfig, error) {
	var c liveConfig
	for i, o := range opts {
		if o.apply == nil {
			return c, fmt.Errorf("%w: policy: option %d is the zero Option", floodgate.ErrInvalidConfig, i)
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// errNoFleetSecret is the error of credentials hashed with a per-process
// secret on a shared store.
var errNoFleetSecret = fmt.Errorf("%w: policy: credentials on a store shared by several processes need WithKeySecret, the same secret on every node (a random one per process would give each node its own budget per credential)", floodgate.ErrInvalidConfig)

// CheckCredentials returns an error (wrapping [floodgate.ErrInvalidConfig])
// when descriptor entries marked Credential would be hashed with a secret
// of this process alone while its store is shared by several
// ([store.IsShared], e.g. Redis): each node would keep its own budget per
// credential. Transports whose descriptors hold credentials call it at
// construction (httplimit.Policies, grpclimit.Policies); Match refuses such
// entries with the same error.
func (l *Live) CheckCredentials() error { return l.Set().checkCredentials() }

// Set returns the running Set.
func (l *Live) Set() *Set { return l.cur.Load() }

// Version returns the version of the running config.
func (l *Live) Version() uint64 { return l.version.Load() }

// Update compiles cfg and, when it is valid, makes it the running Set at
// once; source labels the change. A config that does not compile leaves the
// running one in place and is returned as an error (and reported to the
// change callback). Every key keeps its state across the change: its
// policy is the same limit under new parameters.
func (l *Live) Update(cfg Config, source string) (Change, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := Change{Source: source, At: time.Now()}
	if l.closed {
		ch.Err = fmt.Errorf("policy: the Live is %w", floodgate.ErrClosed)
		ch.Version = l.version.Load()
		l.report(ch)
		return ch, ch.Err
	}
	pl := &plan{now: l.now(), next: map[string]version{}}
	set, err := l.compile(cfg, pl)
	if set != nil {
		set.ownSecret = l.ownSecret
	}
	if err != nil {
		ch.Err = err
		ch.Version = l.version.Load()
		l.report(ch)
		return ch, err
	}
	if old := l.cur.Load(); old != nil {
		ch.Added, ch.Removed, ch.Changed, ch.Details = diff(old, set)
	} else {
		for _, p := range cfg.Policies {
			ch.Added = append(ch.Added, p.Name)
		}
	}
	ch.Dropped = l.lineages.commit(pl)
	ch.Version = l.version.Add(1)
	l.cur.Store(set)
	l.commitLeases(pl)
	l.schedule()
	l.report(ch)
	return ch, nil
}

// report tells the change callback and the observer of a change, applied
// or refused (ch.Err set).
func (l *Live) report(ch Change) {
	if l.onChange != nil {
		l.onChange(ch)
	}
	if l.observer != nil {
		e := floodgate.Event{Source: floodgate.SourceConfig, Outcome: floodgate.OutcomeConfigApplied}
		if ch.Err != nil {
			e.Outcome, e.Err = floodgate.OutcomeConfigRefused, ch.Err
		}
		l.observer.Observe(e)
	}
}

func diff(old, cur *Set) (added, removed, changed, details []string) {
	for name, p := range cur.policies {
		q, ok := old.policies[name]
		switch {
		case !ok:
			added = append(added, name)
		case q != p:
			changed = append(changed, name)
			details = append(details, q.String()+" -> "+p.String()[len(p.Name)+2:])
		}
	}
	for name := range old.policies {
		if _, ok := cur.policies[name]; !ok {
			removed = append(removed, name)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	slices.Sort(details)
	return
}

// takeHook, when set (by tests only), runs in Take between its load of the
// running Set and its store call: where a live change may land.
var takeHook func()

// Take charges n for the plan of key ([Set.Plan]) on the running Set: the
// keyed [floodgate.Limiter] of a per-plan limit. A key without a plan (no
// override, no resolver answer, no default plan) is admitted, with a zero
// Decision. The key is both looked up and stored as it is: for keys that
// are credentials, use descriptors with middleware.Entry.Credential (the store then
// sees a keyed hash), not Take.
func (l *Live) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	set := l.cur.Load()
	pl, err := set.plan(ctx, key)
	lim := pl.lim
	if err != nil || lim == nil {
		return floodgate.Decision{Allowed: err == nil}, err
	}
	if pl.lease != nil {
		d, err := pl.lease.Take(ctx, key, n)
		if err != nil && errors.Is(err, floodgate.ErrClosed) && l.cur.Load() != set {
			// The policy changed under this request, past the lease's grace:
			// decide it on the running Set.
			return l.Take(ctx, key, n)
		}
		return d, err
	}
	if n < 1 || int64(n) > lim.Capacity() {
		return lim.Take(ctx, key, n) // its cost error
	}
	if takeHook != nil {
		takeHook()
	}
	// Straight to the store: one call frame (and one copy of the Decision)
	// less than through lim.Take, which is what it does.
	return lim.Store().Apply(ctx, key, lim.Algorithm(), int64(n))
}

// Refund implements [floodgate.Refunder] for [Live.Take]. For a Leased
// plan the units go back to the global bucket, as lease.Limiter.Refund
// does.
func (l *Live) Refund(ctx context.Context, key string, n int) error {
	lim, err := l.cur.Load().Plan(ctx, key)
	if err != nil || lim == nil {
		return err
	}
	return lim.Refund(ctx, key, n)
}

// Match is [Set.Match] on the running Set.
func (l *Live) Match(ctx context.Context, descriptors []middleware.Descriptor, n int, dst []floodgate.Check) (checks []floodgate.Check, enforcing int, err error) {
	return l.cur.Load().Match(ctx, descriptors, n, dst)
}

// Live is what the Policies wrappers of httplimit and grpclimit take.
var _ middleware.Matcher = (*Live)(nil)
