package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/bind"
	"github.com/floodgate-go/floodgate/internal/coarse"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// Store is the in-memory [store.Store]. Create it with [New]; it is safe for
// concurrent use. Close it when done: that stops the background sweeper at
// once and frees the keys. (A Store dropped without Close does not leak the
// sweeper: the goroutine starts with the first key kept and stops once the
// garbage collector finds the Store unreachable.)
//
// Each Apply hashes (key, namespace) to a shard, locks the shard, reads the
// clock once, runs the algorithm's step on the key's state and writes the new
// state back before unlocking: concurrent Apply calls on one key are
// serialised. The token bucket's decisions on a key the store holds are
// made without the lock when they change nothing (a denial, a peek), and
// their writes take it only to check that nothing was written meanwhile
// (see the package documentation, Speed): the same decisions, in the same
// order of states.
//
// A key whose new state is back to full (State.W[0] <= now) is not kept: it is
// indistinguishable from a fresh key. When a shard is at its share of
// MaxKeys, inserting a new key first drops an entry that is already full (no
// decision changes); when none is found among a few sampled entries, the
// sampled entry closest to full is evicted and counted in
// [Stats].Evictions: that key starts again from full capacity, which errs on
// the side of admitting.
type Store struct {
	shards []paddedShard
	mask   uint64
	seedA  maphash.Seed // the table id
	seedB  maphash.Seed // the independent check hash
	clock  floodgate.Clock
	coarse *coarse.Clock // WithCoarseClock, else nil
	// slack is added to the RetryAfter of every denial: the coarse clock's
	// resolution (0 without it), so that a caller that waits RetryAfter is
	// not denied again because the cached time lagged more at its retry.
	slack time.Duration
	// minGrain is the least grain (algo.Grain, µs) of an algorithm that
	// reads coarse: coarseGrains resolutions.
	minGrain int64

	closed    atomic.Bool
	closeOnce sync.Once
	sw        *sweeper // never nil
	cleanup   runtime.Cleanup
	clockDone runtime.Cleanup // releases coarse when the Store is dropped
}

type shard struct {
	mu      sync.Mutex
	dec     floodgate.Decision // StepWord and StepState write their decision here, under mu
	keys    int                // live entries across tables
	limit   int                // this shard's share of MaxKeys
	evicted uint64
	expired uint64
	held    bool // an ApplyAll holds tables[0] in a structural change (commitGroup)
	// tables[w-1] holds states of w words, tables[MaxWords+w-1] states of w
	// words with a log.
	tables [2 * algo.MaxWords]table
	// st is the state StepState steps in place, under mu (Log nil between
	// calls). Last: the one-word path's fields keep their cache lines.
	st algo.State
	sw *sweeper // armed by every insert (read then, and only then)
}

// paddedShard keeps two shards off the same pair of cache lines.
type paddedShard struct {
	shard
	_ [(128 - unsafe.Sizeof(shard{})%128) % 128]byte
}

// evictProbes is how many occupied slots eviction samples.
const evictProbes = 16

// New returns a store configured by opts. It returns an error wrapping
// [floodgate.ErrInvalidConfig] when an option is invalid. Unless
// WithSweepInterval(0) is given, the first key the store keeps starts a
// background sweeper, which [Store.Close] stops (and so does the garbage
// collector, once the Store is unreachable).
func New(opts ...Option) (*Store, error) {
	c := defaultConfig()
	if err := c.apply(opts); err != nil {
		return nil, err
	}
	s := &Store{
		shards: make([]paddedShard, c.shards),
		mask:   uint64(c.shards - 1),
		seedA:  maphash.MakeSeed(),
		seedB:  maphash.MakeSeed(),
		clock:  c.clock,
	}
	if c.coarse > 0 {
		s.coarse, s.slack = coarse.Acquire(c.coarse), c.coarse
		s.minGrain = coarseGrains * c.coarse.Microseconds()
		s.clockDone = runtime.AddCleanup(s, (*coarse.Clock).Release, s.coarse)
	}
	s.sw = newSweeper(s.shards, timeSource{s.clock, s.coarse}, c.sweep)
	per, extra := c.maxKeys/c.shards, c.maxKeys%c.shards
	for i := range s.shards {
		s.shards[i].limit = per
		if i < extra {
			s.shards[i].limit++
		}
		s.shards[i].sw = s.sw
	}
	if c.sweep > 0 {
		// The sweeper holds the shards, not the Store: once the Store is
		// unreachable, this stops it.
		s.cleanup = runtime.AddCleanup(s, func(w *sweeper) { w.halt() }, s.sw)
	}
	return s, nil
}

