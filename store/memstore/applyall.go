package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// entry is one distinct (key, namespace) of an ApplyAll call: where its
// state lives and the state its ops step, in order.
type entry struct {
	sh      *shard
	ti      int
	id, chk uint64
	op      int // the first op on it
	slot    int // where the load found it (-1: absent)
	// pred is where the load found the state under another version's
	// namespace, when slot < 0 (see algo.Lineage).
	pred struct {
		ok      bool
		ti      int
		id, chk uint64
	}
	st algo.State
}

// loadEntry loads e's state into e.st: from its slot, else read through the
// other versions of its first op's algorithm (converted, not moved), else
// fresh.
func (s *Store) loadEntry(e *entry, ops []store.Op, now int64) {
	t := &e.sh.tables[e.ti]
	e.slot = t.find(e.id, e.chk)
	t.load(e.slot, &e.st)
	e.pred.ok = false
	if e.slot < 0 {
		o := &ops[e.op]
		if p, ok := s.predecessor(e.sh, o.Key, o.Alg, now, &e.st); ok {
			e.pred.ok, e.pred.ti, e.pred.id, e.pred.chk = true, p.ti, p.id, p.chk
		}
	}
}

// groupOnStack is the largest group whose bookkeeping lives on the stack.
const groupOnStack = 8

// ApplyAll implements [store.Store]. Every op's shard is locked, in shard
// order (so that concurrent calls cannot deadlock), the clock is read once,
// and every op is stepped, in order, on a copy of its key's state; the
// copies are written back only when commit is set and every op admitted.
// The call is atomic on memory: no other call on any of the keys sees a
// partial group (the token bucket's decisions made without the lock
// included: they take it while the group writes), and a denied or evaluated group leaves every state bit for
// bit as it was. When new keys need room in a full shard, the evictions
// spare the group's own keys (while the shard holds others).
//
// It returns [floodgate.ErrClosed] after Close, the context's error when ctx
// is already done, an error wrapping [floodgate.ErrInvalidCost] for an op
// of cost below 1, and one wrapping [floodgate.ErrInvalidConfig] when out
// is shorter than ops or an algorithm is nil or has a Spec a store cannot
// keep. Up to 8 ops, it allocates nothing.
func (s *Store) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	if len(out) < len(ops) {
		return false, fmt.Errorf("%w: memstore: ApplyAll with %d ops and %d decisions", floodgate.ErrInvalidConfig, len(ops), len(out))
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var (
		entBuf  [groupOnStack]entry
		refBuf  [groupOnStack]int
		shBuf   [groupOnStack]int
		keepBuf [groupOnStack]uint64
	)
	ents, refs, shards, keep, err := s.group(ops, entBuf[:0], refBuf[:0], shBuf[:0], keepBuf[:0])
	if err != nil {
		return false, err
	}
	if len(ents) == 0 {
		if s.closed.Load() {
			return false, floodgate.ErrClosed
		}
		return true, nil
	}
	slices.Sort(shards)
	for _, si := range shards {
		s.shards[si].mu.Lock()
	}
	// Deferred: the shards stay usable even if a faulty algorithm panics.
	defer func() {
		for k := len(shards) - 1; k >= 0; k-- {
			s.shards[shards[k]].mu.Unlock()
		}
	}()
	// Checked under the locks, as in Apply: Close marks the store closed
	// before it empties each shard under its lock.
	if s.closed.Load() {
		return false, floodgate.ErrClosed
	}
	now := s.now()
	for j := range ents {
		s.loadEntry(&ents[j], ops, now)
	}
	// StepState steps in the first shard's scratch, which its lock owns:
	// a pointer to the group's own states would move them to the heap.
	scratch := &s.shards[shards[0]].st
	all := true
	for i := range ops {
		e := &ents[refs[i]]
		stepInto(ops[i].Alg, e.ti == 0, &e.st, scratch, now, ops[i].N, &out[i])
		all = all && out[i].Allowed
	}
	if !all {
		s.peekAdmitted(ops, ents, refs, out, scratch, now)
	}
	scratch.Log = nil
	if !all && commit {
		// Refused, but keys read through an earlier version of a limit
		// move now, converted and not stepped (the conversion credits
		// nothing), as Apply moves them: the new parameters apply from the
		// first call after a change, whatever the group decides.
		for j := range ents {
			if e := &ents[j]; e.pred.ok {
				s.loadEntry(e, ops, now)
			}
		}
		s.commitGroup(shards, ents, now, keep, true)
		return false, nil
	}
	if !all || !commit {
		s.dropCopies(ents)
		return all, nil
	}
	s.commitGroup(shards, ents, now, keep, false)
	return true, nil
}

