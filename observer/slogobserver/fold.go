package slogobserver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// defaultFoldInterval is how often an Observer writes a record for one
// failing key (policy, outcome, source) unless [WithFoldInterval] says
// otherwise.
const defaultFoldInterval = 10 * time.Second

// maxFoldedPolicies bounds the policies an Observer keeps fold state for.
// When that many are held, policies whose state is idle (nothing pending, the
// interval since their last record passed) are dropped to make room; a
// failing policy that still finds no room shares one overflow state per
// (outcome, source) with the others in its case, and its records carry
// overflow=true.
const maxFoldedPolicies = 1024

// foldedMessage is the message of a record that writes a folded count that
// no failing decision came to carry: on recovery, or from
// [Observer.Flush].
const foldedMessage = "floodgate failures folded"

// failureOutcomes are the outcomes that are folded, in slot order.
var failureOutcomes = [...]floodgate.Outcome{
	floodgate.OutcomeErrorOpen,
	floodgate.OutcomeErrorClosed,
	floodgate.OutcomeFallback,
}

// failureSlot returns o's index in failureOutcomes, or -1 when o is not a
// failure.
func failureSlot(o floodgate.Outcome) int {
	switch o {
	case floodgate.OutcomeErrorOpen:
		return 0
	case floodgate.OutcomeErrorClosed:
		return 1
	case floodgate.OutcomeFallback:
		return 2
	}
	return -1
}

// numSourceSlots: one slot per known source, indexed by its value; slot 0
// holds the sources floodgate may add later (the zero Source means
// SourceRequest and uses that slot).
const numSourceSlots = int(floodgate.SourceShadow) + 1

func sourceSlot(s floodgate.Source) int {
	switch {
	case s == 0:
		return int(floodgate.SourceRequest)
	case s <= floodgate.SourceShadow:
		return int(s)
	}
	return 0
}

// foldEntry is the state of one (policy, outcome, source).
type foldEntry struct {
	// next is the time (nanoseconds since folds.epoch) before which a
	// failure is folded rather than written.
	next atomic.Int64
	// folded counts the failures folded since the last record of the key.
	folded atomic.Int64
}

// policyFolds is the fold state of one policy: 3 x 5 entries, 240 bytes.
type policyFolds struct {
	e [len(failureOutcomes)][numSourceSlots]foldEntry
}

// idle reports whether nothing is pending and no entry's interval is still
// running at now. Called with folds.mu held for writing.
func (p *policyFolds) idle(now int64) bool {
	for i := range p.e {
		for j := range p.e[i] {
			if p.e[i][j].folded.Load() != 0 || p.e[i][j].next.Load() > now {
				return false
			}
		}
	}
	return true
}

// folds is an Observer's fold state. Readers (every failing decision, and
// successful ones while a count is pending) hold mu for reading while they
// touch an entry, so that an entry is only dropped (under the write lock)
// when no one is counting into it.
type folds struct {
	interval int64 // nanoseconds; 0: folding is off
	epoch    time.Time

	mu       sync.RWMutex
	byPolicy map[string]*policyFolds
	overflow policyFolds
	// nextSweep is when a full byPolicy may next be swept for idle
	// policies (guarded by mu).
	nextSweep int64

	// pending is the number of entries holding a folded count (it may lag
	// by the increments in flight). While it is 0 a successful decision
	// costs one atomic load here.
	pending atomic.Int64
}

func (f *folds) now() int64 { return int64(time.Since(f.epoch)) }

// lookup returns policy's state, with f.mu held: for writing when write is
// true (the state was just made), else for reading. over is true for the
// overflow state.
func (f *folds) lookup(policy string, now int64) (p *policyFolds, write, over bool) {
	f.mu.RLock()
	if p = f.byPolicy[policy]; p != nil {
		return p, false, false
	}
	if len(f.byPolicy) >= maxFoldedPolicies && now < f.nextSweep {
		return &f.overflow, false, true
	}
	f.mu.RUnlock()
	f.mu.Lock()
	if p = f.byPolicy[policy]; p != nil {
		return p, true, false
	}
	if len(f.byPolicy) >= maxFoldedPolicies && now >= f.nextSweep {
		// At most one sweep per interval: a full map costs the policies
		// beyond it a read lock, not a scan each.
		f.nextSweep = now + f.interval
		for name, q := range f.byPolicy {
			if q.idle(now) {
				delete(f.byPolicy, name)
			}
		}
	}
	if len(f.byPolicy) >= maxFoldedPolicies {
		return &f.overflow, true, true
	}
	p = new(policyFolds)
	f.byPolicy[policy] = p
	return p, true, false
}

func (f *folds) unlock(write bool) {
	if write {
		f.mu.Unlock()
	} else {
		f.mu.RUnlock()
	}
}

// admit counts one failure of (policy, outcome slot oi, source slot si). It
// reports whether its record is to be written, with the count folded since
// the key's last record; when it is not, the failure was folded.
func (f *folds) admit(policy string, oi, si int) (write bool, folded int64, over bool) {
	now := f.now()
	p, w, over := f.lookup(policy, now)
	en := &p.e[oi][si]
	next := en.next.Load()
	if now < next || !en.next.CompareAndSwap(next, now+f.interval) {
		if en.folded.Add(1) == 1 {
			f.pending.Add(1)
		}
		f.unlock(w)
		return false, 0, over
	}
	folded = en.folded.Swap(0)
	if folded != 0 {
		f.pending.Add(-1)
	}
	f.unlock(w)
	return true, folded, over
}

// foldedCount is a count taken from an entry, to be written.
type foldedCount struct {
	policy  string
	outcome floodgate.Outcome
	source  floodgate.Source // 0: a source this package does not know
	n       int64
	over    bool
}

// take moves p's pending counts into out: all of them when force is set,
// else those whose interval has passed at now (starting a new interval); a
// negative now is read from the clock when a count is found. Called with
// f.mu held.
func (f *folds) take(out []foldedCount, policy string, p *policyFolds, over, force bool, now int64) []foldedCount {
	for oi := range p.e {
		for si := range p.e[oi] {
			en := &p.e[oi][si]
			if en.folded.Load() == 0 {
				continue
			}
			if !force {
				if now < 0 {
					now = f.now()
				}
				next := en.next.Load()
				if now < next || !en.next.CompareAndSwap(next, now+f.interval) {
					continue
				}
			}
			n := en.folded.Swap(0)
			if n == 0 {
				continue
			}
			f.pending.Add(-1)
			out = append(out, foldedCount{policy: policy, outcome: failureOutcomes[oi],
				source: floodgate.Source(si), n: n, over: over})
		}
	}
	return out
}

// recovered takes the counts of policy whose interval has passed, on a
// decision of that policy that did not fail. A policy without state of its
// own takes the overflow's.
func (f *folds) recovered(out []foldedCount, policy string) []foldedCount {
	f.mu.RLock()
	p, over := f.byPolicy[policy], false
	if p == nil {
		p, over, policy = &f.overflow, true, ""
	}
	out = f.take(out, policy, p, over, false, -1)
	f.mu.RUnlock()
	return out
}

// flush takes every pending count.
func (f *folds) flush() []foldedCount {
	var out []foldedCount
	f.mu.RLock()
	for name, p := range f.byPolicy {
		out = f.take(out, name, p, false, true, 0)
	}
	out = f.take(out, "", &f.overflow, true, true, 0)
	f.mu.RUnlock()
	return out
}