// now reads the store's exact clock in Unix microseconds: ApplyAll's time
// (a group may hold algorithms of any rate; WithCoarseClock is not for it).
func (s *Store) now() int64 { return timeSource{clock: s.clock}.micros() }

// nowFor reads the time of a decision of an algorithm of the given grain
// (algo.Grain), in Unix microseconds, and returns with it the slack that its
// denials add to RetryAfter: the coarse clock (WithCoarseClock) for an
// algorithm whose grain is at least minGrain, else the exact clock.
func (s *Store) nowFor(grain int64) (int64, time.Duration) {
	if s.coarse != nil && grain >= s.minGrain {
		return s.coarse.Micros(), s.slack
	}
	if s.clock != nil {
		return s.clock.Now().UnixMicro(), 0
	}
	return monotime.Nanotime() / 1000, 0
}

// coarseGrains is how many of its resolutions the grain of an algorithm
// must span for WithCoarseClock to apply to it: the clock's lag is then at
// most a tenth of the time one unit of cost takes (while the process gets
// a processor every resolution).
const coarseGrains = 10

// timeSource is where a store reads time: the coarse clock when set, else
// clock, else monotime.Nanotime.
type timeSource struct {
	clock  floodgate.Clock
	coarse *coarse.Clock
}

// micros reads the time in Unix microseconds.
func (ts timeSource) micros() int64 {
	if ts.coarse != nil {
		return ts.coarse.Micros()
	}
	if ts.clock != nil {
		return ts.clock.Now().UnixMicro()
	}
	return monotime.Nanotime() / 1000
}

// ids returns the table id and the check hash of (key, ns), and the index
// of the key's shard. They come from two maphash values of the key under
// independent random seeds, each uniform over 64 bits: the first, of the
// key alone, is the id (which picks the home slot) and picks the shard; the
// second, combined with the namespace without a further mix (a finaliser
// cost a few ns a call and spread nothing that is not already uniform), is
// the check hash. So every namespace of a key lives in one shard and one
// cluster of slots (a read-through to another version's namespace, see
// algo.Lineage, takes no other lock and stays in cache), and for one key,
// two namespaces always get different check hashes (x ^ ns*k is a
// bijection for odd k), which the table tells apart.
func (s *Store) ids(key string, ns uint64) (id, chk, shard uint64) {
	return idsOf(maphash.String(s.seedA, key), maphash.String(s.seedB, key), ns, s.mask)
}

// idsOf is ids from the key's two hashes.
func idsOf(a, b, ns, mask uint64) (id, chk, shard uint64) {
	id = a
	if id == 0 {
		id = 1 // 0 marks an empty slot
	}
	return id, b ^ ns*0x9e3779b97f4a7c15, a & mask
}

// Apply implements [store.Store]. It returns [floodgate.ErrClosed] after
// Close, the context's error when ctx is already done (the step itself never
// blocks, so a context is checked only on entry), and an error wrapping
// [floodgate.ErrInvalidConfig] for an algorithm whose Spec a store cannot
// keep.
//
// An algorithm that implements [algo.Layout] is not asked for its Spec on
// each call, and a one-word algorithm that implements [algo.WordStepper] is
// stepped through StepWord; any other algorithm that implements
// [algo.StateStepper] is stepped through StepState.
func (s *Store) Apply(ctx context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	if err := ctx.Err(); err != nil {
		return floodgate.Decision{}, err
	}
	var (
		ns            uint64
		words, maxLog int
		grain         int64
	)
	if l, ok := alg.(algo.Layout); ok {
		ns, words, maxLog, grain = l.Layout()
	} else {
		if alg == nil {
			return floodgate.Decision{}, fmt.Errorf("%w: memstore: nil algorithm", floodgate.ErrInvalidConfig)
		}
		sp := alg.Spec()
		ns, words, maxLog, grain = sp.Namespace, sp.Words, sp.MaxLog, algo.Grain(sp)
	}
	if words < 1 || words > algo.MaxWords || maxLog < 0 {
		return floodgate.Decision{}, fmt.Errorf("%w: memstore: algorithm %q needs %d words and a log of %d, want 1..%d words and a log >= 0",
			floodgate.ErrInvalidConfig, alg.Spec().Name, words, maxLog, algo.MaxWords)
	}
	id, chk, si := s.ids(key, ns)
	sh := &s.shards[si].shard
	var ws algo.WordStepper
	if words == 1 && maxLog == 0 {
		ws, _ = alg.(algo.WordStepper)
	}
	ti := words - 1
	if maxLog > 0 {
		ti += algo.MaxWords
	}
	if dw, ok := ws.(wordDecider); ok {
		if limit, rem, ra, rs, done := s.applyShared(sh, id, chk, dw, grain, n); done {
			return floodgate.Decision{Allowed: ra == 0, Limit: limit, Remaining: rem, RetryAfter: ra, ResetAfter: rs}, nil
		}
	}
	return s.applyLocked(sh, ti, id, chk, alg, ws, grain, n, key)
}

