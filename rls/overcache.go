package rls

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// overCache remembers the keys refused with nothing left, until the time
// their limit would admit one unit again (the reference's local cache of
// over-limit keys, LOCAL_CACHE_SIZE_IN_BYTES): a request on such a key is
// refused without a store call charging anything, as the store would
// have refused it. A nil *overCache remembers nothing.
//
// It holds at most max entries; a full shard drops its expired entries,
// and when none has expired the new key is not remembered (the store
// decides it, as without the cache). Update clears it: a reload may raise
// a limit.
type overCache struct {
	seed   maphash.Seed
	max    int // per shard
	shards [16]overShard
}

type overShard struct {
	mu sync.Mutex
	m  map[overKey]overEntry
}

type overKey struct{ policy, key string }

// overEntry is a refusal remembered: the decision and, as monotonic
// instants, when the limit admits one unit again and when it is full.
type overEntry struct {
	dec          floodgate.Decision
	until, reset time.Time
}

func newOverCache(max int) *overCache {
	c := &overCache{seed: maphash.MakeSeed(), max: max/len(overCache{}.shards) + 1}
	for i := range c.shards {
		c.shards[i].m = map[overKey]overEntry{}
	}
	return c
}

func (c *overCache) shard(key string) *overShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// get returns the refusal remembered for (policy, key) as of now.
func (c *overCache) get(policy, key string, now time.Time) (floodgate.Decision, bool) {
	if c == nil {
		return floodgate.Decision{}, false
	}
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[overKey{policy, key}]
	sh.mu.Unlock()
	if !ok || !now.Before(e.until) {
		return floodgate.Decision{}, false
	}
	d := e.dec
	d.RetryAfter = e.until.Sub(now)
	d.ResetAfter = max(e.reset.Sub(now), d.RetryAfter)
	return d, true
}

// remember keeps the refusals of d's checks that leave nothing to any
// request until they expire: a check refused with no unit left, on a
// store limiter (a leased limit decides on its lease), whose retry time
// holds for a single unit (a fixed window's end, or a refusal of one
// unit).
func (c *overCache) remember(d *dstatus, now time.Time) {
	if c == nil {
		return
	}
	for j := range d.checks {
		ch := &d.checks[j]
		dec := ch.Decision
		if _, ok := ch.Limiter.(*store.Limiter); !ok || dec.Allowed || dec.Fallback || dec.Remaining > 0 || dec.RetryAfter <= 0 {
			continue
		}
		if !d.lm.lims[j].fixed && ch.N != 1 {
			continue
		}
		c.put(overKey{d.lm.lims[j].policy, ch.Key}, overEntry{dec: dec, until: now.Add(dec.RetryAfter), reset: now.Add(max(dec.ResetAfter, dec.RetryAfter))}, now)
	}
}

func (c *overCache) put(k overKey, e overEntry, now time.Time) {
	sh := c.shard(k.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[k]; !ok && len(sh.m) >= c.max {
		for k2, e2 := range sh.m {
			if !now.Before(e2.until) {
				delete(sh.m, k2)
			}
		}
		if len(sh.m) >= c.max {
			return
		}
	}
	sh.m[k] = e
}

// forget drops what is remembered of key (hits given back to it): every
// policy's entry.
func (c *overCache) forget(key string) {
	if c == nil {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	for k := range sh.m {
		if k.key == key {
			delete(sh.m, k)
		}
	}
	sh.mu.Unlock()
}

// clear forgets everything (a reload).
func (c *overCache) clear() {
	if c == nil {
		return
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// knownOver stands, in a request's checks, for a limit whose key the
// over-limit cache knows refused: it refuses with the remembered
// decision, without a store call (evaluate takes it as decided).
type knownOver struct {
	l   *store.Limiter
	dec floodgate.Decision
}

// Take refuses with the remembered decision, charging nothing.
func (k *knownOver) Take(context.Context, string, int) (floodgate.Decision, error) {
	return k.dec, nil
}
