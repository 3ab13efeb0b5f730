package shadow

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Sizes of a policy's recording. See the package documentation, "Memory".
const (
	ways       = 32 // slots per bucket of the key table
	subWindows = 8  // a burst is measured over an eighth of the window
	cmWidth    = 1024
	labelLen   = 48 // bytes of a top-K key kept for display
	maxLevel   = 24 // the sample never falls below 2^-24 of the keys
	stripes    = 8
	spoilRing  = 64
	// Once the top-K is full, a decision of n units of a key outside it is
	// counted in the count-min with probability n/2^cmSampleBits (see
	// Demand.heavy).
	cmSampleBits = 3
)

// slot is one sampled key's window: the window number (absolute, modulo
// 2^32, compared with wrap-around), meta the current sub-window (bits 0-7)
// and the sampling level the window was recorded at (bits 8-15), cnt the
// units of the window (up to cntMax), ref those of them the limit refused
// (kept apart so that an admitted decision writes nothing more). A decision in the slot's window and
// sub-window adds to cnt without the bucket's lock; the rest (a new
// window, a new sub-window, a new key, a large count) is done under the
// lock, the only writer of win and meta. base is cnt when the sub-window
// began and peak the units of the largest sub-window before it, both
// under the lock.
type slot struct {
	win, meta, cnt, ref atomic.Uint32
	base, peak          uint32
}

// cntMax is the most units a slot counts in a window: the lock-free adds
// (below 2^16 each) stay far from wrapping 32 bits.
const cntMax = 1 << 31

// tbucket is a set of the key table, with its lock. fp holds the top 32
// bits of each slot's key hash (0: empty), apart so that a look-up scans
// two cache lines; it is written under the lock and read without.
type tbucket struct {
	lock atomic.Uint32
	full uint32 // window number + 1 when no slot is free for that window
	// drops counts the sampled decisions since the last window change that
	// found no slot, starts the key-windows begun.
	drops, starts uint32
	fp            [ways]atomic.Uint32
	slots         [ways]slot
}

func (b *tbucket) acquire() {
	for i := 0; !b.lock.CompareAndSwap(0, 1); i++ {
		if i > 16 {
			runtime.Gosched()
		}
	}
}

func (b *tbucket) release() { b.lock.Store(0) }

// stripe holds counters that every decision updates, spread by key so that
// concurrent decisions rarely share a cache line.
type stripe struct {
	decisions atomic.Uint64
	extra     atomic.Uint64 // units beyond one per decision
	denied    atomic.Uint64
	refused   atomic.Uint64 // units of the denied decisions
	_         [32]byte
}

// topEntry is one of the heaviest keys (Space-Saving: a newcomer replaces
// the lightest entry and starts from its count-min estimate, which
// over-counts by at most over).
type topEntry struct {
	win     atomic.Uint64 // window number of cnt
	cnt     atomic.Uint64 // units in window win
	peak    atomic.Uint64 // largest units in one window before win (lower bound)
	hi      atomic.Uint64 // the same, upper bound: over not subtracted
	total   atomic.Uint64 // units since the entry was taken, before window win
	denied  atomic.Uint64 // decisions the current limit refused
	windows atomic.Uint64 // windows before win with demand
	entry   atomic.Uint64 // the window it entered in
	over    atomic.Uint64 // what its count in that window may over-state
	// under Demand.mu
	since  int64
	labelN uint8
	label  [labelLen]byte
}

// score is what an entry holds its place with: an upper bound of its
// heaviest window (Space-Saving). Evicting by the lower bound would let a
// newcomer's over-estimate push out a key whose demand sat in one window.
func (e *topEntry) score() uint64 { return max(e.hi.Load(), e.cnt.Load()) }

// lower is the lower bound of its heaviest window, for the report.
func (e *topEntry) lower() uint64 { return max(e.peak.Load(), e.cnt.Load()) }

func (e *topEntry) observe(w uint64, n uint64, denied bool) {
	if ew := e.win.Load(); w > ew && e.win.CompareAndSwap(ew, w) {
		c := e.cnt.Swap(0)
		e.total.Add(c)
		atomicMax(&e.hi, c)
		if ew == e.entry.Load() {
			// The window it entered in counts what the count-min said, an
			// over-estimate: its peak keeps the lower bound.
			c -= min(c, e.over.Load())
		}
		if c > 0 {
			atomicMax(&e.peak, c)
			e.windows.Add(1)
		}
	}
	e.cnt.Add(n)
	if denied {
		e.denied.Add(1)
	}
}