// applyLocked is Apply under the shard's lock, from the key's ids on.
func (s *Store) applyLocked(sh *shard, ti int, id, chk uint64, alg algo.Algorithm, ws algo.WordStepper, grain, n int64, key string) (floodgate.Decision, error) {
	sh.mu.Lock()
	// Deferred (open-coded, a few ns): the shard stays usable even if a
	// faulty algorithm panics in Step.
	defer sh.mu.Unlock()
	// Checked under the shard's lock: Close marks the store closed before
	// it empties each shard under the same lock, so an Apply that gets the
	// lock after Close emptied this shard sees the mark and inserts
	// nothing, and one that got it before is emptied by Close.
	if s.closed.Load() {
		return floodgate.Decision{}, floodgate.ErrClosed
	}
	now, slack := s.nowFor(grain)
	t := &sh.tables[ti]
	i := t.find(id, chk)
	if ws != nil {
		// One word: from the slot to the step and back in registers. (This
		// is not a function of its own: each call boundary copies the
		// Decision through memory.)
		var w0 int64
		if i >= 0 {
			w0 = t.full0(uint64(i))
		} else {
			w0 = s.readThroughWord(sh, key, alg, now)
		}
		// The decision is written in place (see algo.WordStepper) into
		// the shard, which the lock owns; it is read back field by field,
		// which the processor forwards from its stores without a stall.
		sh.dec = floodgate.Decision{}
		next := ws.StepWord(w0, now, n, &sh.dec)
		switch {
		case next <= now:
			if i >= 0 {
				t.remove(uint64(i))
				sh.keys--
			}
		case i >= 0:
			t.setWord0(i, next)
		default:
			st := algo.State{W: [algo.MaxWords]int64{next}}
			sh.insert(t, ti, id, chk, &st, now, nil)
		}
		d := &sh.dec
		ra := d.RetryAfter
		if ra > 0 {
			ra += slack
		}
		return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
			RetryAfter: ra, ResetAfter: d.ResetAfter, Delay: d.Delay}, nil
	}
	sh.step(t, ti, i, id, chk, alg, now, n, s, key)
	d := &sh.dec
	ra := d.RetryAfter
	if ra > 0 {
		ra += slack
	}
	return floodgate.Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: ra, ResetAfter: d.ResetAfter, Delay: d.Delay}, nil
}

func init() { bind.Register(bindTake) }

// bindTake is memstore's bind.Binder: for a token bucket (one word, no
// log, [algo.Layout], [algo.WordStepper] and wordDecider) on a *Store, the
// decision path of Apply with the algorithm's layout and interfaces looked
// up once, and the decision's fields returned in registers.
func bindTake(st any, alg algo.Algorithm) bind.Func {
	s, ok := st.(*Store)
	if !ok || s == nil {
		return nil
	}
	l, ok := alg.(algo.Layout)
	if !ok {
		return nil
	}
	ns, words, maxLog, grain := l.Layout()
	ws, ok := alg.(algo.WordStepper)
	dw, ok2 := alg.(wordDecider)
	if !ok || !ok2 || words != 1 || maxLog != 0 {
		return nil
	}
	return func(ctx context.Context, key string, n int64) (bool, int64, int64, time.Duration, time.Duration, time.Duration, error) {
		if err := ctx.Err(); err != nil {
			return false, 0, 0, 0, 0, 0, err
		}
		id, chk, si := s.ids(key, ns)
		sh := &s.shards[si].shard
		if limit, rem, ra, rs, done := s.applyShared(sh, id, chk, dw, grain, n); done {
			return ra == 0, limit, rem, ra, rs, 0, nil
		}
		d, err := s.applyLocked(sh, 0, id, chk, alg, ws, grain, n, key)
		return d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, err
	}
}

