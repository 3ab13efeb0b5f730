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
	st      algo.State
}

// ApplyAll implements [store.Store]: every op's shard is locked (in shard
// order, so that concurrent calls cannot deadlock), the clock is read once,
// every op is stepped on a copy of its key's state, and the copies are
// written back only when commit is set and every op admitted. The call is
// atomic on memory: no other call on any of the keys sees a partial group.
func (s *Store) ApplyAll(ctx context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	if len(out) < len(ops) {
		return false, fmt.Errorf("%w: memstore: ApplyAll with %d ops and %d decisions", floodgate.ErrInvalidConfig, len(ops), len(out))
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var entBuf [8]entry
	var refBuf [8]int
	ents, refs := entBuf[:0], refBuf[:0]
	var shBuf [8]int
	shards := shBuf[:0]
	for i := range ops {
		op := &ops[i]
		if op.Alg == nil {
			return false, fmt.Errorf("%w: memstore: op %d has a nil algorithm", floodgate.ErrInvalidConfig, i)
		}
		if op.N < 1 {
			return false, fmt.Errorf("%w: memstore: op %d has cost %d, want >= 1", floodgate.ErrInvalidCost, i, op.N)
		}
		sp := op.Alg.Spec()
		if sp.Words < 1 || sp.Words > algo.MaxWords || sp.MaxLog < 0 {
			return false, fmt.Errorf("%w: memstore: algorithm %q needs %d words and a log of %d", floodgate.ErrInvalidConfig, sp.Name, sp.Words, sp.MaxLog)
		}
		ti := sp.Words - 1
		if sp.MaxLog > 0 {
			ti += algo.MaxWords
		}
		id, chk := s.ids(op.Key, sp.Namespace)
		k := -1
		for j := range ents {
			if e := &ents[j]; e.id == id && e.chk == chk && e.ti == ti {
				k = j
				break
			}
		}
		if k < 0 {
			si := int(id & s.mask)
			ents = append(ents, entry{sh: &s.shards[si].shard, ti: ti, id: id, chk: chk})
			k = len(ents) - 1
			if !slices.Contains(shards, si) {
				shards = append(shards, si)
			}
		}
		refs = append(refs, k)
	}
	slices.Sort(shards)
	for _, si := range shards {
		s.shards[si].mu.Lock()
	}
	defer func() {
		for _, si := range slices.Backward(shards) {
			s.shards[si].mu.Unlock()
		}
	}()
	if s.closed.Load() {
		return false, floodgate.ErrClosed
	}
	now := s.now()
	for j := range ents {
		e := &ents[j]
		t := &e.sh.tables[e.ti]
		t.load(t.find(e.id, e.chk), &e.st)
	}
	all := true
	for i := range ops {
		e := &ents[refs[i]]
		e.st, out[i] = ops[i].Alg.Step(e.st, now, ops[i].N)
		all = all && out[i].Allowed
	}
	if !all || !commit {
		return all, nil
	}
	for j := range ents {
		e := &ents[j]
		t := &e.sh.tables[e.ti]
		i := t.find(e.id, e.chk)
		switch {
		case e.st.W[0] <= now:
			if i >= 0 {
				t.remove(uint64(i))
				e.sh.keys--
			}
		case i >= 0:
			t.store(i, &e.st)
		default:
			e.sh.insert(t, e.ti, e.id, e.chk, &e.st, now)
		}
	}
	return true, nil
}