// raise makes *c at least v, c having been read as old.
func raise(c *atomic.Uint32, old, v uint32) {
	for old < v && !c.CompareAndSwap(old, v) {
		old = c.Load()
	}
}

func atomicMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Demand is the recording of one policy: per key, the units asked in each
// window of the policy's length and the largest burst; across keys, the
// distribution of those (a quantile sketch), the heaviest keys, and the
// number of keys. A Recorder makes one per policy name; it is safe for
// concurrent use, and its memory is fixed when it is made.
type Demand struct {
	name     string
	rec      *Recorder
	window   int64 // ns
	subLen   int64 // ns
	limit    atomic.Int64
	start    int64 // ns: first observation
	firstWin uint64
	seed     maphash.Seed

	level  atomic.Uint32
	curWin atomic.Uint64
	// seen is the number of decisions when the current window began (see
	// advance).
	seen atomic.Uint64
	// spoiled holds (window number + 1) of recent windows whose samples are
	// not counted; spoiledN counts them all.
	spoiled  [spoilRing]atomic.Uint32
	spoiledN atomic.Uint64
	table    []tbucket
	mask     uint64

	_       [64]byte // the stripes share no cache line with the fields above
	stripes [stripes]stripe
	cm      [2][cmWidth]atomic.Uint32
	demand  *sketch // units per key-window
	burst   *sketch // largest units of a key in one sub-window, per key-window
	// admitted: units per key-window that the limit did not refuse, over
	// the key-windows with any.
	admitted *sketch
	keys     distinct

	mu  sync.Mutex      // top-K replacement
	ids []atomic.Uint64 // the keys of top: hash | 1, 0 when empty
	// idMask has bit id>>56 set for every id in ids: a key whose bit is
	// clear is not in the top-K, without a scan.
	idMask [4]atomic.Uint64
	top    []topEntry
	thr    atomic.Uint64 // a key enters the top-K above this estimate
}

func newDemand(r *Recorder, name string, window time.Duration, limit int64, now int64) *Demand {
	buckets := r.cfg.Slots / ways
	d := &Demand{
		name: name, rec: r, window: int64(window), subLen: max(int64(window)/subWindows, 1),
		start: now, seed: r.seed,
		table: make([]tbucket, buckets), mask: uint64(buckets - 1),
		demand: newSketch(), burst: newSketch(), admitted: newSketch(),
		top: make([]topEntry, r.cfg.TopK), ids: make([]atomic.Uint64, r.cfg.TopK),
	}
	d.firstWin = uint64(max(now, 0) / d.window)
	d.curWin.Store(d.firstWin)
	d.limit.Store(limit)
	return d
}

// Observe records one decision of the policy: key asked for n units
// (n <= 0 records nothing), and refused tells whether the policy's current
// limit refused them (denied, or would have in dry run). It is timed by the
// Recorder's clock, allocates nothing and never blocks for long.
func (d *Demand) Observe(key string, n int64, refused bool) {
	d.observeAt(d.rec.nanos(), key, n, refused)
}

// observeAt is Observe at time now (Unix nanoseconds).
func (d *Demand) observeAt(now int64, key string, n int64, refused bool) {
	if n <= 0 {
		return
	}
	now = max(now, 0)
	un := uint64(n)
	h := maphash.String(d.seed, key)
	w := d.curWin.Load()
	if ws := int64(w) * d.window; now < ws || now-ws >= d.window {
		if w2 := uint64(now / d.window); w2 > w {
			d.advance(w2)
			w = w2
		} else {
			// A decision timed before the current window (a clock reading
			// taken a little earlier on another goroutine): it counts in
			// its key's latest window, as if it were timed then.
			w = w2
		}
	}
	st := &d.stripes[h&(stripes-1)]
	c := st.decisions.Add(1)
	if un > 1 {
		st.extra.Add(un - 1)
	}
	if refused {
		st.denied.Add(1)
		st.refused.Add(un)
	}
	m := mix(h)
	if d.keys.below(m) {
		d.keys.add(m)
	}
	// The heaviest keys: see heavy. The checks that reject most decisions
	// are here, without a call.
	id := h | 1
	inTop := d.idMask[id>>62].Load()&(1<<((id>>56)&63)) != 0 && d.topObserve(id, w, un, refused)
	if thr := d.thr.Load(); !inTop && (thr == 0 || mix(c^m)>>(64-cmSampleBits) < un) {
		d.heavy(id, m, w, un, thr, refused, key, now)
	}
	if lvl := d.level.Load(); lvl == 0 || mix(h^(w*0x9e3779b97f4a7c15))>>(64-lvl) == 0 {
		d.sample(h, now, w, un, lvl, refused)
	}
}

