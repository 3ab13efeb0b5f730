package policy

import (
	"maps"
	"sync"
	"sync/atomic"
)

// snapshot is a map for the hot path: reads take no lock (an immutable map
// behind an atomic pointer); writes go to pending, under mu, and are merged
// into a new map once the copy is paid for: pending (and the hits on it) a
// quarter of the map's size, or at once while the map is small. It is safe
// for concurrent use.
type snapshot[V any] struct {
	cur     atomic.Pointer[map[string]V]
	mu      sync.Mutex
	pending map[string]V
	hits    int // pending hits since the last merge
}

// eagerMerge is the size below which a snapshot merges every write at once
// (a copy of at most this many entries).
const eagerMerge = 1024

// newSnapshot returns a snapshot holding m (which it keeps).
func newSnapshot[V any](m map[string]V) *snapshot[V] {
	c := &snapshot[V]{pending: map[string]V{}}
	c.cur.Store(&m)
	return c
}

// load is the lock-free read.
func (c *snapshot[V]) load(key string) (V, bool) {
	v, ok := (*c.cur.Load())[key]
	return v, ok
}

// loadPending reads what load does not see yet; a hit hastens the merge.
func (c *snapshot[V]) loadPending(key string, trim func(map[string]V)) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.pending[key]
	if ok {
		c.hits++
		c.mergeIfDue(trim)
	}
	return v, ok
}

// store writes v for key; trim bounds the merged map.
func (c *snapshot[V]) store(key string, v V, trim func(map[string]V)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[key] = v
	c.mergeIfDue(trim)
}

// mergeIfDue makes the map and pending one new map, trimmed, when the copy
// is paid for. Called with mu held.
func (c *snapshot[V]) mergeIfDue(trim func(map[string]V)) {
	cur := *c.cur.Load()
	if n := len(cur); n >= eagerMerge && 4*(len(c.pending)+c.hits) < n {
		return
	}
	next := make(map[string]V, len(cur)+len(c.pending))
	maps.Copy(next, cur)
	maps.Copy(next, c.pending)
	if trim != nil {
		trim(next)
	}
	c.cur.Store(&next)
	clear(c.pending)
	c.hits = 0
}
