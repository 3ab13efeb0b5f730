package benchmarks

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	"github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Keyed limiters: one budget per key (per client), 100 per second with a burst
// of 100, in the library's in-memory store.
const (
	keyedRate  = 100
	keyedBurst = 100
)

// takeFunc takes one unit for key and reports whether it was admitted.
type takeFunc func(key string) bool

type keyedPeer struct {
	name string
	// mk builds a fresh limiter; close releases it.
	mk func(tb testing.TB) (take takeFunc, close func())
}

func keyedPeers() []keyedPeer {
	ctx := context.Background()
	return []keyedPeer{
		{"floodgate", newFloodgateKeyed},
		{"floodgate-coarse-clock", newFloodgateKeyedCoarse},
		{"sethvargo", func(tb testing.TB) (takeFunc, func()) {
			s, err := memorystore.New(&memorystore.Config{Tokens: keyedBurst, Interval: time.Second})
			if err != nil {
				tb.Fatal(err)
			}
			return func(key string) bool {
				_, _, _, ok, _ := s.Take(ctx, key)
				return ok
			}, func() { _ = s.Close(ctx) }
		}},
		{"throttled", func(tb testing.TB) (takeFunc, func()) {
			st, err := throttledmem.NewCtx(0)
			if err != nil {
				tb.Fatal(err)
			}
			l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(keyedRate), MaxBurst: keyedBurst - 1})
			if err != nil {
				tb.Fatal(err)
			}
			return func(key string) bool {
				limited, _, _ := l.RateLimitCtx(ctx, key, 1)
				return !limited
			}, func() {}
		}},
		{"ulule", func(tb testing.TB) (takeFunc, func()) {
			l := limiter.New(ululemem.NewStore(), limiter.Rate{Period: time.Second, Limit: keyedRate})
			return func(key string) bool {
				c, _ := l.Get(ctx, key)
				return !c.Reached
			}, func() {}
		}},
		{"syncmap-x-time-rate", func(tb testing.TB) (takeFunc, func()) {
			var m sync.Map
			return func(key string) bool {
				v, ok := m.Load(key)
				if !ok {
					v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Limit(keyedRate), keyedBurst))
				}
				return v.(*rate.Limiter).Allow()
			}, func() {}
		}},
	}
}

func BenchmarkKeyed(b *testing.B) {
	keys, draws := zipfKeys()
	runKeyedCases(b, keyedPeers())
	for _, p := range keyedPeers() {
		b.Run("hot-parallel/"+p.name, func(b *testing.B) {
			take, closeFn := p.mk(b)
			defer closeFn()
			take("hot")
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					take("hot")
				}
			})
		})
	}
	b.Run("zipf1M/floor-exact-clock", func(b *testing.B) { zipfFloor(b, keys, draws) })
	var pop populated
	defer pop.close()
	for _, p := range keyedPeers() {
		b.Run("zipf1M-parallel/"+p.name, func(b *testing.B) {
			take := pop.get(b, p, keys)
			b.ReportAllocs()
			b.ResetTimer()
			var seed sync.Mutex
			next := 0
			b.RunParallel(func(pb *testing.PB) {
				seed.Lock()
				i := next * 7919
				next++
				seed.Unlock()
				for pb.Next() {
					take(keys[draws[i&drawMask]])
					i++
				}
			})
		})
	}
}

// BenchmarkBytesPerKey inserts 1,000,000 keys into each library's in-memory
// store and reports the live heap growth per key after a full GC (B/key). Run
// it with -benchtime=1x: each iteration is a full 1M insert.
func BenchmarkBytesPerKey(b *testing.B) {
	keys, _ := zipfKeys()
	for _, p := range keyedPeers() {
		b.Run(p.name, func(b *testing.B) {
			var perKey float64
			for b.Loop() {
				before := liveHeap()
				take, closeFn := p.mk(b)
				for _, k := range keys {
					take(k)
				}
				after := liveHeap()
				perKey = float64(int64(after)-int64(before)) / float64(numKeys)
				runtime.KeepAlive(take)
				closeFn()
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// zipfFloor is the least work of a keyed limiter on the zipf1M draws that
// reads the exact clock, as floodgate's default and every peer of the
// table do (floodgate-coarse-clock does not): hash the key, load its word
// from a table the size of floodgate's for a million one-word keys (2^21
// slots of 24 bytes), read the monotonic clock, store the word. It is not
// a limiter (keys sharing a slot are not told apart, nothing is decided):
// its row is the floor of the rows that do that work. The clock's read
// waits for the loads before it, so the key's and the slot's memory misses
// are paid in full by every decision. The table is made and touched before
// the timed loop and is garbage after it (a table kept alive would change
// the collector's pace for the benchmarks after this one).
func zipfFloor(b *testing.B, keys []string, draws []int32) {
	const slots = 1 << 21
	tab := make([]uint64, 3*slots)
	for i := range tab {
		tab[i] = 1
	}
	seed := maphash.MakeSeed()
	base := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := (maphash.String(seed, keys[draws[i&drawMask]]) & (slots - 1)) * 3
		w := tab[k+2]
		now := uint64(time.Since(base))
		tab[k+2] = max(w, now) + 10_000_000
		i++
	}
}