// commitGroup is commitEntries with the one-word table of every shard of
// the group held in a structural change (its seq odd) from before the
// first write to after the last: the token bucket's decisions made without
// the lock (see applyShared) then fall back to the lock while any of the
// group's states is written, so that none of them sees one of the group's
// keys written and another not yet (the group is atomic for them too).
// A group with at most one one-word state needs no hold: the decisions
// made under the lock see none of its writes before the group's last.
func (s *Store) commitGroup(shards []int, ents []entry, now int64, keep []uint64, movedOnly bool) {
	words := 0
	for j := range ents {
		if ents[j].ti == 0 {
			words++
		}
	}
	if words < 2 {
		s.commitEntries(ents, now, keep, movedOnly)
		return
	}
	for _, si := range shards {
		sh := &s.shards[si].shard
		// A table that is not shared yet (no slots) has nothing a reader
		// could find before this commit; one it creates is held by its
		// own inserts only.
		if t := &sh.tables[0]; t.shared {
			t.begin()
			sh.held = true
		}
	}
	s.commitEntries(ents, now, keep, movedOnly)
	for _, si := range shards {
		if sh := &s.shards[si].shard; sh.held {
			sh.held = false
			sh.tables[0].end()
		}
	}
}

// group checks ops and gathers their distinct (key, namespace) entries
// into ents (refs: each op's entry), the shards they live in and the ids
// eviction must keep, appending to the slices given (the caller's stack
// buffers).
func (s *Store) group(ops []store.Op, ents []entry, refs, shards []int, keep []uint64) ([]entry, []int, []int, []uint64, error) {
	for i := range ops {
		o := &ops[i]
		if o.Alg == nil {
			return nil, nil, nil, nil, fmt.Errorf("%w: memstore: op %d has a nil algorithm", floodgate.ErrInvalidConfig, i)
		}
		if o.N < 1 {
			return nil, nil, nil, nil, fmt.Errorf("%w: memstore: op %d has cost %d, want >= 1", floodgate.ErrInvalidCost, i, o.N)
		}
		ns, ti, err := layout(o.Alg)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		id, chk, si := s.ids(o.Key, ns)
		k := -1
		for j := range ents {
			if e := &ents[j]; e.id == id && e.chk == chk && e.ti == ti {
				k = j
				break
			}
		}
		if k < 0 {
			// In place: a composite literal would be built, then copied.
			if len(ents) < cap(ents) {
				ents = ents[:len(ents)+1]
			} else {
				ents = append(ents, entry{})
			}
			k = len(ents) - 1
			e := &ents[k]
			e.sh, e.ti, e.id, e.chk, e.op = &s.shards[si].shard, ti, id, chk, i
			keep = append(keep, id)
			if !slices.Contains(shards, int(si)) {
				shards = append(shards, int(si))
			}
		}
		refs = append(refs, k)
	}
	return ents, refs, shards, keep, nil
}

