package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// BenchmarkMatch turns two descriptors into checks (a plan rule and a
// dry-run rule: the partition of enforcing checks runs) and decides them
// with TakeAll, on memstore.
func BenchmarkMatch(b *testing.B) {
	cfg, err := policy.Parse("plans.yaml", []byte(`default_plan: free
policies:
  - {name: free, rate: 1000000/s}
  - {name: pro, rate: 1000000/s, burst: 2000000}
  - {name: watch, rate: 1000000/s, dry_run: true}
overrides:
  key_pro_1: pro
rules:
  - {key: api_key, plan: true}
  - {key: remote_address, policy: watch}
`))
	if err != nil {
		b.Fatal(err)
	}
	live, err := policy.NewLive(cfg, benchStore(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	descs := []middleware.Descriptor{{{Key: "api_key", Value: "key_pro_1"}}, {{Key: "remote_address", Value: "10.0.0.1"}}}
	var buf [2]floodgate.Check
	b.ReportAllocs()
	for b.Loop() {
		checks, enforcing, err := live.Match(ctx, descs, 1, buf[:0])
		if err != nil || enforcing != 1 {
			b.Fatal(err, enforcing)
		}
		if _, err := floodgate.TakeAll(ctx, checks[:enforcing]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeLeased compares Live.Take on one hot key of a leased plan
// on Redis ($FLOODGATE_REDIS_ADDR) with the same plan on memstore; run it
// with -count=6 and compare the two sub-benchmarks of each round.
func BenchmarkTakeLeased(b *testing.B) {
	addr := os.Getenv(redistest.Env)
	if addr == "" {
		b.Fatalf("$%s: the Redis server to lease from", redistest.Env)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	run := func(b *testing.B, live *policy.Live) {
		deadline := time.Now().Add(300 * time.Millisecond) // hot, its lease sized
		for time.Now().Before(deadline) {
			if _, err := live.Take(ctx, "key_pro_1", 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := live.Take(ctx, "key_pro_1", 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	// A bucket the benchmark never drains: the leased decisions are made
	// on leases, not denied waiting for the refill.
	cfg, err := policy.Parse("plans.yaml", []byte(threePlans))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Policies[1].Rate, cfg.Policies[1].Burst = floodgate.PerSecond(1_000_000), 1<<30
	b.Run("leased", func(b *testing.B) {
		cfg := cfg
		cfg.Policies = append([]policy.Policy(nil), cfg.Policies...)
		cfg.Policies[1].Leased = true
		s, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("fgbench:%x:", rand.Uint64())))
		if err != nil {
			b.Fatal(err)
		}
		live, err := policy.NewLive(cfg, s)
		if err != nil {
			b.Fatal(err)
		}
		defer live.Close(ctx)
		run(b, live)
	})
	b.Run("memstore", func(b *testing.B) {
		live, err := policy.NewLive(cfg, benchStore(b))
		if err != nil {
			b.Fatal(err)
		}
		run(b, live)
	})
}
