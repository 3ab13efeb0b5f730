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
)

// slot is one sampled key's window: the window number (absolute, modulo
// 2^32, compared with wrap-around), meta the sub-window of cur (bits 0-7)
// and the sampling level the window was recorded at (bits 8-15), the units
// of the window, of the current sub-window, and of its largest sub-window.
type slot struct {
	win, meta, cnt, cur, peak uint32
}

func (s *slot) level() uint32 { return s.meta >> 8 }

// tbucket is a set of the key table, with its lock. fp holds the top 32
// bits of each slot's key hash (0: empty), apart so that a look-up scans
// two cache lines.
type tbucket struct {
	lock atomic.Uint32
	full uint32 // window number + 1 when no slot is free for that window
	// hits counts the sampled decisions since the last window change, drops
	// those of them that found no slot, starts the key-windows begun.
	hits, drops, starts uint32
	fp                  [ways]uint32
	slots               [ways]slot
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
	_         [40]byte
}

// topEntry is one of the heaviest keys (Space-Saving: a newcomer replaces
// the lightest entry and starts from its count-min estimate, which
// over-counts by at most over).
type topEntry struct {
	win     atomic.Uint64 // window number of cnt
	cnt     atomic.Uint64 // units in window win
	peak    atomic.Uint64 // largest units in one window before win
	total   atomic.Uint64 // units since the entry was taken
	denied  atomic.Uint64 // decisions the current limit refused
	windows atomic.Uint64 // windows before win with demand
	entry   atomic.Uint64 // the window it entered in
	over    atomic.Uint64 // what its count in that window may over-state
	// under Demand.mu
	since  int64
	labelN uint8
	label  [labelLen]byte
}

func (e *topEntry) score() uint64 { return max(e.peak.Load(), e.cnt.Load()) }

func (e *topEntry) observe(w uint64, n uint64, denied bool) {
	if ew := e.win.Load(); w > ew && e.win.CompareAndSwap(ew, w) {
		c := e.cnt.Swap(0)
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
	e.total.Add(n)
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
	keys    distinct

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
		demand: newSketch(), burst: newSketch(),
		top: make([]topEntry, r.cfg.TopK), ids: make([]atomic.Uint64, r.cfg.TopK),
	}
	d.firstWin = uint64(max(now, 0) / d.window)
	d.curWin.Store(d.firstWin)
	d.limit.Store(limit)
	return d
}

// Name returns the policy's name.
func (d *Demand) Name() string { return d.name }

// Window returns the length of the windows demand is measured in: the
// policy's own (a rate's period, a window's length).
func (d *Demand) Window() time.Duration { return time.Duration(d.window) }

// Observe records one decision of the policy: key asked for n units
// (n <= 0 records nothing), and refused tells whether the policy's current
// limit refused them (denied, or would have in dry run). It is timed by the
// Recorder's clock, allocates nothing and never blocks for long.
func (d *Demand) Observe(key string, n int64, refused bool) {
	d.ObserveAt(d.rec.nanos(), key, n, refused)
}

