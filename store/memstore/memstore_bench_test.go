package memstore_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
)

const benchKeys = 1_000_000

// benchLimiter is a keyed token bucket on a fresh store. The rate is high
// enough that most Takes are admitted; admitted or not, the work is the same.
func benchLimiter(b *testing.B) (*memstore.Store, *store.Limiter) {
	b.Helper()
	s, err := memstore.New(memstore.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	return s, lim
}

func BenchmarkTakeHotKey(b *testing.B) {
	_, lim := benchLimiter(b)
	ctx := context.Background()
	lim.Take(ctx, "hot", 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := lim.Take(ctx, "hot", 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeHotKeyFixedClock is BenchmarkTakeHotKey on a clock that
// returns a constant: the store's own cost, without the clock read (about
// 30 ns of the default clock on a KVM guest).
func BenchmarkTakeHotKeyFixedClock(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(memstore.WithSweepInterval(0), memstore.WithClock(floodgate.ClockFunc(func() time.Time { return t0 })))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	lim.Take(ctx, "hot", 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Take(ctx, "hot", 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeHotKeyCoarseClock is BenchmarkTakeHotKey with
// WithCoarseClock(time.Millisecond): an atomic load instead of the clock
// read.
func BenchmarkTakeHotKeyCoarseClock(b *testing.B) {
	s, err := memstore.New(memstore.WithSweepInterval(0), memstore.WithCoarseClock(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	lim.Take(ctx, "hot", 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Take(ctx, "hot", 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClock is the default clock read every Apply pays.
func BenchmarkClock(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += monotime.Nanotime() / 1000
	}
	runtime.KeepAlive(sink)
}

func BenchmarkTakeHotKeyParallel(b *testing.B) {
	_, lim := benchLimiter(b)
	ctx := context.Background()
	lim.Take(ctx, "hot", 1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := lim.Take(ctx, "hot", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// zipfKeys returns benchKeys keys, already inserted in the store, and a
// sequence of indices into them drawn from a Zipf distribution (s = 1.1).
func zipfKeys(b *testing.B, lim *store.Limiter) ([]string, []uint32) {
	b.Helper()
	keys := make([]string, benchKeys)
	ctx := context.Background()
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		if _, err := lim.Take(ctx, keys[i], 1); err != nil {
			b.Fatal(err)
		}
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, benchKeys-1)
	seq := make([]uint32, 1<<20)
	for i := range seq {
		seq[i] = uint32(z.Uint64())
	}
	return keys, seq
}

func BenchmarkTakeZipf1M(b *testing.B) {
	_, lim := benchLimiter(b)
	keys, seq := zipfKeys(b, lim)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := lim.Take(ctx, keys[seq[i&(len(seq)-1)]], 1); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkTakeZipf1MParallel(b *testing.B) {
	_, lim := benchLimiter(b)
	keys, seq := zipfKeys(b, lim)
	ctx := context.Background()
	var next atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) * 7919)
		for pb.Next() {
			if _, err := lim.Take(ctx, keys[seq[i&(len(seq)-1)]], 1); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// bytesPerKey inserts n token-bucket keys and returns the store's live heap
// per key. The keys themselves are not kept (the store never keeps them).
func bytesPerKey(tb testing.TB, n int) float64 {
	tb.Helper()
	before := heapAfterGC()
	s, err := memstore.New(memstore.WithSweepInterval(0))
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 10})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	buf := []byte("client-")
	for i := range n {
		key := strconv.AppendInt(buf[:7], int64(i), 10)
		if _, err := lim.Take(ctx, string(key), 1); err != nil {
			tb.Fatal(err)
		}
	}
	if got := s.Stats().Keys; got != n {
		tb.Fatalf("store holds %d keys, want %d", got, n)
	}
	after := heapAfterGC()
	runtime.KeepAlive(s)
	return float64(after-before) / float64(n)
}

// BenchmarkBytesPerKey reports the live heap per token-bucket key after
// 1,000,000 inserts (metric bytes/key); ns/op is the insert cost.
func BenchmarkBytesPerKey(b *testing.B) {
	var per float64
	start := time.Now()
	runs := 0
	for b.Loop() {
		per = bytesPerKey(b, benchKeys)
		runs++
	}
	b.ReportMetric(per, "bytes/key")
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(runs*benchKeys), "ns/insert")
}

// BenchmarkTakeNewKey is the miss path: every take is on a key the store
// does not hold. "plain" is a never-changed limit; "changed" the same limit
// after a live change (a Lineage with one predecessor, which holds none of
// the keys: one more probe per miss); "moved" the first take of each key
// after the change, which converts the predecessor's state and moves it.
func BenchmarkTakeNewKey(b *testing.B) {
	ctx := context.Background()
	old, err := bucket.Config{Name: "pro", Rate: floodgate.PerSecond(100), Burst: 100}.Algorithm()
	if err != nil {
		b.Fatal(err)
	}
	next, err := bucket.Config{Name: "pro", Rate: floodgate.PerSecond(200), Burst: 200}.Algorithm()
	if err != nil {
		b.Fatal(err)
	}
	changed, err := algo.Succeed(next, []algo.Algorithm{old})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name    string
		alg     algo.Algorithm
		prefill bool
	}{{"plain", next, false}, {"changed", changed, false}, {"moved", changed, true}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := memstore.New(memstore.WithSweepInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if i == len(keys) {
					b.StopTimer()
					s.Close()
					if s, err = memstore.New(memstore.WithSweepInterval(0)); err != nil {
						b.Fatal(err)
					}
					i = 0
					b.StartTimer()
				}
				if i%4096 == 0 && bc.prefill {
					b.StopTimer()
					for _, k := range keys[i:min(i+4096, len(keys))] {
						s.Apply(ctx, k, old, 1)
					}
					b.StartTimer()
				}
				if _, err := s.Apply(ctx, keys[i], bc.alg, 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
