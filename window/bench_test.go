package window_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/window"
)

// benchCase builds a limiter on a fresh memory store (real clock).
type benchCase struct {
	name string
	new  func(s store.Store) (*store.Limiter, error)
}

// benchCases returns the keyed token bucket (the reference) and the three
// window algorithms with the same rate: perSec per second (window of 1s, or
// of 10ms for the sliding log when perSec is too large for its log).
func benchCases(perSec int64) []benchCase {
	logCfg := window.Config{Limit: perSec, Window: time.Second}
	if perSec > 10_000 { // the sliding log's largest limit
		logCfg = window.Config{Limit: perSec / 100, Window: 10 * time.Millisecond}
	}
	cfg := window.Config{Limit: perSec, Window: time.Second}
	return []benchCase{
		{"token-bucket", func(s store.Store) (*store.Limiter, error) {
			return bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(perSec), Burst: perSec})
		}},
		{"fixed", func(s store.Store) (*store.Limiter, error) { return window.NewFixed(s, cfg) }},
		{"sliding-log", func(s store.Store) (*store.Limiter, error) { return window.NewSlidingLog(s, logCfg) }},
		{"sliding-counter", func(s store.Store) (*store.Limiter, error) { return window.NewSlidingCounter(s, cfg) }},
	}
}

func benchLimiter(b *testing.B, c benchCase) *store.Limiter {
	b.Helper()
	s, err := memstore.New(memstore.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	lim, err := c.new(s)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// BenchmarkTake measures Take on one hot key of a memory store, for each
// algorithm next to the keyed token bucket: "denied" runs a limit of 100 per
// second (almost every Take is denied), "admitted" a limit of 1,000,000 per
// second (almost every Take is admitted).
func BenchmarkTake(b *testing.B) {
	for _, load := range []struct {
		name   string
		perSec int64
	}{{"denied", 100}, {"admitted", 1_000_000}} {
		for _, c := range benchCases(load.perSec) {
			b.Run(load.name+"/"+c.name, func(b *testing.B) {
				lim := benchLimiter(b, c)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := lim.Take(ctx, "hot", 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTakeParallel is BenchmarkTake "denied" with every goroutine on
// the same hot key.
func BenchmarkTakeParallel(b *testing.B) {
	for _, c := range benchCases(100) {
		b.Run(c.name, func(b *testing.B) {
			lim := benchLimiter(b, c)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := lim.Take(ctx, "hot", 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkStep measures the pure steps alone (no store), on a key held at
// its limit (every step denied after the first ones) and on one that is
// mostly admitted.
func BenchmarkStep(b *testing.B) {
	for _, load := range []struct {
		name   string
		perSec int64
	}{{"denied", 100}, {"admitted", 1_000_000}} {
		for _, c := range benchCases(load.perSec) {
			b.Run(load.name+"/"+c.name, func(b *testing.B) {
				alg := benchLimiter(b, c).Algorithm()
				var s algo.State
				now := int64(1_700_000_000_000_000)
				b.ReportAllocs()
				for b.Loop() {
					now++
					s, _ = alg.Step(s, now, 1)
				}
			})
		}
	}
}