// peekAdmitted makes the decision of each op of a refused group that
// would have admitted report its key as it stands, charged nothing (a
// peek on the state in the table).
func (s *Store) peekAdmitted(ops []store.Op, ents []entry, refs []int, out []floodgate.Decision, scratch *algo.State, now int64) {
	for i := range ops {
		if !out[i].Allowed {
			continue
		}
		e := &ents[refs[i]]
		s.loadEntry(e, ops, now)
		stepInto(ops[i].Alg, e.ti == 0, &e.st, scratch, now, 0, &out[i])
	}
}

// dropCopies drops the group's copies of the states, unwritten. A log's
// copy may have appended into the spare capacity of the log still in the
// table, never over its entries (see algo.State): the table's state is
// unchanged. (The refusals' RetryAfter get no slack: ApplyAll reads the
// exact clock.)
func (s *Store) dropCopies(ents []entry) {
	for j := range ents {
		ents[j].st.Log = nil
	}
}

// commitEntries writes the entries' states back (only those read through a
// another version when movedOnly), under the group's locks.
func (s *Store) commitEntries(ents []entry, now int64, keep []uint64, movedOnly bool) {
	// Slots found by the load stay valid until the first removal or
	// insertion in the shard (an eviction, a resize or a backward shift
	// moves entries): from then on, each key is found again.
	moved := false
	for j := range ents {
		// States read through another version move: out of its namespace
		// first, into the entry's below.
		if e := &ents[j]; e.pred.ok {
			if i := e.sh.tables[e.pred.ti].find(e.pred.id, e.pred.chk); i >= 0 {
				e.sh.removeAt(predSlot{ti: e.pred.ti, slot: i, id: e.pred.id, chk: e.pred.chk})
				moved = true
			}
		}
	}
	for j := range ents {
		e := &ents[j]
		if movedOnly && !e.pred.ok {
			e.st.Log = nil
			continue
		}
		t := &e.sh.tables[e.ti]
		i := e.slot
		if moved {
			i = t.find(e.id, e.chk)
		}
		switch {
		case e.st.W[0] <= now:
			if i >= 0 {
				t.remove(uint64(i))
				e.sh.keys--
				moved = true
			}
		case i >= 0:
			t.store(i, &e.st)
		default:
			e.sh.insert(t, e.ti, e.id, e.chk, &e.st, now, keep)
			moved = true
		}
		e.st.Log = nil
	}
}

// layout returns the namespace of alg and the index of the table that keeps
// its states, or an error for a Spec a store cannot keep.
func layout(alg algo.Algorithm) (ns uint64, ti int, err error) {
	var words, maxLog int
	if l, ok := alg.(algo.Layout); ok {
		ns, words, maxLog, _ = l.Layout()
	} else {
		sp := alg.Spec()
		ns, words, maxLog = sp.Namespace, sp.Words, sp.MaxLog
	}
	if words < 1 || words > algo.MaxWords || maxLog < 0 {
		return 0, 0, fmt.Errorf("%w: memstore: algorithm %q needs %d words and a log of %d, want 1..%d words and a log >= 0",
			floodgate.ErrInvalidConfig, alg.Spec().Name, words, maxLog, algo.MaxWords)
	}
	ti = words - 1
	if maxLog > 0 {
		ti += algo.MaxWords
	}
	return ns, ti, nil
}

// stepInto steps alg on *st and writes the decision to *d, through the
// algorithm's fastest step: StepWord when oneWord tells that the state is
// one word without a log (table 0), StepState on scratch (memory the
// caller's lock owns, which the algorithm may point to), Step otherwise.
func stepInto(alg algo.Algorithm, oneWord bool, st, scratch *algo.State, now, n int64, d *floodgate.Decision) {
	if oneWord {
		if ws, ok := alg.(algo.WordStepper); ok {
			*d = floodgate.Decision{}
			st.W[0] = ws.StepWord(st.W[0], now, n, d)
			return
		}
	}
	if ss, ok := alg.(algo.StateStepper); ok {
		*scratch = *st
		ss.StepState(scratch, now, n, d)
		*st = *scratch
		return
	}
	*st, *d = alg.Step(*st, now, n)
}
