package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/bind"
	"github.com/floodgate-go/floodgate/internal/nilcheck"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Store keeps per-key state and runs an algorithm's step on it atomically:
// concurrent calls on one key are serialised, so every decision sees the
// state the previous one left. The store owns time: it reads its clock (or
// the server's) once per call.
//
// Implementations are safe for concurrent use. The storetest package is the
// conformance suite every implementation must pass.
type Store interface {
	// Apply runs alg's step with cost n on key's state and returns the
	// decision. An error means the store could not decide; the state is then
	// as if Apply had not been called, unless the error says otherwise.
	Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error)

	// ApplyAll runs the step of every op (each with its own key, algorithm
	// and cost n > 0) as one atomic operation, all or nothing, and writes
	// op i's decision to out[i] (len(out) >= len(ops)). It reports whether
	// every op admitted.
	//
	// With commit true, the new states are kept when every op admits; when
	// any op denies, no key is charged: no state changes, bit for bit,
	// except that a key whose state was written under other parameters of
	// its limit (a live change, see algo.Lineage) is kept converted to the
	// op's parameters and stepped by nothing, as Apply would convert it, so
	// that the new parameters apply from its first request after the change.
	// With commit false, no state ever changes: the call only tells what a
	// commit would decide. Ops on the same key and namespace are stepped in order, each
	// on the state the previous one left.
	//
	// When every op admits, out[i] is op i's decision (the one a commit
	// makes). When any op denies, out[i] of a denying op is its denial, so
	// that its RetryAfter is when it alone would admit, and out[i] of an op
	// that would have admitted is its state as it stands, charged nothing
	// (the decision of a peek, n = 0: Allowed, with the Remaining and
	// ResetAfter the key really has).
	//
	// A store that cannot make a set of ops atomic (keys on different nodes
	// of a cluster) decides them in two phases, evaluate then commit, and
	// says so in its documentation. An error means the store could not
	// decide; no state changed unless the error says otherwise.
	ApplyAll(ctx context.Context, ops []Op, out []floodgate.Decision, commit bool) (bool, error)
}

// Shared is implemented by a [Store] whose state several processes share
// (redisstore: every node of a fleet on one Redis). What a process derives
// on its own must then be the same on every node: the keyed hash that
// turns a credential into a store key needs one secret across the fleet,
// and constructors that would draw a random one refuse such a store
// without it.
type Shared interface {
	Store
	// Shared reports whether the store's state is shared by several
	// processes.
	Shared() bool
}

// IsShared reports whether s is a [Shared] store that says it is shared.
func IsShared(s Store) bool {
	sh, ok := s.(Shared)
	return ok && sh.Shared()
}

// Op is one step of a [Store.ApplyAll] call.
type Op struct {
	// Key is the key whose state the step runs on.
	Key string
	// Alg is the algorithm to step.
	Alg algo.Algorithm
	// N is the cost, N >= 1.
	N int64
}

// Limiter is the keyed rate limiter of floodgate: an algorithm (a token
// bucket, a leaky bucket, a window) bound to a [Store]. Every algorithm
// package returns one (bucket.NewKeyed, leaky.NewKeyed, window.NewFixed,
// ...). It implements [floodgate.Limiter], [floodgate.Refunder] and
// [floodgate.GroupTaker], and is safe for concurrent use.
type Limiter struct {
	store    Store
	alg      algo.Algorithm
	name     string
	capacity int64
	// take is the store's own path for alg (memstore's token bucket), or
	// nil: Take then calls Apply.
	take bind.Func
}

