package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
)

// The benchmarks run against the local redis-server (FLOODGATE_REDIS_ADDR or
// the one TestMain started). Compare, in one run:
//
//	BenchmarkPing/serial      vs BenchmarkDecision/serial      (latency, <= 1.2x)
//	BenchmarkPing/parallel64  vs BenchmarkDecision/parallel64  (throughput, >= 50%)
//
// parallel64 runs 64 goroutines (SetParallelism(64/GOMAXPROCS)). Decisions go
// to 1024 keys (a busy limiter sees many keys) with a token bucket that admits
// most of them.

func benchClient(b *testing.B, opts ...Option) *Store {
	c := newClient(b, singleAddr)
	s, err := New(c, append([]Option{WithPrefix(uniquePrefix(b)), WithTimeout(time.Second)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

var benchKeys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "user-" + strconv.Itoa(i)
	}
	return k
}()

func setParallel64(b *testing.B) {
	p := 64 / max(1, testingProcs())
	b.SetParallelism(max(1, p))
}

func BenchmarkPing(b *testing.B) {
	s := benchClient(b)
	c := s.client
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		b.ReportAllocs()
		setParallel64(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkDecision(b *testing.B) {
	s := benchClient(b)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := l.Take(ctx, benchKeys[i&1023], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		p, err := s.prepare(l.Algorithm())
		if err != nil {
			b.Fatal(err)
		}
		b0, c0 := p.co.batches.Load(), p.co.batched.Load()
		benchParallel64(b, l)
		if n := p.co.batches.Load() - b0; n > 0 {
			b.ReportMetric(float64(p.co.batched.Load()-c0)/float64(n), "calls/batch")
		}
		b.ReportMetric(float64(p.co.batched.Load()-c0)/float64(b.N), "coalesced/op")
	})
	// A caller context that can be cancelled and has no deadline (an HTTP
	// request's) costs the allocations of context.WithTimeout.
	b.Run("serial-cancelable-ctx", func(b *testing.B) {
		b.ReportAllocs()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		i := 0
		for b.Loop() {
			if _, err := l.Take(cctx, benchKeys[i&1023], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkDecisionNoCoalescing is BenchmarkDecision/parallel64 with every
// decision its own EVALSHA (WithCoalescing(0)).
func BenchmarkDecisionNoCoalescing(b *testing.B) {
	s := benchClient(b, WithCoalescing(0))
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("parallel64", func(b *testing.B) { benchParallel64(b, l) })
}

// BenchmarkMultiDecision: floodgate.All over two limits on one key, one
// script per decision (Store.ApplyAll).
func BenchmarkMultiDecision(b *testing.B) {
	s := benchClient(b)
	m := allOf(b, s, tokenBucket(b, floodgate.PerSecond(1_000_000), 1_000_000), tokenBucket(b, floodgate.PerHour(1_000_000_000), 1_000_000))
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		i := 0
		for b.Loop() {
			if _, err := m.Take(ctx, benchKeys[i&1023], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel64", func(b *testing.B) { benchParallel64(b, m) })
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// benchParallel64 takes 1 from l with 64 goroutines over the bench keys.
func benchParallel64(b *testing.B, l floodgate.Limiter) {
	b.ReportAllocs()
	setParallel64(b)
	var next atomic.Uint32
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		for pb.Next() {
			if _, err := l.Take(ctx, benchKeys[i&1023], 1); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkVsPing measures the two ratios the store promises, on a machine
// whose load may change from second to second: PING and decisions are
// interleaved (serial: one of each per iteration; parallel64: alternating
// windows of 50ms), so that both see the same load. Metrics: the mean of each
// and their ratio (serial: decision latency / PING latency, want <= 1.2;
// parallel64: decision throughput / PING throughput, want >= 0.5).
func BenchmarkVsPing(b *testing.B) {
	s := benchClient(b)
	c := s.client
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		var ping, dec time.Duration
		i := 0
		for b.Loop() {
			t0 := time.Now()
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := l.Take(ctx, benchKeys[i&1023], 1); err != nil {
				b.Fatal(err)
			}
			dec += time.Since(t1)
			ping += t1.Sub(t0)
			i++
		}
		b.ReportMetric(float64(ping.Microseconds())/float64(b.N), "ping-µs")
		b.ReportMetric(float64(dec.Microseconds())/float64(b.N), "decision-µs")
		b.ReportMetric(float64(dec)/float64(ping), "x-ping")
	})
	b.Run("parallel64", func(b *testing.B) {
		const window = 50 * time.Millisecond
		run := func(op func(i int) error) int64 {
			var n atomic.Int64
			var wg sync.WaitGroup
			end := time.Now().Add(window)
			for g := range 64 {
				wg.Go(func() {
					for i := g * 16; time.Now().Before(end); i++ {
						if err := op(i); err != nil {
							b.Error(err)
							return
						}
						n.Add(1)
					}
				})
			}
			wg.Wait()
			return n.Load()
		}
		var pings, decs int64
		for b.Loop() {
			pings += run(func(int) error { return c.Do(ctx, c.B().Ping().Build()).Error() })
			decs += run(func(i int) error { _, err := l.Take(ctx, benchKeys[i&1023], 1); return err })
		}
		secs := (time.Duration(b.N) * window).Seconds()
		b.ReportMetric(float64(pings)/secs, "ping/s")
		b.ReportMetric(float64(decs)/secs, "decisions/s")
		b.ReportMetric(float64(decs)/float64(pings), "x-ping")
	})
}

// BenchmarkDecisionDenied is BenchmarkDecision on keys that are all
// denied (one unit an hour, taken before the timer starts): a denial
// leaves the state as it was and writes nothing back.
func BenchmarkDecisionDenied(b *testing.B) {
	s := benchClient(b)
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range benchKeys[:1024] {
		if _, err := l.Take(ctx, k, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := l.Take(ctx, benchKeys[i&1023], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel64", func(b *testing.B) { benchParallel64(b, l) })
}
