package leaky_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// BenchmarkTakeHotKey compares Take on one hot key of memstore for the leaky
// bucket (every mode) and the keyed token bucket, same rate and burst, same
// store, same run.
func BenchmarkTakeHotKey(b *testing.B) {
	rate := floodgate.PerSecond(1_000_000)
	const burst = 1_000_000
	cases := []struct {
		name string
		mk   func(s *memstore.Store) (floodgate.Limiter, error)
	}{
		{"bucket", func(s *memstore.Store) (floodgate.Limiter, error) {
			return bucket.NewKeyed(s, bucket.Config{Rate: rate, Burst: burst})
		}},
		{"leaky-nodelay", func(s *memstore.Store) (floodgate.Limiter, error) {
			return leaky.NewKeyed(s, leaky.Config{Rate: rate, Burst: burst, NoDelay: true})
		}},
		{"leaky-delay", func(s *memstore.Store) (floodgate.Limiter, error) {
			return leaky.NewKeyed(s, leaky.Config{Rate: rate, Burst: burst, Delay: burst / 2})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := memstore.New(memstore.WithSweepInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			lim, err := c.mk(s)
			if err != nil {
				b.Fatal(err)
			}
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

// BenchmarkStep is the pure step, without a store: leaky against the token
// bucket's GCRA.
func BenchmarkStep(b *testing.B) {
	rate := floodgate.PerSecond(1_000_000)
	const burst = 1_000_000
	gcra, err := bucket.Config{Rate: rate, Burst: burst}.Algorithm()
	if err != nil {
		b.Fatal(err)
	}
	lk, err := leaky.Config{Rate: rate, Burst: burst, Delay: burst / 2}.Algorithm()
	if err != nil {
		b.Fatal(err)
	}
	for _, alg := range []algo.Algorithm{gcra, lk} {
		b.Run(alg.Spec().Name, func(b *testing.B) {
			var s algo.State
			now := t0
			for b.Loop() {
				now += 3
				s, _ = alg.Step(s, now, 1)
			}
		})
	}
}