// NewLimiter returns the Limiter running alg on s. Requests may cost
// 1..alg.Spec().Capacity; larger costs could never be admitted and are
// refused with [floodgate.ErrInvalidCost]. It returns an error wrapping
// [floodgate.ErrInvalidConfig] for a nil (or typed-nil) store or
// algorithm, or a Spec a store cannot keep.
func NewLimiter(s Store, alg algo.Algorithm) (*Limiter, error) {
	if nilcheck.Is(s) {
		return nil, fmt.Errorf("%w: nil store", floodgate.ErrInvalidConfig)
	}
	if nilcheck.Is(alg) {
		return nil, fmt.Errorf("%w: nil algorithm", floodgate.ErrInvalidConfig)
	}
	sp := alg.Spec()
	if sp.Words < 1 || sp.Words > algo.MaxWords {
		return nil, fmt.Errorf("%w: algorithm %q uses %d words, want 1..%d", floodgate.ErrInvalidConfig, sp.Name, sp.Words, algo.MaxWords)
	}
	if sp.Capacity < 1 {
		return nil, fmt.Errorf("%w: algorithm %q has capacity %d, want >= 1", floodgate.ErrInvalidConfig, sp.Name, sp.Capacity)
	}
	return &Limiter{store: s, alg: alg, name: sp.Policy, capacity: sp.Capacity, take: bind.Find(s, alg)}, nil
}

// Name returns the limit's policy name (the Config's Name), or "" when it
// has none.
func (l *Limiter) Name() string { return l.name }

// Describe implements [floodgate.Describer]: the limit as its Spec describes
// it.
func (l *Limiter) Describe() floodgate.Description {
	sp := l.alg.Spec()
	return floodgate.Description{Name: sp.Policy, Quota: sp.Quota, Window: sp.Window, Capacity: sp.Capacity, Undelayed: sp.Undelayed}
}

// Capacity returns the largest cost one request may have.
func (l *Limiter) Capacity() int64 { return l.capacity }

// Algorithm returns the algorithm the limiter runs.
func (l *Limiter) Algorithm() algo.Algorithm { return l.alg }

// Store returns the store the limiter runs on.
func (l *Limiter) Store() Store { return l.store }

// Take implements [floodgate.Limiter].
func (l *Limiter) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if n < 1 || int64(n) > l.capacity {
		return floodgate.Decision{}, l.costError(n)
	}
	if l.take != nil {
		ok, limit, rem, ra, rs, delay, err := l.take(ctx, key, int64(n))
		return floodgate.Decision{Allowed: ok, Limit: limit, Remaining: rem, RetryAfter: ra, ResetAfter: rs, Delay: delay}, err
	}
	return l.store.Apply(ctx, key, l.alg, int64(n))
}

// Refund implements [floodgate.Refunder].
func (l *Limiter) Refund(ctx context.Context, key string, n int) error {
	if n < 1 || int64(n) > l.capacity {
		return l.costError(n)
	}
	_, err := l.store.Apply(ctx, key, l.alg, -int64(n))
	return err
}

// Peek reports key's state now without consuming anything: Remaining is how
// many units would pass at once.
func (l *Limiter) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.store.Apply(ctx, key, l.alg, 0)
}

func (l *Limiter) costError(n int) error {
	if n >= 1 {
		return fmt.Errorf("%w: cost %d exceeds the capacity %d of %s", floodgate.ErrCostExceedsCapacity, n, l.capacity, l.describe())
	}
	return fmt.Errorf("%w: cost %d outside 1..%d", floodgate.ErrInvalidCost, n, l.capacity)
}

func (l *Limiter) describe() string {
	if l.name != "" {
		return fmt.Sprintf("%q", l.name)
	}
	return l.alg.Spec().Name
}

// maxGroup is the largest group decided with pooled buffers.
const maxGroup = 8

// groupBuf holds the ops and decisions of one group (they go through the
// Store interface, so they would escape to the heap on every call).
type groupBuf struct {
	ops [maxGroup]Op
	out [maxGroup]floodgate.Decision
}

var groupPool = sync.Pool{New: func() any { return new(groupBuf) }}