func mix(x uint64) uint64 {
	x ^= x >> 31
	x *= 0x7fb5d329728ea185
	x ^= x >> 27
	x *= 0x81dadef4bc2dd44d
	x ^= x >> 33
	return x
}

// advance moves the policy's current window to w: it adjusts the sample
// to what the table holds and clears the count-min rows.
func (d *Demand) advance(w uint64) {
	var old uint64
	for {
		old = d.curWin.Load()
		if w <= old {
			return
		}
		if d.curWin.CompareAndSwap(old, w) {
			break
		}
	}
	var dr, st uint64
	for i := range d.table {
		b := &d.table[i]
		b.acquire()
		dr, st = dr+uint64(b.drops), st+uint64(b.starts)
		b.drops, b.starts = 0, 0
		b.release()
	}
	// The sampled decisions of the window that ended: the decisions since
	// the last change times the sampling rate (exact at level 0; the
	// sampled ones are not counted apart, which would cost every one of
	// them a shared write).
	var all uint64
	for i := range d.stripes {
		all += d.stripes[i].decisions.Load()
	}
	// Those that started a key-window or found no slot were sampled.
	s := max((all-min(d.seen.Swap(all), all))>>d.level.Load(), st+dr)
	if lvl := d.level.Load(); dr == 0 && lvl > 0 && st*20 < uint64(len(d.table)*ways)*7 {
		// Twice the keys would fill under 70% of the table (where a bucket
		// of 32 overflows rarely): sample twice as many.
		d.level.Store(lvl - 1)
	}
	if dr > 0 && dr*256 > s {
		// More than 1/256 of the sampled decisions of the window that ended
		// found no slot: the keys that did are biased (those that came
		// first), so the window is not counted, and the sample is halved,
		// more than once when far too many keys are sampled.
		ended := uint32(old)
		d.spoiled[ended%spoilRing].Store(ended + 1)
		d.spoiledN.Add(1)
		lvl := d.level.Load()
		up := uint32(bits.Len64(s / max(s-dr, 1)))
		d.level.Store(min(lvl+up, maxLevel))
	}
	for r := range d.cm {
		for i := range d.cm[r] {
			d.cm[r][i].Store(0)
		}
	}
}

// topObserve counts a decision of the key of the given id in the top-K,
// if it is there.
func (d *Demand) topObserve(id, w, n uint64, refused bool) bool {
	for i := range d.ids {
		if d.ids[i].Load() == id {
			d.top[i].observe(w, n, refused)
			return true
		}
	}
	return false
}

// heavy keeps the top-K: a key in it is counted there (topObserve);
// another is counted in the count-min rows and enters when its estimate
// for the window beats the lightest entry, thr.
//
// Once the top-K is full (thr > 0), a decision of n units of a key outside
// it reaches the count-min with probability n / 2^cmSampleBits (drawn from
// a hash of the key and of its stripe's decision count, so that no pattern
// of keys escapes it), counting 2^cmSampleBits units; a decision of at
// least 2^cmSampleBits units always does, counting its own: the estimate
// stays unbiased, the other decisions write nothing, and a key that asks
// much in few decisions is not missed.
func (d *Demand) heavy(id, m, w, n, thr uint64, refused bool, key string, now int64) {
	inc := n
	if thr != 0 && n < 1<<cmSampleBits {
		inc = 1 << cmSampleBits
	}
	// Conservative update: the estimate is the smaller counter plus the
	// increment, and no counter is raised above it.
	a, b := &d.cm[0][m&(cmWidth-1)], &d.cm[1][(m>>10)&(cmWidth-1)]
	ca, cb := a.Load(), b.Load()
	est := satAdd(min(ca, cb), uint32(min(inc, 1<<32-1)))
	raise(a, ca, est)
	raise(b, cb, est)
	if est := uint64(est); est > thr {
		d.admit(id, w, max(est, n), n, refused, key, now)
	}
}