// wordDecider is implemented by the one-word algorithms that applyShared
// steps (the token bucket of package bucket): the step of
// [algo.WordStepper] with the decision's fields returned one by one, in
// registers; Allowed is retryAfter == 0 and Delay is 0 (an algorithm that
// delays does not implement it). applyShared holds no lock, so it has no
// memory of the shard's to lend StepWord for the decision; a local one
// would escape through the interface call, and a Decision returned by
// value goes through memory at each call boundary. DecideWord must agree
// with StepWord exactly (TestWordFastPathMatchesStep compares the store's
// decisions with Step's; TestTokenBucketTakesTheSharedPath checks that the
// token bucket implements it).
type wordDecider interface {
	DecideWord(w0, now, n int64) (next, limit, remaining int64, retryAfter, resetAfter time.Duration)
}

// applyShared decides a one-word algorithm's step on a key already in the
// shard's one-word table, the way the locked path would, without taking
// the shard's lock when the step leaves the state as it was (a denial, a
// peek): the key's word is read by lookupWord (atomic loads, checked
// against the table's seq), then the clock, then dw steps. A step that
// changes the state takes the lock and writes the new word only if nothing
// was written to the table since the word was read (seq the same): the
// state's last writer read the clock before this call read the word, so
// time never goes backwards from one state to the next, as under the lock
// (the compare-and-swap rule). It reports false, having changed nothing,
// when the key is not there, the read could not be made consistent, the
// store is closed, or the table changed before the write: the caller then
// takes the locked path, which reads the clock again.
func (s *Store) applyShared(sh *shard, id, chk uint64, dw wordDecider, grain, n int64) (limit, rem int64, retryAfter, resetAfter time.Duration, ok bool) {
	t := &sh.tables[0]
	i, w0, seq, found := t.lookupWord(id, chk)
	if !found || s.closed.Load() {
		return 0, 0, 0, 0, false
	}
	var now int64
	var slack time.Duration
	if s.clock == nil && s.coarse == nil {
		now = monotime.Nanotime() / 1000 // nowFor's default, inlined
	} else {
		now, slack = s.nowFor(grain)
	}
	next, limit, rem, retryAfter, resetAfter := dw.DecideWord(w0, now, n)
	if retryAfter > 0 {
		retryAfter += slack
	}
	if next == w0 {
		return limit, rem, retryAfter, resetAfter, true
	}
	sh.mu.Lock()
	if t.seq.Load() != seq || s.closed.Load() {
		sh.mu.Unlock()
		return 0, 0, 0, 0, false
	}
	if next <= now {
		t.remove(i)
		sh.keys--
	} else {
		t.setWord0(int(i), next)
	}
	sh.mu.Unlock()
	return limit, rem, retryAfter, resetAfter, true
}

// step runs alg on the state of slot i of table t (tables[ti]; i < 0 for a
// key (id, chk) not there: then read through alg's other versions, else
// fresh) and keeps the new state; the decision is left in sh.dec. The state
// is loaded into, stepped in and stored from the shard's scratch: through
// StepState, nothing is copied by value through the call (see
// algo.StateStepper). (A function of its own, out of line, so that the
// one-word path in Apply stays as small as it was.)
//
//go:noinline
func (sh *shard) step(t *table, ti, i int, id, chk uint64, alg algo.Algorithm, now, n int64, s *Store, key string) {
	st := &sh.st
	t.load(i, st)
	if i < 0 {
		if p, ok := s.predecessor(sh, key, alg, now, st); ok {
			sh.removeAt(p)
		}
	}
	if ss, ok := alg.(algo.StateStepper); ok {
		ss.StepState(st, now, n, &sh.dec)
	} else {
		*st, sh.dec = alg.Step(*st, now, n)
	}
	switch {
	case st.W[0] <= now:
		// Back to full: the same as a fresh key, keep nothing.
		if i >= 0 {
			t.remove(uint64(i))
			sh.keys--
		}
	case i >= 0:
		t.store(i, st)
	default:
		sh.insert(t, ti, id, chk, st, now, nil)
	}
	st.Log = nil // the scratch keeps no key's log reachable
}

