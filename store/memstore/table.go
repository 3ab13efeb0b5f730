package memstore

import (
	"math/bits"
	"slices"

	"github.com/floodgate-go/floodgate/store/algo"
)

// table is an open-addressing hash table with Robin Hood linear probing and
// backward-shift deletion, specialised for one state width.
//
// Every slot is stride = 2 + words consecutive uint64 in one flat slice:
// the key's id (0 marks an empty slot), its independent check hash, then the
// state words. The flat slice holds no pointers, so the garbage collector
// never scans it, and a 1-word state costs 24 bytes a slot. Tables that keep
// a variable-size log (Spec.MaxLog > 0) have a parallel slice of logs.
//
// The home slot of an id is (id * capacity) >> 64, which works for any
// capacity: the table grows by half (not by doubling) at 7/8 load, so it is
// always between 58% and 88% full once it has grown, which is what keeps the
// memory per key low at any key count.
type table struct {
	slots  []uint64
	logs   [][]int64 // nil unless the table keeps logs
	size   uint64    // number of slots
	stride uint64    // 2 + words
	words  int
	n      int // live entries
	limit  int // n at which the table grows
}

const minTableSize = 8

// init prepares an empty table for states of the given width.
func (t *table) init(words int, withLog bool) {
	t.words = words
	t.stride = uint64(2 + words)
	t.alloc(minTableSize, withLog)
}

func (t *table) alloc(size uint64, withLog bool) {
	t.size = size
	t.slots = make([]uint64, size*t.stride)
	t.logs = nil
	if withLog {
		t.logs = make([][]int64, size)
	}
	t.limit = int(size - size/8)
}

func (t *table) home(id uint64) uint64 {
	hi, _ := bits.Mul64(id, t.size)
	return hi
}

// dist is how far slot i is from id's home slot.
func (t *table) dist(id, i uint64) uint64 {
	h := t.home(id)
	if i >= h {
		return i - h
	}
	return i + t.size - h
}

// find returns the slot holding (id, chk), or -1. Entries that share an id
// but not the check hash are different keys: the probe goes on past them.
func (t *table) find(id, chk uint64) int {
	if t.size == 0 {
		return -1
	}
	i := t.home(id)
	for d := uint64(0); ; d++ {
		b := i * t.stride
		sid := t.slots[b]
		if sid == 0 {
			return -1
		}
		if sid == id && t.slots[b+1] == chk {
			return int(i)
		}
		// Robin Hood invariant: a key is never further from home than a
		// resident it passed, so a resident closer to its home ends the probe.
		if t.dist(sid, i) < d {
			return -1
		}
		if i++; i == t.size {
			i = 0
		}
	}
}

// load sets every field of s to slot i's state, or to the zero State
// (a fresh key) when i < 0: the words the table does not keep are zero, and
// Log is nil unless the table keeps logs.
func (t *table) load(i int, s *algo.State) {
	if i < 0 {
		*s = algo.State{}
		return
	}
	b := uint64(i) * t.stride
	w := t.slots[b+2 : b+t.stride]
	for k := range s.W {
		if k < len(w) {
			s.W[k] = int64(w[k])
		} else {
			s.W[k] = 0
		}
	}
	s.Log = nil
	if t.logs != nil {
		s.Log = t.logs[i]
	}
}

// store writes s into slot i.
func (t *table) store(i int, s *algo.State) {
	b := uint64(i) * t.stride
	w := t.slots[b+2 : b+t.stride]
	for k := range w {
		w[k] = uint64(s.W[k])
	}
	if t.logs != nil {
		t.logs[i] = s.Log
	}
}

// setWord0 sets slot i's first state word.
func (t *table) setWord0(i int, w int64) { t.slots[uint64(i)*t.stride+2] = uint64(w) }

// full0 returns slot i's first word: the time at which its state is full.
func (t *table) full0(i uint64) int64 { return int64(t.slots[i*t.stride+2]) }

