package memstore

import (
	"math/bits"
	"slices"
	"sync/atomic"

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
//
// A table of one-word states without logs is also read without the shard's
// lock (lookupWord, the token bucket's denials in Store.Apply): its slot
// array is published in view, every write to a slot of it is an atomic
// store, and seq counts its writes: odd while a structural change (an
// insertion, a removal, a resize, a sweep, a reset, and every write of an
// ApplyAll's group, see commitGroup) is under way, moved on
// by one before and one after it, and by two after every state written in
// place. A reader that sees the same even seq before and after its probe
// read one consistent state of a key that stayed in its slot; one that
// sees the same seq again under the lock knows nothing was written since.
type table struct {
	slots  []uint64
	logs   [][]int64 // nil unless the table keeps logs
	size   uint64    // number of slots
	stride uint64    // 2 + words
	words  int
	n      int  // live entries
	limit  int  // n at which the table grows
	shared bool // read without the lock: one word, no log

	seq  atomic.Uint64
	open int // begin calls not yet ended (see begin)
	view atomic.Pointer[view]
}

// view is a table's slot array as lock-free readers see it: immutable once
// published (a resize publishes a new one), so that the slice and its size
// always agree.
type view struct {
	slots        []uint64
	size, stride uint64
}

const minTableSize = 8

// init prepares an empty table for states of the given width.
func (t *table) init(words int, withLog bool) {
	t.words = words
	t.stride = uint64(2 + words)
	t.shared = words == 1 && !withLog
	t.alloc(minTableSize, withLog)
	t.publish()
}

// publish makes the slot array what lock-free readers see.
func (t *table) publish() {
	if t.shared {
		t.view.Store(&view{slots: t.slots, size: t.size, stride: t.stride})
	}
}

// begin and end bracket a structural change of a shared table: seq is odd
// in between. They nest (open counts the brackets, under the shard's
// lock): an ApplyAll holds the tables of its shards odd around all its
// writes, which insert, remove and resize bracket again, and seq must stay
// odd until the outermost end.
func (t *table) begin() {
	if t.shared {
		if t.open == 0 {
			t.seq.Add(1)
		}
		t.open++
	}
}

func (t *table) end() {
	if t.shared {
		if t.open--; t.open == 0 {
			t.seq.Add(1)
		}
	}
}

// set writes slot word k: atomically in a shared table, where a lock-free
// reader may load it at the same time.
func (t *table) set(k, v uint64) {
	if t.shared {
		atomic.StoreUint64(&t.slots[k], v)
		return
	}
	t.slots[k] = v
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

func (t *table) home(id uint64) uint64 { return homeOf(id, t.size) }

func homeOf(id, size uint64) uint64 {
	hi, _ := bits.Mul64(id, size)
	return hi
}

// dist is how far slot i is from id's home slot.
func (t *table) dist(id, i uint64) uint64 { return distOf(id, i, t.size) }

func distOf(id, i, size uint64) uint64 {
	h := homeOf(id, size)
	if i >= h {
		return i - h
	}
	return i + size - h
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

// lookupWord finds (id, chk) in a shared table without the shard's lock
// and returns its slot, its state word and the seq at which both were
// read. It reports false when it cannot tell: the key is not there, the
// table has no slots yet, or a structural change was under way or made
// during the probe (the caller then takes the lock). Every load is atomic;
// the probe is bounded by the view's size, so a view changing under it
// can neither loop nor index out of it.
func (t *table) lookupWord(id, chk uint64) (i uint64, w0 int64, seq uint64, ok bool) {
	seq = t.seq.Load()
	v := t.view.Load()
	if seq&1 != 0 || v == nil {
		return 0, 0, 0, false
	}
	slots, size, stride := v.slots, v.size, v.stride
	i = homeOf(id, size)
	for d := uint64(0); d < size; d++ {
		b := i * stride
		sid := atomic.LoadUint64(&slots[b])
		if sid == 0 {
			return 0, 0, 0, false
		}
		if sid == id && atomic.LoadUint64(&slots[b+1]) == chk {
			w0 = int64(atomic.LoadUint64(&slots[b+2]))
			if t.seq.Load() != seq {
				return 0, 0, 0, false
			}
			return i, w0, seq, true
		}
		if distOf(sid, i, size) < d {
			return 0, 0, 0, false
		}
		if i++; i == size {
			i = 0
		}
	}
	return 0, 0, 0, false
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
	if t.shared {
		t.setWord0(i, s.W[0])
		return
	}
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
func (t *table) setWord0(i int, w int64) {
	k := uint64(i)*t.stride + 2
	if t.shared {
		atomic.StoreUint64(&t.slots[k], uint64(w))
		if t.open == 0 { // else the structural change's end moves seq
			t.seq.Add(2)
		}
		return
	}
	t.slots[k] = uint64(w)
}

// full0 returns slot i's first word: the time at which its state is full.
func (t *table) full0(i uint64) int64 { return int64(t.slots[i*t.stride+2]) }

// insert adds (id, chk) with state s; the key must not be present. It grows
// the table first when needed.
func (t *table) insert(id, chk uint64, s *algo.State) {
	t.begin()
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
	t.end()
}

// put places an entry by Robin Hood insertion.
func (t *table) put(carry []uint64, log []int64) {
	i := t.home(carry[0])
	d := uint64(0)
	for {
		b := i * t.stride
		slot := t.slots[b : b+t.stride]
		if slot[0] == 0 {
			for k := range carry {
				t.set(b+uint64(k), carry[k])
			}
			if t.logs != nil {
				t.logs[i] = log
			}
			return
		}
		if sd := t.dist(slot[0], i); sd < d {
			for k := range slot {
				old := slot[k]
				t.set(b+uint64(k), carry[k])
				carry[k] = old
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
	t.begin()
	t.removeSlot(i)
	t.end()
}

// removeSlot is remove within a structural change already begun.
func (t *table) removeSlot(i uint64) {
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
		for k := range t.stride {
			t.set(i*t.stride+k, t.slots[jb+k])
		}
		if t.logs != nil {
			t.logs[i] = t.logs[j]
		}
		i = j
	}
	for k := range t.stride {
		t.set(i*t.stride+k, 0)
	}
	if t.logs != nil {
		t.logs[i] = nil
	}
	t.n--
}

// resize rebuilds the table with the given number of slots (at least enough
// for its entries), within a structural change already begun.
func (t *table) resize(size uint64) {
	size = max(size, minTableSize, uint64(t.n)+uint64(t.n)/4+1)
	old, oldLogs, oldSize := t.slots, t.logs, t.size
	t.alloc(size, oldLogs != nil)
	var log []int64
	var carry [2 + algo.MaxWords]uint64 // put swaps through it: not in old, which readers may see
	for i := uint64(0); i < oldSize; i++ {
		b := i * t.stride
		if old[b] == 0 {
			continue
		}
		if oldLogs != nil {
			log = oldLogs[i]
		}
		copy(carry[:t.stride], old[b:b+t.stride])
		t.put(carry[:t.stride], log)
	}
	t.publish()
}

// sweep removes every entry whose state is full at now (W[0] <= now) and
// returns how many it removed. It shrinks a table left mostly empty.
func (t *table) sweep(now int64) int {
	t.begin()
	defer t.end()
	removed := 0
	for i := uint64(0); i < t.size; {
		if t.slots[i*t.stride] != 0 && t.full0(i) <= now {
			// The backward shift may move an unvisited entry into i: look
			// at i again.
			t.removeSlot(i)
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
func (t *table) reset() {
	t.begin()
	t.view.Store(nil)
	t.slots, t.logs, t.size, t.n, t.limit = nil, nil, 0, 0, 0
	t.end()
}