func (d *Demand) admit(id, w, est, n uint64, refused bool, key string, now int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	vi := -1
	low := ^uint64(0)
	for i := range d.top {
		e := &d.top[i]
		switch d.ids[i].Load() {
		case id:
			e.observe(w, n, refused)
			return
		case 0:
			if low != 0 {
				vi, low = i, 0
			}
		default:
			if sc := e.score(); sc < low {
				vi, low = i, sc
			}
		}
	}
	if est <= low {
		d.thr.Store(low)
		return
	}
	e := &d.top[vi]
	d.ids[vi].Store(0)
	e.win.Store(w)
	e.cnt.Store(est)
	e.peak.Store(0)
	e.hi.Store(0)
	e.total.Store(0)
	e.windows.Store(0)
	e.denied.Store(0)
	if refused {
		e.denied.Store(1)
	}
	e.over.Store(est - n)
	e.entry.Store(w)
	e.since = now
	e.labelN = 0
	if !d.rec.cfg.HideKeys {
		e.labelN = uint8(copy(e.label[:], key))
	}
	d.ids[vi].Store(id)
	var mask [4]uint64
	for i := range d.ids {
		if x := d.ids[i].Load(); x != 0 {
			mask[x>>62] |= 1 << ((x >> 56) & 63)
		}
	}
	for i := range mask {
		d.idMask[i].Store(mask[i])
	}
	thr := ^uint64(0)
	for i := range d.top {
		if d.ids[i].Load() == 0 {
			thr = 0
			break
		}
		thr = min(thr, d.top[i].score())
	}
	d.thr.Store(thr)
}

// sample counts n units of a sampled key in its slot. Which keys are
// sampled changes with every window (the hash is salted with the window
// number), so that over many windows every key is measured. A key whose
// slot is at its window and sub-window adds to it with one atomic add; the
// lock is taken for the rest.
func (d *Demand) sample(h uint64, now int64, w uint64, n uint64, lvl uint32, refused bool) {
	fp := uint32(h >> 32)
	if fp == 0 {
		fp = 1
	}
	w32 := uint32(w)
	sub := d.subWindow(max(now, 0) - int64(w)*d.window)
	b := &d.table[h&d.mask]
	// A key takes the first free slot from its own place in the bucket,
	// where a look-up starts.
	home := int(h >> 16)
	// The common case, without the lock: the key holds a slot in the
	// current sub-window (and n is small).
	for j := range ways {
		i := (home + j) & (ways - 1)
		if b.fp[i].Load() == fp {
			s := &b.slots[i]
			if n < 1<<16 && s.win.Load() == w32 && s.meta.Load()&0xff == sub {
				if s.cnt.Add(uint32(n)) >= cntMax {
					b.acquire()
					s.add(0, false) // back to the bound
					b.release()
				}
				if refused {
					s.ref.Add(uint32(n))
				}
				return
			}
			break
		}
	}
	b.acquire()
	if !d.addLocked(b, home, fp, w32, sub, lvl, n, refused) {
		d.claim(b, home, fp, w32, sub, lvl, n, refused)
	}
	b.release()
}

// addLocked adds n to the key's slot, under the bucket's lock: it ends
// the slot's window and begins w32's when the slot holds an older one, or
// moves it to sub-window sub. It reports false when the key holds no slot.
func (d *Demand) addLocked(b *tbucket, home int, fp, w32, sub, lvl uint32, n uint64, refused bool) bool {
	for j := range ways {
		i := (home + j) & (ways - 1)
		if b.fp[i].Load() != fp {
			continue
		}
		s := &b.slots[i]
		sw, meta := s.win.Load(), s.meta.Load()
		switch {
		case older(sw, w32):
			d.end(s)
			d.begin(s, w32, sub, lvl, n, refused)
			b.starts++
		case sub > meta&0xff && sw == w32:
			c := s.cnt.Load()
			s.peak = max(s.peak, c-min(c, s.base))
			s.base = c
			s.meta.Store(sub | meta&^0xff)
			s.add(n, refused)
		default:
			// An earlier sub-window, or a decision timed before the
			// key's latest window: it counts in the latest.
			s.add(n, refused)
		}
		return true
	}
	return false
}

// claim gives the key a slot of b, under the bucket's lock: a free one, or
// one whose window is older than w32 (ended first). When there is none the
// decision is dropped, and so are the bucket's next ones in window w32.
func (d *Demand) claim(b *tbucket, home int, fp, w32, sub, lvl uint32, n uint64, refused bool) {
	free := -1
	if b.full != w32+1 {
		free = b.freeSlot(home, w32)
	}
	if free < 0 {
		b.full = w32 + 1
		b.drops++
		return
	}
	s := &b.slots[free]
	if b.fp[free].Load() != 0 {
		d.end(s)
	}
	b.fp[free].Store(fp)
	b.starts++
	d.begin(s, w32, sub, lvl, n, refused)
}

