package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// threePlans is the setup: free, pro and one enterprise key, with
// rates high enough that the benchmarks' takes are admitted.
const threePlans = `default_plan: free
policies:
  - {name: free, rate: 1000000/s}
  - {name: pro, rate: 1000000/s, burst: 2000000}
  - {name: enterprise-acme, rate: 1000000/s, burst: 3000000}
overrides:
  key_pro_1: pro
  key_acme: enterprise-acme
`

func benchStore(b *testing.B) *memstore.Store {
	b.Helper()
	s, err := memstore.New(memstore.WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchLive(b *testing.B, opts ...policy.Option) *policy.Live {
	b.Helper()
	cfg, err := policy.Parse("plans.yaml", []byte(threePlans))
	if err != nil {
		b.Fatal(err)
	}
	live, err := policy.NewLive(cfg, benchStore(b), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return live
}

// BenchmarkSetPlan resolves a key's plan: an override, a resolver's cached
// answer, the default plan.
func BenchmarkSetPlan(b *testing.B) {
	resolve := policy.WithResolver(func(context.Context, string) (string, error) { return "pro", nil }, time.Hour, 1000)
	ctx := context.Background()
	for _, bc := range []struct{ name, key string }{
		{"override", "key_acme"}, {"cached", "key_pro_2"}, {"default", "nobody"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []policy.Option
			if bc.name == "cached" {
				opts = append(opts, resolve)
			}
			set := benchLive(b, opts...).Set()
			if _, err := set.Plan(ctx, bc.key); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := set.Plan(ctx, bc.key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTake compares a decision through a three-plan Live (plan
// resolution, then the plan's limiter) with the same token bucket as one
// store.Limiter, on one hot key; "changed" is the Live after a live change
// of the key's plan (a hot key is found under the new version at once).
func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, l floodgate.Limiter) {
		if _, err := l.Take(ctx, "key_pro_1", 1); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Take(ctx, "key_pro_1", 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("limiter", func(b *testing.B) {
		lim, err := bucket.NewKeyed(benchStore(b), bucket.Config{Name: "pro", Rate: floodgate.PerSecond(1_000_000), Burst: 2_000_000})
		if err != nil {
			b.Fatal(err)
		}
		run(b, lim)
	})
	b.Run("live", func(b *testing.B) { run(b, benchLive(b)) })
	b.Run("live-changed", func(b *testing.B) {
		live := benchLive(b)
		if _, err := live.Take(ctx, "key_pro_1", 1); err != nil {
			b.Fatal(err)
		}
		cfg, err := policy.Parse("plans.yaml", []byte(threePlans))
		if err != nil {
			b.Fatal(err)
		}
		cfg.Policies[1].Burst = 2_500_000
		if _, err := live.Update(cfg, "bench"); err != nil {
			b.Fatal(err)
		}
		run(b, live)
	})
}
