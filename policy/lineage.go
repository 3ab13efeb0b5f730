package policy

import (
	"math"
	"slices"
	"time"
	"weak"

	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// A live change keeps every key's state (see the package documentation,
// "Live changes"). On a store whose states carry their parameters (Redis)
// the store converts a key on its first request after the change, in the
// script. A memory store keeps each version of a policy's parameters under
// a namespace of its own and, when a version finds no state for a key,
// reads it through the policy's other versions (algo.Lineage, whose
// algo.Versions every version of the policy shares, so that one replaced
// while a request holds it finds what the running one moved): the Live
// keeps those, per policy name, for as long as a key may hold a state that
// is not full (the algorithm's FullWithin after the version was replaced),
// at most algo.MaxPredecessors of them besides the running one.

// version is one set of parameters a policy name has run with.
type version struct {
	policy Policy
	alg    algo.Algorithm // as the limiter runs it (a Lineage after a change)
	lim    *store.Limiter
	// until is when every state the version left is full again; zero for
	// the running version.
	until time.Time
}

// lineages is the versions of every policy name, newest first: the running
// one (if the name is in the running config), then those replaced whose
// keys may still hold states. Guarded by Live.mu.
type lineages map[string][]version

// plan is the versions of the config being compiled, committed only when
// the whole config compiles.
type plan struct {
	now  time.Time
	next map[string]version // the running version of each policy
	// leases are the lease limiters of the config's Leased policies, and
	// opened those made for it (closed if it does not compile).
	leases map[string]leased
	opened []*lease.Limiter
}

// limiter returns the limiter of p in the config being compiled: the
// running one when p's parameters have not changed, else a new one. Either
// way, the algorithm is a version of the policy's limit (algo.Succeed)
// whose versions are the running one and the earlier ones whose keys may
// hold states: a memory store reads each key's state through them, on
// every version of the limit, those in flight included.
func (ls lineages) limiter(p Policy, s store.Store, pl *plan) (*store.Limiter, error) {
	base, err := p.build()
	if err != nil {
		return nil, err
	}
	vs := ls[p.Name]
	same := len(vs) > 0 && vs[0].until.IsZero() && vs[0].policy.sameLimit(p)
	older, next := vs, base
	if same {
		older, next = vs[1:], vs[0].alg
	}
	conv, ok := base.(algo.Converter)
	if !ok {
		// It cannot carry state over a change: a limit of its own.
		if same {
			pl.next[p.Name] = vs[0]
			return vs[0].lim, nil
		}
		return newVersion(p, s, pl, base)
	}
	var preds []algo.Algorithm
	for _, v := range older {
		if (v.until.IsZero() || v.until.After(pl.now)) && conv.Converts(v.alg) {
			preds = append(preds, v.alg)
		}
	}
	lg, err := algo.Succeed(next, preds)
	if err != nil {
		return nil, err
	}
	if same {
		pl.next[p.Name] = vs[0]
		return vs[0].lim, nil
	}
	return newVersion(p, s, pl, lg)
}

// newVersion makes the limiter of p's version alg for pl.
func newVersion(p Policy, s store.Store, pl *plan, alg algo.Algorithm) (*store.Limiter, error) {
	lim, err := store.NewLimiter(s, alg)
	if err != nil {
		return nil, err
	}
	pl.next[p.Name] = version{policy: p, alg: alg, lim: lim}
	return lim, nil
}

// commit makes pl the lineages' running versions: a version that is
// replaced (or whose policy is gone) is kept until its states are all full,
// expired versions go, and at most algo.MaxPredecessors versions are kept
// besides the running one. It returns the names of the policies whose
// versions were dropped before they expired.
func (ls lineages) commit(pl *plan) (dropped []string) {
	for name, vs := range ls {
		if len(vs) > 0 && vs[0].until.IsZero() {
			if nv, ok := pl.next[name]; ok && nv.lim == vs[0].lim {
				continue // unchanged
			}
			vs[0].until = pl.now.Add(fullWithin(vs[0].alg))
		}
	}
	for name, nv := range pl.next {
		if vs := ls[name]; len(vs) > 0 && vs[0].lim == nv.lim {
			continue
		}
		ls[name] = append([]version{nv}, ls[name]...)
	}
	for name, vs := range ls {
		kept, lost := prune(vs, pl.now)
		if len(kept) == 0 {
			delete(ls, name)
		} else {
			ls[name] = kept
		}
		if lost {
			dropped = append(dropped, name)
		}
	}
	slices.Sort(dropped)
	return dropped
}

// prune keeps, of a lineage's versions (newest first), those still needed
// at now: not expired, not shadowed by a newer version with the same
// parameters, and no more than the predecessors a store converts from;
// lost reports that a needed version was dropped for the last reason.
func prune(vs []version, now time.Time) (kept []version, lost bool) {
	kept = vs[:0]
	var seen []uint64
	for _, v := range vs {
		ns := algo.MemoryNamespace(v.alg)
		switch {
		case !v.until.IsZero() && !v.until.After(now):
		case slices.Contains(seen, ns):
			// A newer version with the same parameters holds its keys.
		case len(kept) > algo.MaxPredecessors:
			lost = true
		default:
			seen = append(seen, ns)
			kept = append(kept, v)
		}
	}
	clear(vs[len(kept):])
	return kept, lost
}

// fullWithin is how long after a version is replaced every state it left
// is full: its FullWithin, or at once for an algorithm that cannot convert.
func fullWithin(a algo.Algorithm) time.Duration {
	c, ok := a.(algo.Converter)
	if !ok {
		return 0
	}
	// A leaky bucket with reservations may be in debt for years: at most
	// what a Duration holds (292 years).
	return time.Duration(min(c.FullWithin(), math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
}

// nextExpiry is the earliest time at which a running version reads through
// a version that expires, or the zero Time.
func (ls lineages) nextExpiry() time.Time {
	var at time.Time
	for _, vs := range ls {
		if len(vs) == 0 || !vs[0].until.IsZero() {
			continue
		}
		for _, v := range vs[1:] {
			if at.IsZero() || v.until.Before(at) {
				at = v.until
			}
		}
	}
	return at
}

// schedule arms the timer that drops expired versions from the running
// limiters (Live.retire), for the earliest expiry. The timer holds the Live
// weakly: a Live dropped by its user is not kept alive by it. Called with
// l.mu held.
func (l *Live) schedule() {
	at := l.lineages.nextExpiry()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if at.IsZero() {
		return
	}
	wp := weak.Make(l)
	l.timer = time.AfterFunc(max(at.Sub(l.now()), 0)+time.Millisecond, func() {
		if l := wp.Value(); l != nil {
			l.retire()
		}
	})
}

// retire recompiles the running config so that no limiter reads through a
// version whose keys are all full again: a miss on a memory store then
// costs no look-up under it. It is not a config change (no new version, no
// Change reported).
func (l *Live) retire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.cur.Load()
	if cur == nil {
		return
	}
	pl := &plan{now: l.now(), next: map[string]version{}}
	set, err := l.compile(cur.cfg, pl)
	if err != nil {
		return // cannot happen: the config compiled before
	}
	set.ownSecret = l.ownSecret
	l.lineages.commit(pl)
	l.cur.Store(set)
	l.commitLeases(pl) // the same leases: the policies did not change
	l.schedule()
}
