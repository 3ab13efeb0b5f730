package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
)

// A Leased policy is decided by a lease.Limiter on the Live's store (which
// must be a lease.Global: redisstore). The global bucket's state lives in
// the store with its parameters beside it, and Grant converts it as Apply
// does, so a new lease.Limiter with new parameters carries every key over:
// a change of a Leased policy replaces its lease.Limiter, an unchanged one
// keeps it. A replaced (or removed) lease.Limiter is closed, which gives
// back the tokens it holds, leaseGrace after the swap, so that a request
// that picked the old Set just before it still gets a decision.

// leaseGrace is how long a replaced lease.Limiter serves the requests that
// picked it before its Set was replaced.
var leaseGrace = time.Second

// leased is a Leased policy's lease limiter, with the policy it was made for.
type leased struct {
	policy Policy
	lim    *lease.Limiter
}

// sameLease reports whether a lease limiter made for p serves q.
func (p Policy) sameLease(q Policy) bool {
	return p.sameLimit(q) && p.LeaseRefresh == q.LeaseRefresh
}

// compile compiles cfg on the Live's store into pl: the lineage's store
// limiter of every policy, and a lease limiter for the Leased ones (the
// running one when the policy did not change). Called with l.mu held. When
// cfg does not compile, the lease limiters made for it are closed.
func (l *Live) compile(cfg Config, pl *plan) (*Set, error) {
	pl.leases = map[string]leased{}
	set, err := compile(cfg, l.store, l.resolver, l.hasher, func(p Policy) (limit, error) {
		lim, err := l.lineages.limiter(p, l.store, pl)
		if err != nil || !p.Leased {
			return limit{lim: lim}, err
		}
		ll, err := l.lease(p, pl)
		return limit{lim: lim, lease: ll}, err
	})
	if err != nil {
		for _, ll := range pl.opened {
			ll.Close(context.Background()) // it holds no tokens yet
		}
		return nil, err
	}
	return set, nil
}

// lease returns the lease limiter of the Leased policy p for pl: the
// running one if p did not change, else a new one.
func (l *Live) lease(p Policy, pl *plan) (*lease.Limiter, error) {
	if cur, ok := l.leases[p.Name]; ok && cur.policy.sameLease(p) {
		pl.leases[p.Name] = cur
		return cur.lim, nil
	}
	g, ok := l.store.(lease.Global)
	if !ok {
		return nil, fmt.Errorf("%w: policy %q: leased needs a shared store that grants leases (redisstore), not %T", floodgate.ErrInvalidConfig, p.Name, l.store)
	}
	ll, err := lease.New(g, lease.Config{Bucket: p.bucket(), Refresh: p.LeaseRefresh})
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	pl.opened = append(pl.opened, ll)
	pl.leases[p.Name] = leased{policy: p, lim: ll}
	return ll, nil
}

// commitLeases makes pl's lease limiters the running ones and retires
// those it replaced or dropped: each is closed leaseGrace later. Called
// with l.mu held, after the swap of the Set.
func (l *Live) commitLeases(pl *plan) {
	for name, cur := range l.leases {
		if next, ok := pl.leases[name]; ok && next.lim == cur.lim {
			continue
		}
		ll := cur.lim
		if l.retiring == nil {
			l.retiring = map[*lease.Limiter]*time.Timer{}
		}
		l.retiring[ll] = time.AfterFunc(leaseGrace, func() {
			l.mu.Lock()
			if _, ok := l.retiring[ll]; !ok {
				l.mu.Unlock()
				return // Close closes it
			}
			delete(l.retiring, ll)
			l.closing.Add(1)
			l.mu.Unlock()
			defer l.closing.Done()
			ll.Close(context.Background()) // bounded by the store's timeout
		})
	}
	l.leases = pl.leases
}

// Close closes the lease limiters of the Live's Leased policies, giving
// back the tokens they hold (bounded by ctx and the store's timeout), and
// those of the policies changed or removed less than a second ago; it
// returns the errors of the give-back. A Live without Leased policies has
// nothing to close. After Close, a Leased policy's requests get an error
// wrapping [floodgate.ErrClosed], the other policies are decided as before,
// and Update refuses every config. Close is idempotent.
func (l *Live) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	var errs []error
	for ll, t := range l.retiring {
		t.Stop()
		errs = append(errs, ll.Close(ctx))
	}
	l.retiring = nil
	for _, cur := range l.leases {
		errs = append(errs, cur.lim.Close(ctx))
	}
	l.mu.Unlock()
	l.closing.Wait() // the retiring timers already closing
	return errors.Join(errs...)
}
