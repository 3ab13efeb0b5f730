package memstore

import (
	"hash/maphash"
	"slices"

	"github.com/floodgate-go/floodgate/store/algo"
)

// predSlot is where a key's state was found under a predecessor's
// namespace: table ti, slot (valid until the shard's next removal or
// insertion), and the entry's id and check hash to find it again.
type predSlot struct {
	ti      int
	slot    int
	id, chk uint64
}

// predecessor looks key up, in its shard sh (locked), under the namespaces
// of the other versions of alg's limit (see algo.Lineage), newest first:
// its predecessors, and the versions that replaced it when a decision on
// it was still in flight. The first state found is loaded into *st,
// converted to alg at now unless it was written with the same parameters,
// and its place is returned; the entry is left where it is. It reports
// false, leaving *st alone, when alg is no Lineage or no other version
// holds the key. (Called only when the key has no state under alg's own
// namespace: this is what a live change costs, and only on a miss.)
func (s *Store) predecessor(sh *shard, key string, alg algo.Algorithm, now int64, st *algo.State) (predSlot, bool) {
	lg, ok := alg.(algo.Lineage)
	if !ok {
		return predSlot{}, false
	}
	vs := lg.Versions().Load()
	if len(vs) == 0 {
		return predSlot{}, false
	}
	own := algo.MemoryNamespace(alg)
	a, b := maphash.String(s.seedA, key), maphash.String(s.seedB, key)
	for _, p := range vs {
		ns, ti, err := layout(p)
		if err != nil || ns == own {
			continue
		}
		id, chk, _ := idsOf(a, b, ns, s.mask)
		t := &sh.tables[ti]
		i := t.find(id, chk)
		if i < 0 {
			continue
		}
		t.load(i, st)
		if !slices.Equal(algo.StateParams(p.Spec()), algo.StateParams(alg.Spec())) {
			*st = lg.Convert(*st, now, p)
		}
		return predSlot{ti: ti, slot: i, id: id, chk: chk}, true
	}
	return predSlot{}, false
}

// removeAt drops the entry at p.
func (sh *shard) removeAt(p predSlot) {
	sh.tables[p.ti].remove(uint64(p.slot))
	sh.keys--
}

// readThroughWord is the one-word path's read-through: the first word of
// key's state moved from another version of alg's limit (converted), or 0
// (fresh).
//
//go:noinline
func (s *Store) readThroughWord(sh *shard, key string, alg algo.Algorithm, now int64) int64 {
	st := &sh.st
	p, ok := s.predecessor(sh, key, alg, now, st)
	if !ok {
		return 0
	}
	sh.removeAt(p)
	w0 := st.W[0]
	*st = algo.State{}
	return w0
}