// insert adds (id, chk) with state s; the key must not be present. It grows
// the table first when needed.
func (t *table) insert(id, chk uint64, s *algo.State) {
	if t.n >= t.limit {
		t.resize(t.size + t.size/2)
	}
	var carry [2 + algo.MaxWords]uint64
	carry[0], carry[1] = id, chk
	for k := 0; k < t.words; k++ {
		carry[2+k] = uint64(s.W[k])
	}
	t.put(carry[:t.stride], s.Log)
	t.n++
}

// put places an entry by Robin Hood insertion.
func (t *table) put(carry []uint64, log []int64) {
	i := t.home(carry[0])
	d := uint64(0)
	for {
		b := i * t.stride
		slot := t.slots[b : b+t.stride]
		if slot[0] == 0 {
			copy(slot, carry)
			if t.logs != nil {
				t.logs[i] = log
			}
			return
		}
		if sd := t.dist(slot[0], i); sd < d {
			for k := range slot {
				carry[k], slot[k] = slot[k], carry[k]
			}
			if t.logs != nil {
				log, t.logs[i] = t.logs[i], log
			}
			d = sd
		}
		if i++; i == t.size {
			i = 0
		}
		d++
	}
}

// remove deletes slot i by shifting the following displaced entries back.
func (t *table) remove(i uint64) {
	for {
		j := i + 1
		if j == t.size {
			j = 0
		}
		jb := j * t.stride
		sid := t.slots[jb]
		if sid == 0 || t.dist(sid, j) == 0 {
			break
		}
		copy(t.slots[i*t.stride:i*t.stride+t.stride], t.slots[jb:jb+t.stride])
		if t.logs != nil {
			t.logs[i] = t.logs[j]
		}
		i = j
	}
	clear(t.slots[i*t.stride : i*t.stride+t.stride])
	if t.logs != nil {
		t.logs[i] = nil
	}
	t.n--
}

// resize rebuilds the table with the given number of slots (at least enough
// for its entries).
func (t *table) resize(size uint64) {
	size = max(size, minTableSize, uint64(t.n)+uint64(t.n)/4+1)
	old, oldLogs, oldSize := t.slots, t.logs, t.size
	t.alloc(size, oldLogs != nil)
	var log []int64
	for i := uint64(0); i < oldSize; i++ {
		b := i * t.stride
		if old[b] == 0 {
			continue
		}
		if oldLogs != nil {
			log = oldLogs[i]
		}
		t.put(old[b:b+t.stride], log)
	}
}

// sweep removes every entry whose state is full at now (W[0] <= now) and
// returns how many it removed. It shrinks a table left mostly empty.
func (t *table) sweep(now int64) int {
	removed := 0
	for i := uint64(0); i < t.size; {
		if t.slots[i*t.stride] != 0 && t.full0(i) <= now {
			// The backward shift may move an unvisited entry into i: look
			// at i again.
			t.remove(i)
			removed++
			continue
		}
		i++
	}
	if t.size > 4*minTableSize && t.n < int(t.size/4) {
		t.resize(uint64(t.n) * 2)
	}
	return removed
}

// victim picks the entry to drop when the shard is full: the first entry met
// that is already full at now (dropping it changes no decision), otherwise
// the sampled entry closest to full. It scans at most probes occupied slots,
// from a starting slot given by the caller (a hash: a fair random start),
// passing over the entries whose id is in keep (the keys of the ApplyAll
// being written). It reports whether the victim was full, and ok false when
// every entry of the table is in keep.
func (t *table) victim(start uint64, now int64, probes int, keep []uint64) (slot uint64, wasFull, ok bool) {
	i := t.home(start)
	best, bestAt := uint64(0), int64(0)
	for seen := uint64(0); probes > 0 && seen < t.size; seen++ {
		if id := t.slots[i*t.stride]; id != 0 && !slices.Contains(keep, id) {
			at := t.full0(i)
			if at <= now {
				return i, true, true
			}
			if !ok || at < bestAt {
				best, bestAt, ok = i, at, true
			}
			probes--
		}
		if i++; i == t.size {
			i = 0
		}
	}
	return best, false, ok
}

// reset drops every entry and the table's memory.
func (t *table) reset() { *t = table{} }
