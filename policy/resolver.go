package policy

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/floodgate-go/floodgate/internal/monotime"
)

// resolver caches a ResolveFunc's answers, shared by the Sets of a Live:
// positive and negative answers for ttl, at most max keys (when full, the
// expired answers go, then the oldest half). Each Set keeps its own cache
// of the limiters these answers name (see Set.Plan).
//
// A key's misses call f once at a time: concurrent requests for a key
// whose answer is missing or expired wait for the one call in flight. A
// failure of f is remembered for failTTL: a key that had an answer keeps
// it meanwhile (its last answer is served, stale, until f answers again),
// a key that never had one gets the error without calling f again. So a
// resolver's database going away costs it one call per key per failTTL,
// not one per request.
//
// The read path takes no lock and reads no clock: answers live in a
// snapshot, and time is a coarse clock (now) that a timer moves every
// tick (a tenth of ttl, at most 100 ms). Answers may so be served up to a
// tick past their ttl.
type resolver struct {
	f       ResolveFunc
	ttl     time.Duration
	max     int
	now     atomic.Int64 // monotime.Nanotime, moved every tick
	answers *snapshot[cached]

	mu     sync.Mutex
	flight map[string]*call // under mu: the calls of f in flight, by key
}

// failTTL is how long a failure of the ResolveFunc is remembered.
const failTTL = time.Second

// cached is one answer.
type cached struct {
	policy string
	until  int64 // Nanotime
	born   int64 // Nanotime, for the eviction of the oldest
	err    error // a failure remembered until until (no answer to serve)
}

// call is one call of f in flight; done is closed when c and err are set.
type call struct {
	done chan struct{}
	c    cached
	err  error
}

func newResolver(f ResolveFunc, ttl time.Duration, max int) *resolver {
	r := &resolver{f: f, ttl: ttl, max: max, answers: newSnapshot(map[string]cached{}), flight: map[string]*call{}}
	r.now.Store(monotime.Nanotime())
	tick(weak.Make(r), min(ttl/10, 100*time.Millisecond))
	return r
}

// tick moves r's clock every d for as long as r is reachable: the timer
// holds it weakly.
func tick(wr weak.Pointer[resolver], d time.Duration) {
	time.AfterFunc(d, func() {
		if r := wr.Value(); r != nil {
			r.now.Store(monotime.Nanotime())
			tick(wr, d)
		}
	})
}

// resolve returns key's plan (a policy name, or "") and until when the
// answer holds.
func (r *resolver) resolve(ctx context.Context, key string) (string, int64, error) {
	now := r.now.Load()
	c, ok := r.answers.load(key)
	if !ok || now >= c.until {
		if p, pok := r.answers.loadPending(key, r.trim); pok {
			c, ok = p, true
		}
	}
	if ok && now < c.until {
		return c.policy, c.until, c.err
	}
	for {
		r.mu.Lock()
		cl, waiting := r.flight[key]
		if !waiting {
			cl = &call{done: make(chan struct{})}
			r.flight[key] = cl
		}
		r.mu.Unlock()
		if !waiting {
			r.call(ctx, key, cl, c, ok)
			return cl.c.policy, cl.c.until, cl.err
		}
		select {
		case <-cl.done:
		case <-ctx.Done():
			return "", 0, ctx.Err()
		}
		if cl.err != nil && cl.c.until == 0 && ctx.Err() == nil {
			continue // the caller that called f gave up (its context): call it again
		}
		return cl.c.policy, cl.c.until, cl.err
	}
}

// call calls f for key as cl, the one call in flight for key; last is the
// key's expired answer, when it has one (had).
func (r *resolver) call(ctx context.Context, key string, cl *call, last cached, had bool) {
	defer func() {
		if p := recover(); p != nil {
			// A panic of f is a failure of f, remembered as one.
			now := r.now.Load()
			cl.err = fmt.Errorf("policy: resolving a key's plan: the resolver panicked: %v", p)
			cl.c = cached{until: now + int64(failTTL), born: now, err: cl.err}
			r.answers.store(key, cl.c, r.trim)
		}
		r.mu.Lock()
		delete(r.flight, key)
		r.mu.Unlock()
		close(cl.done)
	}()
	name, err := r.f(ctx, key)
	now := r.now.Load()
	switch {
	case err == nil:
		cl.c = cached{policy: name, until: now + int64(r.ttl), born: now}
	case ctx.Err() != nil:
		// The caller gave up: nothing to remember of f.
		cl.err = fmt.Errorf("policy: resolving a key's plan: %w", err)
		return
	case had && last.err == nil:
		// Stale if error: the last answer holds until f answers again.
		cl.c = cached{policy: last.policy, until: now + int64(failTTL), born: last.born}
	default:
		cl.err = fmt.Errorf("policy: resolving a key's plan: %w", err)
		cl.c = cached{until: now + int64(failTTL), born: now, err: cl.err}
	}
	r.answers.store(key, cl.c, r.trim)
}

// trim bounds a merged map of answers to max: the expired go, then the
// oldest half.
func (r *resolver) trim(m map[string]cached) {
	if len(m) <= r.max {
		return
	}
	now := r.now.Load()
	maps.DeleteFunc(m, func(_ string, c cached) bool { return now >= c.until })
	if len(m) <= r.max {
		return
	}
	ages := make([]int64, 0, len(m))
	for _, c := range m {
		ages = append(ages, c.born)
	}
	median := quickMedian(ages)
	maps.DeleteFunc(m, func(_ string, c cached) bool { return c.born <= median && len(m) > r.max/2 })
}

// quickMedian returns the median of xs, reordering them.
func quickMedian(xs []int64) int64 {
	k := len(xs) / 2
	lo, hi := 0, len(xs)-1
	for lo < hi {
		p := xs[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for xs[i] < p {
				i++
			}
			for xs[j] > p {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}