// ObserveAt is Observe at time now (Unix nanoseconds), for callers that
// have the time at hand and for tests.
func (d *Demand) ObserveAt(now int64, key string, n int64, refused bool) {
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
	st.decisions.Add(1)
	if un > 1 {
		st.extra.Add(un - 1)
	}
	if refused {
		st.denied.Add(1)
	}
	m := mix(h)
	d.keys.add(m)
	d.heavy(h|1, m, w, un, refused, key, now)
	if lvl := d.level.Load(); lvl == 0 || mix(h^(w*0x9e3779b97f4a7c15))>>(64-lvl) == 0 {
		d.sample(h, now, w, un, lvl)
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
	var s, dr, st uint64
	for i := range d.table {
		b := &d.table[i]
		b.acquire()
		s, dr, st = s+uint64(b.hits), dr+uint64(b.drops), st+uint64(b.starts)
		b.hits, b.drops, b.starts = 0, 0, 0
		b.release()
	}
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

// heavy keeps the top-K: a key in it is counted there; another is counted
// in the count-min rows and enters when its estimate for the window beats
// the lightest entry.
func (d *Demand) heavy(id, m, w, n uint64, refused bool, key string, now int64) {
	if d.idMask[id>>62].Load()&(1<<((id>>56)&63)) != 0 {
		for i := range d.ids {
			if d.ids[i].Load() == id {
				d.top[i].observe(w, n, refused)
				return
			}
		}
	}
	// Conservative update: the estimate is the smaller counter plus n, and
	// no counter is raised above it.
	a, b := &d.cm[0][m&(cmWidth-1)], &d.cm[1][(m>>10)&(cmWidth-1)]
	ca, cb := a.Load(), b.Load()
	est := satAdd(min(ca, cb), uint32(min(n, 1<<32-1)))
	raise(a, ca, est)
	raise(b, cb, est)
	if est := uint64(est); est > d.thr.Load() {
		d.admit(id, w, est, n, refused, key, now)
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
	e.total.Store(est)
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
// number), so that over many windows every key is measured.
func (d *Demand) sample(h uint64, now int64, w uint64, n uint64, lvl uint32) {
	fp := uint32(h >> 32)
	if fp == 0 {
		fp = 1
	}
	w32 := uint32(w)
	sub := uint32((max(now, 0) - int64(w)*d.window) / d.subLen)
	n32 := uint32(min(n, 1<<32-1))
	b := &d.table[h&d.mask]
	b.acquire()
	b.hits++
	for i, f := range &b.fp {
		if f != fp {
			continue
		}
		s := &b.slots[i]
		if older(s.win, w32) {
			d.emit(s)
			*s = slot{win: w32, meta: sub | lvl<<8}
			b.starts++
		}
		if cur := s.meta & 0xff; sub > cur && !older(w32, s.win) {
			s.meta, s.cur = sub|s.meta&^0xff, 0
		}
		s.cnt = satAdd(s.cnt, n32)
		s.cur = satAdd(s.cur, n32)
		s.peak = max(s.peak, s.cur)
		b.release()
		return
	}
	free := -1
	if b.full == w32+1 {
		b.drops++
		b.release()
		return
	}
	for i, f := range &b.fp {
		if f == 0 {
			free = i
			break
		}
	}
	if free < 0 {
		for i := range b.slots {
			if older(b.slots[i].win, w32) {
				free = i
				break
			}
		}
	}
	if free < 0 {
		b.full = w32 + 1
		b.drops++
		b.release()
		return
	}
	s := &b.slots[free]
	if b.fp[free] != 0 {
		d.emit(s)
	}
	b.fp[free] = fp
	b.starts++
	*s = slot{win: w32, meta: sub | lvl<<8, cnt: n32, cur: n32, peak: n32}
	b.release()
}

// older reports whether window number a is before b (modulo 2^32).
func older(a, b uint32) bool { return int32(b-a) > 0 }

func satAdd(a, b uint32) uint32 {
	if c := a + b; c >= a {
		return c
	}
	return 1<<32 - 1
}

// emit adds a slot's finished window to the sketches, weighted by the
// inverse of the probability that its key was sampled.
func (d *Demand) emit(s *slot) {
	if s.cnt == 0 || d.spoiled[s.win%spoilRing].Load() == s.win+1 {
		return
	}
	wt := uint64(1) << s.level()
	d.demand.add(uint64(s.cnt), wt)
	d.burst.add(uint64(s.peak), wt)
}

// flush emits every finished window still in the table and frees its slot,
// so that a report counts every key-window that ended before now.
func (d *Demand) flush(now int64) {
	w32 := uint32(uint64(max(now, 0) / d.window))
	for i := range d.table {
		b := &d.table[i]
		b.acquire()
		for j := range b.slots {
			if s := &b.slots[j]; b.fp[j] != 0 && older(s.win, w32) {
				d.emit(s)
				*s, b.fp[j] = slot{}, 0
			}
		}
		b.release()
	}
}

// MaxPolicyBytes bounds the memory of one policy's recording with the
// default Config (4,096 slots, top 16): 160 KiB, whatever the number of
// keys (128 KiB by construction, about 134 KiB once the allocator has
// rounded the blocks up). [Demand.Bytes] gives the figure for any Config.
const MaxPolicyBytes = 160 << 10

// Bytes returns the memory the policy's recording holds, by construction:
// it is allocated when the Demand is made and never grows.
func (d *Demand) Bytes() int {
	return int(unsafe.Sizeof(*d)) +
		len(d.table)*int(unsafe.Sizeof(tbucket{})) +
		2*(int(unsafe.Sizeof(sketch{}))+sketchBins*8) +
		len(d.top)*int(unsafe.Sizeof(topEntry{})+8) +
		len(d.name)
}