// insert adds a new key to table t (tables[ti]), evicting one first when the
// shard is at its limit; the eviction spares the entries whose id is in
// keep while there are others.
func (sh *shard) insert(t *table, ti int, id, chk uint64, st *algo.State, now int64, keep []uint64) {
	if sh.keys >= sh.limit {
		sh.evictOne(ti, id, now, keep)
	}
	if t.size == 0 {
		t.init(ti%algo.MaxWords+1, ti >= algo.MaxWords)
	}
	t.insert(id, chk, st)
	sh.keys++
	sh.sw.arm()
}

// evictOne drops one entry of the shard, preferring table ti, and entries
// whose id is not in keep: one in keep goes only when the shard holds
// nothing else.
func (sh *shard) evictOne(ti int, start uint64, now int64, keep []uint64) {
	for k := -1; k < len(sh.tables); k++ {
		v := &sh.tables[ti]
		if k >= 0 {
			if k == ti {
				continue
			}
			v = &sh.tables[k]
		}
		if v.n == 0 {
			continue
		}
		if i, full, ok := v.victim(start, now, evictProbes, keep); ok {
			sh.drop(v, i, full)
			return
		}
	}
	if keep != nil {
		sh.evictOne(ti, start, now, nil) // all kept: the bound comes first
	}
	// Otherwise the shard is empty: limit 0 cannot happen, New gives every
	// shard >= 1.
}

// drop removes slot i of table v to make room, counting it.
func (sh *shard) drop(v *table, i uint64, full bool) {
	v.remove(i)
	sh.keys--
	if full {
		sh.expired++
	} else {
		sh.evicted++
	}
}

// Sweep drops every key whose state is back to full now. The background
// sweeper calls it; it may also be called directly. It locks one shard at a
// time.
func (s *Store) Sweep() { s.sw.sweep() }

// Close stops the background sweeper, waits for it to return and frees the
// keys. Apply calls made after Close return [floodgate.ErrClosed]. Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cleanup.Stop()
		if done := s.sw.halt(); done != nil {
			<-done
		}
		if s.coarse != nil {
			s.clockDone.Stop()
			s.coarse.Release()
		}
		for i := range s.shards {
			sh := &s.shards[i].shard
			sh.mu.Lock()
			for k := range sh.tables {
				sh.tables[k].reset()
			}
			sh.keys = 0
			sh.mu.Unlock()
		}
	})
	return nil
}

// Stats is a snapshot of a store's counters.
type Stats struct {
	// Keys is the number of keys held now.
	Keys int
	// MaxKeys is the bound on Keys ([WithMaxKeys]), shared out among the
	// shards: a shard at its share evicts before the store as a whole is
	// full, so Evictions, not Keys reaching MaxKeys, is what says keys
	// restarted from full.
	MaxKeys int
	// Slots is the number of table slots allocated (Keys / Slots is the
	// load; the memory is about 8 x (2 + words) bytes a slot).
	Slots int
	// Evictions counts keys dropped, to respect MaxKeys, while their state
	// was not full: those keys restarted from full capacity.
	Evictions uint64
	// Expired counts keys dropped because their state was back to full (by
	// the sweeper or to make room); dropping them changed no decision.
	Expired uint64
	// Sweeps counts completed sweeps.
	Sweeps uint64
	// Shards is the number of shards.
	Shards int
}

// Stats returns the store's counters. It locks each shard in turn, so the
// snapshot is not atomic across shards.
func (s *Store) Stats() Stats {
	st := Stats{Shards: len(s.shards), Sweeps: s.sw.sweeps.Load()}
	for i := range s.shards {
		sh := &s.shards[i].shard
		sh.mu.Lock()
		st.Keys += sh.keys
		st.MaxKeys += sh.limit
		st.Evictions += sh.evicted
		st.Expired += sh.expired
		for k := range sh.tables {
			st.Slots += int(sh.tables[k].size)
		}
		sh.mu.Unlock()
	}
	return st
}

var _ store.Store = (*Store)(nil)
