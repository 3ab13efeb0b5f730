package describe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/middleware"
)

// Entry is one entry of a descriptor: its key as the policy set's rules
// name it, whether its value is a credential (matched in clear, stored and
// observed only as a keyed hash), and where the value comes from. A value
// of "" means the request does not yield the descriptor.
type Entry[R any] struct {
	Key        string
	Credential bool
	Value      func(R) string
}

// Check validates the entries of one descriptor, as WithDescriptor takes
// them: at least one, each with a key and a value function. The error says
// what is wrong, without a package prefix.
func Check[R any](entries []Entry[R]) error {
	if len(entries) == 0 {
		return errors.New("WithDescriptor without entries")
	}
	for i, e := range entries {
		if e.Value == nil || e.Key == "" {
			return fmt.Errorf("WithDescriptor: entry %d is the zero Source or has no key", i)
		}
	}
	return nil
}

// Set is the descriptors every request of a Policies wrapper yields, on a
// policy set (a middleware.Matcher), with buffers reused across requests.
type Set[R any] struct {
	live  middleware.Matcher
	descs [][]Entry[R]
	cost  func(R) int
	bufs  sync.Pool // *Match
}

// New returns the Set of descs on live; cost, when not nil, is a request's
// cost (else 1). It fails, with an error wrapping floodgate.ErrInvalidConfig
// or the set's own, when there is no descriptor or when an entry is a
// credential and live cannot keep credentials (middleware.Matcher.CheckCredentials).
func New[R any](live middleware.Matcher, descs [][]Entry[R], cost func(R) int) (*Set[R], error) {
	if len(descs) == 0 {
		return nil, fmt.Errorf("%w: Policies needs at least one WithDescriptor", floodgate.ErrInvalidConfig)
	}
	for _, d := range descs {
		for _, e := range d {
			if e.Credential {
				if err := live.CheckCredentials(); err != nil {
					return nil, err
				}
			}
		}
	}
	s := &Set[R]{live: live, descs: descs, cost: cost}
	s.bufs.New = func() any { return &Match{} }
	return s, nil
}

// Match is what a request matched: the enforcing checks, decided, for the
// response's headers. Give it back with Release once they are written.
type Match struct {
	// Checks are the enforcing checks of the request, with their
	// decisions after Decide.
	Checks []floodgate.Check
	all    []floodgate.Check
	descs  []middleware.Descriptor
	pool   *sync.Pool
}

// Release gives the match's buffers back for the next request; m must not
// be used after.
func (m *Match) Release() {
	m.reset()
	m.pool.Put(m)
}

// reset empties m's buffers, keeping their capacity.
func (m *Match) reset() {
	// Cleared to their capacity: a descriptor cut short (an entry without
	// a value, a panicking one) or checks of a failed match may have been
	// written past the lengths; no credential, key or limiter stays
	// reachable from the pool.
	clear(m.all[:cap(m.all)])
	descs := m.descs[:cap(m.descs)]
	for i := range descs {
		clear(descs[i][:cap(descs[i])])
		descs[i] = descs[i][:0]
	}
	m.all, m.descs, m.Checks = m.all[:0], m.descs[:0], nil
}

// Decide builds r's descriptors, matches them on the live set and decides
// the enforcing checks on core, all or nothing, the dry-run ones beside
// them (charged when the request is admitted, reported in events of their
// own). A panicking entry, cost function or resolver, or a failed match,
// is decided as an error of the limiter, which core judges by its fail
// mode: every request gets a verdict.
func (s *Set[R]) Decide(ctx context.Context, core *admit.Core, r R, ev floodgate.Event, start int64) (admit.Verdict, *Match) {
	m := s.bufs.Get().(*Match)
	m.pool = &s.bufs
	all, enforcing, err := s.match(ctx, r, m)
	if err != nil {
		m.Checks = nil
		return core.DecideChecks(ctx, []floodgate.Check{{Limiter: failing{err}, N: 1}}, nil, ev, start), m
	}
	m.all = all
	m.Checks = all[:enforcing]
	return core.DecideChecks(ctx, m.Checks, all[enforcing:], ev, start), m
}

// match builds r's descriptors into m's buffers and matches them, turning
// a panic into an error.
func (s *Set[R]) match(ctx context.Context, r R, m *Match) (checks []floodgate.Check, enforcing int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: a descriptor entry, cost or resolver function: %v", admit.ErrPanic, p)
		}
	}()
	n := 1
	if s.cost != nil {
		n = s.cost(r)
	}
	for _, entries := range s.descs {
		k := len(m.descs)
		if k < cap(m.descs) {
			m.descs = m.descs[:k+1]
		} else {
			m.descs = append(m.descs, nil)
		}
		d := m.descs[k][:0]
		for _, e := range entries {
			v := e.Value(r)
			if v == "" {
				d = nil
				break
			}
			d = append(d, middleware.Entry{Key: e.Key, Value: v, Credential: e.Credential})
		}
		if d == nil {
			m.descs = m.descs[:k] // not yielded; reset clears what was read
			continue
		}
		m.descs[k] = d
	}
	return s.live.Match(ctx, m.descs, n, m.all[:0])
}

// failing is the limiter of a request whose checks could not be built: it
// reports err.
type failing struct{ err error }

func (f failing) Take(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{}, f.err
}
