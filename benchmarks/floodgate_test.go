package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/window"
	"github.com/go-chi/httprate"
	"github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
)

// newFloodgateKeyed is floodgate's keyed token bucket on the embedded memstore.
func newFloodgateKeyed(tb testing.TB) (takeFunc, func()) {
	return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) {
		return bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(keyedRate), Burst: keyedBurst})
	})
}

// newFloodgateKeyedCoarse is newFloodgateKeyed on a memstore with
// WithCoarseClock(time.Millisecond), the opt-in clock of one atomic load.
func newFloodgateKeyedCoarse(tb testing.TB) (takeFunc, func()) {
	return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) {
		return bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(keyedRate), Burst: keyedBurst})
	}, memstore.WithCoarseClock(time.Millisecond))
}

func onMemstore(tb testing.TB, mk func(store.Store) (floodgate.Limiter, error), opts ...memstore.Option) (takeFunc, func()) {
	s, err := memstore.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := mk(s)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	return func(key string) bool {
		d, _ := l.Take(ctx, key, 1)
		return d.Allowed
	}, func() { _ = s.Close() }
}

// algorithmPeers are floodgate's algorithms, each on memstore with the same
// budget (100 per second), to compare with the token bucket.
func algorithmPeers() []keyedPeer {
	w := window.Config{Limit: keyedRate, Window: time.Second}
	return []keyedPeer{
		{"floodgate-token-bucket", newFloodgateKeyed},
		{"leaky-nodelay", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) {
				return leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerSecond(keyedRate), Burst: keyedBurst - 1, NoDelay: true})
			})
		}},
		{"leaky-delay", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) {
				return leaky.NewKeyed(s, leaky.Config{Rate: floodgate.PerSecond(keyedRate), Burst: keyedBurst - 1})
			})
		}},
		{"fixed-window", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) { return window.NewFixed(s, w) })
		}},
		{"sliding-counter", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) { return window.NewSlidingCounter(s, w) })
		}},
		{"sliding-log", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) { return window.NewSlidingLog(s, w) })
		}},
	}
}

// fixedWindowPeers: fixed windows of 100 per second.
func fixedWindowPeers() []keyedPeer {
	ctx := context.Background()
	return []keyedPeer{
		{"floodgate", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) {
				return window.NewFixed(s, window.Config{Limit: keyedRate, Window: time.Second})
			})
		}},
		{"ulule", func(tb testing.TB) (takeFunc, func()) {
			l := limiter.New(ululemem.NewStore(), limiter.Rate{Period: time.Second, Limit: keyedRate})
			return func(key string) bool {
				c, _ := l.Get(ctx, key)
				return !c.Reached
			}, func() {}
		}},
	}
}

// slidingCounterPeers: sliding-window counters of 100 per second.
func slidingCounterPeers() []keyedPeer {
	return []keyedPeer{
		{"floodgate", func(tb testing.TB) (takeFunc, func()) {
			return onMemstore(tb, func(s store.Store) (floodgate.Limiter, error) {
				return window.NewSlidingCounter(s, window.Config{Limit: keyedRate, Window: time.Second})
			})
		}},
		{"httprate", func(tb testing.TB) (takeFunc, func()) {
			// httprate's own decision path without the HTTP parts: the
			// weighted estimate (Status), then the increment when admitted.
			l := httprate.NewRateLimiter(keyedRate, time.Second)
			c := l.Counter()
			return func(key string) bool {
				ok, _, _ := l.Status(key)
				if ok {
					_ = c.Increment(key, time.Now().UTC().Truncate(time.Second))
				}
				return ok
			}, func() {}
		}},
	}
}

func runKeyedCases(b *testing.B, peers []keyedPeer) {
	keys, draws := zipfKeys()
	for _, p := range peers {
		b.Run("hot/"+p.name, func(b *testing.B) {
			take, closeFn := p.mk(b)
			defer closeFn()
			take("hot")
			b.ReportAllocs()
			for b.Loop() {
				take("hot")
			}
		})
	}
	var pop populated
	defer pop.close()
	for _, p := range peers {
		b.Run("zipf1M/"+p.name, func(b *testing.B) {
			take := pop.get(b, p, keys)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				take(keys[draws[i&drawMask]])
				i++
			}
		})
	}
}

func BenchmarkAlgorithms(b *testing.B)     { runKeyedCases(b, algorithmPeers()) }
func BenchmarkFixedWindow(b *testing.B)    { runKeyedCases(b, fixedWindowPeers()) }
func BenchmarkSlidingCounter(b *testing.B) { runKeyedCases(b, slidingCounterPeers()) }

// populated holds one library's limiter with every key taken once, for the
// runs of one zipf1M benchmark: the testing package runs a benchmark's
// function several times (b.N = 1, then larger), and inserting a million
// keys before each run would cost more than the runs themselves. The state
// the runs leave is carried to the next run of the same benchmark (keys
// drained a little more): the steady state of a busy limiter.
type populated struct {
	name    string
	take    takeFunc
	closeFn func()
}

// get returns p's populated limiter: the one held when it is p's, else a
// new one (the one held is closed first).
func (c *populated) get(tb testing.TB, p keyedPeer, keys []string) takeFunc {
	if c.name == p.name && c.take != nil {
		return c.take
	}
	c.close()
	take, closeFn := p.mk(tb)
	for _, k := range keys {
		take(k)
	}
	c.name, c.take, c.closeFn = p.name, take, closeFn
	return take
}

func (c *populated) close() {
	if c.closeFn != nil {
		c.closeFn()
	}
	c.name, c.take, c.closeFn = "", nil, nil
}
