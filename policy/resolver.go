package policy

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"
	"weak"

	"github.com/floodgate-go/floodgate"
)

// resolver caches a ResolveFunc's answers, shared by the Sets of a Live:
// positive and negative answers for ttl, at most max keys (when full, the
// expired answers go, then the oldest half). Each Set keeps its own cache
// of the limiters these answers name (see Set.Plan).
//
// The read path takes no lock and reads no clock: answers live in a
// snapshot, and time is a coarse clock (now) that a timer moves every
// tick (a tenth of ttl, at most 100 ms). Answers may so be served up to a
// tick past their ttl.
type resolver struct {
	f       ResolveFunc
	ttl     time.Duration
	max     int
	now     atomic.Int64 // floodgate.Nanotime, moved every tick
	answers *snapshot[cached]
}

// cached is one answer.
type cached struct {
	policy string
	until  int64 // Nanotime
	born   int64 // Nanotime, for the eviction of the oldest
}

func newResolver(f ResolveFunc, ttl time.Duration, max int) *resolver {
	r := &resolver{f: f, ttl: ttl, max: max, answers: newSnapshot(map[string]cached{})}
	r.now.Store(floodgate.Nanotime())
	tick(weak.Make(r), min(ttl/10, 100*time.Millisecond))
	return r
}

// tick moves r's clock every d for as long as r is reachable: the timer
// holds it weakly.
func tick(wr weak.Pointer[resolver], d time.Duration) {
	time.AfterFunc(d, func() {
		if r := wr.Value(); r != nil {
			r.now.Store(floodgate.Nanotime())
			tick(wr, d)
		}
	})
}

// resolve returns key's plan (a policy name, or "") and until when the
// answer holds.
func (r *resolver) resolve(ctx context.Context, key string) (string, int64, error) {
	now := r.now.Load()
	if c, ok := r.answers.load(key); ok && now < c.until {
		return c.policy, c.until, nil
	}
	if c, ok := r.answers.loadPending(key, r.trim); ok && now < c.until {
		return c.policy, c.until, nil
	}
	name, err := r.f(ctx, key)
	if err != nil {
		return "", 0, fmt.Errorf("policy: resolving a key's plan: %w", err)
	}
	c := cached{policy: name, until: now + int64(r.ttl), born: now}
	r.answers.store(key, c, r.trim)
	return name, c.until, nil
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