// freeSlot returns the first slot from home that is free, else the first
// whose window is older than w32, else -1.
func (b *tbucket) freeSlot(home int, w32 uint32) int {
	for j := range ways {
		if i := (home + j) & (ways - 1); b.fp[i].Load() == 0 {
			return i
		}
	}
	for j := range ways {
		if i := (home + j) & (ways - 1); older(b.slots[i].win.Load(), w32) {
			return i
		}
	}
	return -1
}

// subWindow returns the sub-window of an offset 0 <= x < window into it:
// x / subLen, without a division.
func (d *Demand) subWindow(x int64) uint32 {
	s, k := d.subLen, int64(0)
	if x >= 4*s {
		k = 4
	}
	if x >= (k+2)*s {
		k += 2
	}
	if x >= (k+1)*s {
		k++
	}
	if k == subWindows-1 && x >= subWindows*s {
		// A window that is not a multiple of 8 ns: its last few ns.
		return uint32(x / s)
	}
	return uint32(k)
}

// begin starts window w32 of a slot, at sub-window sub and sampling level
// lvl, with n units (refused or not). Under the bucket's lock.
func (d *Demand) begin(s *slot, w32, sub, lvl uint32, n uint64, refused bool) {
	s.win.Store(w32)
	s.meta.Store(sub | lvl<<8)
	s.base, s.peak = 0, 0
	s.cnt.Store(uint32(min(n, cntMax)))
	s.ref.Store(0)
	if refused {
		s.ref.Store(uint32(min(n, cntMax)))
	}
}

// add counts n units (refused or not) in the slot's window, up to cntMax,
// under the bucket's lock (lock-free adds may run at the same time).
func (s *slot) add(n uint64, refused bool) {
	if refused {
		s.ref.Add(uint32(min(n, cntMax)))
	}
	for {
		c := s.cnt.Load()
		v := uint32(min(uint64(c)+n, cntMax))
		if c >= cntMax {
			v = cntMax // lock-free adds went beyond: back to the bound
		}
		if s.cnt.CompareAndSwap(c, v) {
			return
		}
	}
}

// end takes a slot's finished window out of it (its units to 0) and adds
// it to the sketches. Under the bucket's lock.
func (d *Demand) end(s *slot) {
	c := min(s.cnt.Swap(0), cntMax)
	r := min(s.ref.Swap(0), c)
	peak := max(s.peak, c-min(c, s.base))
	d.emit(s.win.Load(), s.meta.Load()>>8, uint64(c), uint64(peak), uint64(c-r))
}

// older reports whether window number a is before b (modulo 2^32).
func older(a, b uint32) bool { return int32(b-a) > 0 }

func satAdd(a, b uint32) uint32 {
	if c := a + b; c >= a {
		return c
	}
	return 1<<32 - 1
}

// emit adds a key's finished window (number w32, sampled at level lvl,
// cnt units, peak in its largest sub-window, adm of them not refused) to
// the sketches, weighted by the inverse of the probability that its key
// was sampled.
func (d *Demand) emit(w32, lvl uint32, cnt, peak, adm uint64) {
	if cnt == 0 || d.spoiled[w32%spoilRing].Load() == w32+1 {
		return
	}
	wt := uint64(1) << lvl
	d.demand.add(cnt, wt)
	d.burst.add(peak, wt)
	d.admitted.add(adm, wt)
}

// flush emits every finished window still in the table and frees its slot,
// so that a report counts every key-window that ended before now.
func (d *Demand) flush(now int64) {
	w32 := uint32(uint64(max(now, 0) / d.window))
	for i := range d.table {
		b := &d.table[i]
		b.acquire()
		for j := range b.slots {
			if s := &b.slots[j]; b.fp[j].Load() != 0 && older(s.win.Load(), w32) {
				d.end(s)
				b.fp[j].Store(0)
				s.win.Store(0)
				s.meta.Store(0)
			}
		}
		b.release()
	}
}

// bytes returns the memory the policy's recording holds, by construction:
// it is allocated when the Demand is made and never grows.
func (d *Demand) bytes() int {
	return int(unsafe.Sizeof(*d)) +
		len(d.table)*int(unsafe.Sizeof(tbucket{})) +
		3*(int(unsafe.Sizeof(sketch{}))+sketchBins*8) +
		len(d.top)*int(unsafe.Sizeof(topEntry{})+8) +
		len(d.name)
}
