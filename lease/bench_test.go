package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// benchConfig never runs dry at benchmark speed: 1M/s with a burst of
// 2^30, leased in batches sized from the measured rate.
func benchConfig(name string) bucket.Config {
	return bucket.Config{Name: name, Rate: floodgate.PerSecond(1_000_000), Burst: 1 << 30}
}

func newBenchLease(b *testing.B) *lease.Limiter {
	b.Helper()
	st := newStore(b, redisClient(b))
	l, err := lease.New(st, lease.Config{Bucket: benchConfig(uniqueName(b)), HotRate: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close(context.Background()) })
	ctx := context.Background()
	// Warm up: the key turns hot and its lease grows to the measured rate.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		for range 1000 {
			l.Take(ctx, "hot", 1)
		}
	}
	return l
}

// BenchmarkDecision compares a leased decision on one hot key with the
// memstore token bucket's on one hot key; run it with -count=6 and compare
// the two sub-benchmarks of each round (they run interleaved).
func BenchmarkDecision(b *testing.B) {
	for _, par := range []bool{false, true} {
		name := "serial"
		if par {
			name = "parallel"
		}
		b.Run(name+"/lease", func(b *testing.B) {
			l := newBenchLease(b)
			before := l.Stats()
			run(b, l, par)
			after := l.Stats()
			calls := after.Grants + after.Direct - before.Grants - before.Direct
			b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
		})
		b.Run(name+"/memstore", func(b *testing.B) {
			s, err := memstore.New(memstore.WithSweepInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lim, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
			if err != nil {
				b.Fatal(err)
			}
			run(b, lim, par)
		})
	}
}

// BenchmarkSaturated is the storm: one key offered far more than its
// limit (10,000/s, burst 1,000), so that nearly every decision is a
// refusal. The lease divides the bucket and refuses in memory between
// its claims; the memstore token bucket refuses in memory too. Run it
// with -count=6 and compare the two sub-benchmarks of each round.
func BenchmarkSaturated(b *testing.B) {
	cfg := func(name string) bucket.Config {
		return bucket.Config{Name: name, Rate: floodgate.PerSecond(10_000), Burst: 1000}
	}
	for _, par := range []bool{false, true} {
		name := "serial"
		if par {
			name = "parallel"
		}
		b.Run(name+"/lease", func(b *testing.B) {
			st := newStore(b, redisClient(b))
			l, err := lease.New(st, lease.Config{Bucket: cfg(uniqueName(b))})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close(context.Background()) })
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
				l.Take(context.Background(), "hot", 1)
			}
			before := l.Stats()
			run(b, l, par)
			after := l.Stats()
			calls := after.Grants + after.Direct - before.Grants - before.Direct
			b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
		})
		b.Run(name+"/memstore", func(b *testing.B) {
			s, err := memstore.New(memstore.WithSweepInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lim, err := bucket.NewKeyed(s, cfg(""))
			if err != nil {
				b.Fatal(err)
			}
			run(b, lim, par)
		})
	}
}

func run(b *testing.B, l floodgate.Limiter, par bool) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	if !par {
		for b.Loop() {
			if _, err := l.Take(ctx, "hot", 1); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Take(ctx, "hot", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
