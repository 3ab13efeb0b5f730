package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// MultiLimiter checks several policies on one key in one Redis script,
// atomically and all-or-nothing: "10 per second AND 1000 per hour". A request
// is admitted only when every policy admits it; when one denies, nothing is
// consumed from any of them. The state of each policy lives in its own Redis
// key; the keys of one user key share a hash tag, so this works on Redis
// Cluster.
//
// The Decision is the most restrictive one, as with [floodgate.All]: Allowed
// only if all allow; Limit and Remaining from the policy with the fewest units
// remaining; RetryAfter, ResetAfter and Delay the largest (Delay is 0 on a
// denial).
//
// A MultiLimiter is a [floodgate.Limiter] and a [floodgate.Refunder], safe for
// concurrent use. With the [Fallback] policy its local decisions are taken
// policy by policy on the local store, refunding on a denial (the local store
// has no multi-key atomicity).
type MultiLimiter struct {
	s       *Store
	ps      []*policy
	script  *rueidis.Lua
	maxCost int64
}

// maxPolicies bounds the number of policies of a MultiLimiter (keys and
// arguments of one call live on the stack up to this number).
const maxPolicies = 4

// NewMultiLimiter returns a limiter checking every one of algs on s, in one
// round trip. The largest cost a request may have is the smallest capacity
// among the policies. Errors wrap [floodgate.ErrInvalidConfig]: no policy,
// more than 4, a nil one, one without a Lua twin, or the same policy twice.
func NewMultiLimiter(s *Store, algs ...algo.Algorithm) (*MultiLimiter, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: redisstore: nil store", floodgate.ErrInvalidConfig)
	}
	if len(algs) == 0 || len(algs) > maxPolicies {
		return nil, fmt.Errorf("%w: redisstore: a multi-policy limiter needs 1..%d algorithms, got %d", floodgate.ErrInvalidConfig, maxPolicies, len(algs))
	}
	m := &MultiLimiter{s: s}
	specs := make([]algo.Spec, 0, len(algs))
	seen := map[uint64]bool{}
	for i, a := range algs {
		p, err := s.prepare(a)
		if err != nil {
			return nil, fmt.Errorf("redisstore: policy %d: %w", i, err)
		}
		if seen[p.spec.Namespace] {
			return nil, fmt.Errorf("%w: redisstore: policy %d (%s) appears twice", floodgate.ErrInvalidConfig, i, p.spec.Name)
		}
		seen[p.spec.Namespace] = true
		if i == 0 || p.limit < m.maxCost {
			m.maxCost = p.limit
		}
		m.ps = append(m.ps, p)
		specs = append(specs, p.spec)
	}
	if m.maxCost < 1 {
		return nil, fmt.Errorf("%w: redisstore: a policy has capacity %d", floodgate.ErrInvalidConfig, m.maxCost)
	}
	m.script = scriptFor(specs)
	return m, nil
}

// MaxCost returns the largest cost one request may ask for.
func (m *MultiLimiter) MaxCost() int64 { return m.maxCost }

// Take implements [floodgate.Limiter]. A cost outside 1..MaxCost returns an
// error wrapping [floodgate.ErrInvalidCost].
func (m *MultiLimiter) Take(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if n < 1 || int64(n) > m.maxCost {
		return floodgate.Decision{}, m.costError(n)
	}
	return m.apply(ctx, key, int64(n))
}

// Refund implements [floodgate.Refunder]: it gives n units back to every
// policy (never beyond their capacity).
func (m *MultiLimiter) Refund(ctx context.Context, key string, n int) error {
	if n < 1 || int64(n) > m.maxCost {
		return m.costError(n)
	}
	_, err := m.apply(ctx, key, -int64(n))
	return err
}

// Peek reports the decision a request would get now, consuming nothing.
func (m *MultiLimiter) Peek(ctx context.Context, key string) (floodgate.Decision, error) {
	return m.apply(ctx, key, 0)
}

func (m *MultiLimiter) costError(n int) error {
	return fmt.Errorf("%w: cost %d outside 1..%d", floodgate.ErrInvalidCost, n, m.maxCost)
}

func (m *MultiLimiter) apply(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	start := floodgate.Nanotime()
	d, err := m.s.eval(ctx, key, m.ps, m.script, n, m.s.injectedNow(), nil)
	if err != nil {
		return m.s.fail(ctx, key, m.ps, n, err, start)
	}
	m.s.observe(d, start)
	return d, nil
}

// applyLocal runs policies one by one on the fallback store with the
// script's semantics: when one denies, the units taken from the others are
// given back and their decisions are peeks.
func (s *Store) applyLocal(ctx context.Context, key string, ps []*policy, n int64) (floodgate.Decision, error) {
	local := s.policy.local
	ds := make([]floodgate.Decision, len(ps))
	denied := false
	for i, p := range ps {
		d, err := local.Apply(ctx, key, p.local, n)
		if err != nil {
			return floodgate.Decision{}, errors.Join(err, s.undoLocal(ctx, key, ps[:i], ds, n))
		}
		ds[i] = d
		if !d.Allowed {
			denied = true
			if err := s.undoLocal(ctx, key, ps[:i], ds, n); err != nil {
				return floodgate.Decision{}, err
			}
			ds = ds[:i+1]
			break
		}
	}
	return mergeDecisions(ds, denied), nil
}

// undoLocal refunds n to the given policies and replaces their decisions by
// peeks.
func (s *Store) undoLocal(ctx context.Context, key string, ps []*policy, ds []floodgate.Decision, n int64) error {
	if n <= 0 {
		return nil
	}
	local := s.policy.local
	var errs []error
	for i, p := range ps {
		if _, err := local.Apply(context.WithoutCancel(ctx), key, p.local, -n); err != nil {
			errs = append(errs, err)
			continue
		}
		if d, err := local.Apply(context.WithoutCancel(ctx), key, p.local, 0); err == nil {
			ds[i] = d
		}
	}
	return errors.Join(errs...)
}

// mergeDecisions combines per-policy decisions as the script does.
func mergeDecisions(ds []floodgate.Decision, denied bool) floodgate.Decision {
	acc := ds[0]
	for _, d := range ds[1:] {
		acc.Allowed = acc.Allowed && d.Allowed
		if d.Remaining < acc.Remaining || (d.Remaining == acc.Remaining && d.Limit < acc.Limit) {
			acc.Limit, acc.Remaining = d.Limit, d.Remaining
		}
		acc.RetryAfter = max(acc.RetryAfter, d.RetryAfter)
		acc.ResetAfter = max(acc.ResetAfter, d.ResetAfter)
		acc.Delay = max(acc.Delay, d.Delay)
	}
	if denied {
		acc.Allowed = false
	}
	if !acc.Allowed {
		acc.Delay = 0
	}
	return acc
}

// ApplyAll implements [store.Store]. TEMPORARY (phase 0 of the reshape):
// evaluated op by op, not atomic; replaced by the one-script version.
func (s *Store) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	return false, errors.New("redisstore: ApplyAll not implemented yet")
}
