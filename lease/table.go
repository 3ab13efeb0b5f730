package lease

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// The word of an entry: the tokens held in the low 32 bits, the key's
// demand (requests seen, modulo 2^32) in the high 32. One atomic add or
// compare-and-swap takes tokens and counts the request at once.
const (
	tokenMask  = uint64(1)<<32 - 1
	demandUnit = uint64(1) << 32
)

// entry is one tracked key: about 210 bytes with its map slot, plus the
// key (TestMemoryPerKey).
type entry struct {
	word        atomic.Uint64
	low         atomic.Int64 // renew when the tokens left are at most low
	reset       atomic.Int64 // the global bucket's ResetAfter at the last grant, ns
	leased      atomic.Bool
	starved     atomic.Bool   // the last grant had fewer tokens than a batch
	shared      atomic.Bool   // the last grant was a share of a divided (saturated) bucket
	claimed     atomic.Bool   // this node had a share of the key's divided bucket (Close withdraws it from the board)
	falling     atomic.Bool   // decided by the divided fallback since the last grant
	flight      atomic.Bool   // mirrors fl != nil, for the fast path
	window      atomic.Uint32 // demand at the start of the sweeper's tick
	deniedUntil atomic.Int64  // the global bucket has no lease for us until then (ns)
	crumbs      atomic.Int64  // what it had then, fewer than a batch: requests up to it still ask
	failedUntil atomic.Int64  // the last renewal failed: no new attempt until then (ns)
	expires     atomic.Int64  // the tokens held expire then (ns); 0: none held
	size        atomic.Int64  // the lease size of the last renewal
	denied      atomic.Int64  // requests denied in memory (Stats.LocalDenied; on the entry, not one counter for every key)

	key string

	mu            sync.Mutex
	fl            *flight
	rate          float64 // demand per second, smoothed
	sampledAt     int64
	sampledDemand uint32
	seen          int64 // last sample that saw demand (ns)
}

// flight is one renewal in progress; done closes when it ends.
type flight struct{ done chan struct{} }

// startFlight returns the renewal in flight and false, or starts one and
// returns it and true.
func (e *entry) startFlight() (*flight, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fl != nil {
		return e.fl, false
	}
	f := &flight{done: make(chan struct{})}
	e.fl = f
	e.flight.Store(true)
	return f, true
}

func (e *entry) endFlight(f *flight) {
	e.mu.Lock()
	if e.fl == f {
		e.fl = nil
		e.flight.Store(false)
	}
	e.mu.Unlock()
	close(f.done)
}

// sample folds the demand since the last sample into the smoothed rate
// (weight: the time since, in refresh periods, at most 1). Under e.mu.
func (e *entry) sample(now, refresh int64) {
	d := uint32(e.word.Load() >> 32)
	el := now - e.sampledAt
	if el <= 0 {
		return
	}
	cnt := d - e.sampledDemand
	if cnt > 0 {
		e.seen = now
	}
	inst := float64(cnt) * 1e9 / float64(el)
	w := min(1, float64(el)/float64(refresh))
	e.rate += w * (inst - e.rate)
	e.sampledAt, e.sampledDemand = now, d
}

const shardCount = 64

type shard struct {
	mu sync.RWMutex
	m  map[string]*entry
	_  [40]byte // keep shards' locks on separate cache lines
}

// table is the limiter's tracked keys, sharded by a hash of the key.
type table struct {
	seed   maphash.Seed
	count  atomic.Int64
	shards [shardCount]shard
}

func (t *table) init() {
	t.seed = maphash.MakeSeed()
	for i := range t.shards {
		t.shards[i].m = map[string]*entry{}
	}
}

func (t *table) shard(key string) *shard {
	return &t.shards[maphash.String(t.seed, key)%shardCount]
}

func (t *table) get(key string) *entry {
	sh := t.shard(key)
	sh.mu.RLock()
	e := sh.m[key]
	sh.mu.RUnlock()
	return e
}

// add returns key's entry, adding it unless the table holds max keys
// (then nil).
func (t *table) add(key string, max int, now int64) *entry {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[key]; e != nil {
		return e
	}
	if t.count.Load() >= int64(max) {
		return nil
	}
	e := &entry{key: key, sampledAt: now, seen: now}
	sh.m[key] = e
	t.count.Add(1)
	return e
}

// each calls f on every entry; an entry for which f returns false is
// removed.
func (t *table) each(f func(*entry) bool) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		list := make([]*entry, 0, len(sh.m))
		for _, e := range sh.m {
			list = append(list, e)
		}
		sh.mu.RUnlock()
		for _, e := range list {
			if !f(e) {
				sh.mu.Lock()
				if sh.m[e.key] == e {
					delete(sh.m, e.key)
					t.count.Add(-1)
				}
				sh.mu.Unlock()
			}
		}
	}
}