// TakeGroup implements [floodgate.GroupTaker]: it decides checks whose
// limiters are all *Limiter. Checks on one store are decided by one
// [Store.ApplyAll] (atomic, and on Redis one script where the keys allow).
// Checks spread over several stores are evaluated on each store first, so
// that a denial changes no state anywhere; when every store would admit,
// each commits in turn, and a denial that a concurrent request caused
// between the two phases refunds what was committed (the only window in
// which a group is not atomic).
func (l *Limiter) TakeGroup(ctx context.Context, checks []floodgate.Check, commit bool) (bool, error) {
	var ops []Op
	var out []floodgate.Decision
	if len(checks) <= maxGroup {
		gb := groupPool.Get().(*groupBuf)
		defer func() {
			clear(gb.ops[:]) // keep no key or algorithm reachable
			groupPool.Put(gb)
		}()
		ops, out = gb.ops[:0], gb.out[:0]
	} else {
		ops, out = make([]Op, 0, len(checks)), make([]floodgate.Decision, 0, len(checks))
	}
	stores := 0
	var first Store
	for i := range checks {
		c := &checks[i]
		sl, ok := c.Limiter.(*Limiter)
		if !ok || sl == nil {
			return false, nil
		}
		if c.N < 1 || int64(c.N) > sl.capacity {
			return true, sl.costError(c.N)
		}
		ops = append(ops, Op{Key: c.Key, Alg: sl.alg, N: int64(c.N)})
		out = append(out, floodgate.Decision{})
		if i == 0 {
			first, stores = sl.store, 1
		} else if sl.store != first {
			stores = 2
		}
	}
	if stores == 1 {
		if _, err := first.ApplyAll(ctx, ops, out, commit); err != nil {
			return true, err
		}
		for i := range checks {
			checks[i].Decision = out[i]
		}
		return true, nil
	}
	return true, l.multiStore(ctx, checks, ops, out, commit)
}

// multiStore decides a group spread over several stores: evaluate on every
// store, then (when all admit and commit is set) commit store by store.
func (l *Limiter) multiStore(ctx context.Context, checks []floodgate.Check, ops []Op, out []floodgate.Decision, commit bool) error {
	groups := groupByStore(checks)
	ok := true
	for _, g := range groups {
		gops, gout := pick(ops, out, g.idx)
		admitted, err := g.store.ApplyAll(ctx, gops, gout, false)
		if err != nil {
			return err
		}
		scatter(out, gout, g.idx)
		ok = ok && admitted
	}
	if ok && commit {
		for k, g := range groups {
			gops, gout := pick(ops, out, g.idx)
			admitted, err := g.store.ApplyAll(ctx, gops, gout, true)
			if err == nil {
				scatter(out, gout, g.idx)
			}
			if err != nil || !admitted {
				// A concurrent request got in between the phases: give
				// back what the earlier stores committed.
				var errs []error
				for _, done := range groups[:k] {
					for _, i := range done.idx {
						if _, rerr := done.store.Apply(context.WithoutCancel(ctx), ops[i].Key, ops[i].Alg, -ops[i].N); rerr != nil {
							errs = append(errs, rerr)
						}
					}
				}
				if err != nil {
					return errors.Join(append([]error{err}, errs...)...)
				}
				if len(errs) > 0 {
					return errors.Join(errs...)
				}
				break
			}
		}
	}
	for i := range checks {
		checks[i].Decision = out[i]
	}
	return nil
}

type storeGroup struct {
	store Store
	idx   []int
}

func groupByStore(checks []floodgate.Check) []storeGroup {
	var gs []storeGroup
	for i := range checks {
		s := checks[i].Limiter.(*Limiter).store
		k := -1
		for j := range gs {
			if gs[j].store == s {
				k = j
				break
			}
		}
		if k < 0 {
			gs = append(gs, storeGroup{store: s})
			k = len(gs) - 1
		}
		gs[k].idx = append(gs[k].idx, i)
	}
	return gs
}

func pick(ops []Op, out []floodgate.Decision, idx []int) ([]Op, []floodgate.Decision) {
	gops := make([]Op, len(idx))
	gout := make([]floodgate.Decision, len(idx))
	for j, i := range idx {
		gops[j], gout[j] = ops[i], out[i]
	}
	return gops, gout
}

func scatter(out, gout []floodgate.Decision, idx []int) {
	for j, i := range idx {
		out[i] = gout[j]
	}
}
