package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/redisstore"
	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// Redis: one decision per operation against a local redis-server
// (FLOODGATE_REDIS_ADDR, which scripts/test.sh and scripts/redis.sh start;
// default 127.0.0.1:16379). Serial: one goroutine, the round-trip latency.
// Parallel: 64 goroutines, throughput in ops/s. The go-redis based peers get a
// pool of 64 connections (go-redis' default of 20 would cap them). Keys rotate
// over 10,000 clients with a budget large enough that every call is admitted.
const redisClients = 10_000

func redisAddr() string {
	if a := os.Getenv("FLOODGATE_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:16379"
}

type redisPeer struct {
	name string
	mk   func(tb testing.TB) (op func(ctx context.Context, key string) error, close func())
}

func redisPeers() []redisPeer {
	return []redisPeer{
		{"floodgate", func(tb testing.TB) (func(context.Context, string) error, func()) {
			c := newRueidis(tb)
			s, err := redisstore.New(c, redisstore.WithTimeout(time.Second))
			if err != nil {
				tb.Fatal(err)
			}
			l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
			if err != nil {
				tb.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				_, err := l.Take(ctx, key, 1)
				return err
			}, c.Close
		}},
		{"rueidis-PING", func(tb testing.TB) (func(context.Context, string) error, func()) {
			c := newRueidis(tb)
			ping := c.B().Ping().Build().Pin()
			return func(ctx context.Context, _ string) error {
				return c.Do(ctx, ping).Error()
			}, c.Close
		}},
		{"go-redis-PING", func(tb testing.TB) (func(context.Context, string) error, func()) {
			c := newGoRedis()
			return func(ctx context.Context, _ string) error {
				return c.Ping(ctx).Err()
			}, func() { _ = c.Close() }
		}},
		{"redis_rate", func(tb testing.TB) (func(context.Context, string) error, func()) {
			c := newGoRedis()
			l := redis_rate.NewLimiter(c)
			lim := redis_rate.PerSecond(1_000_000)
			return func(ctx context.Context, key string) error {
				_, err := l.Allow(ctx, key, lim)
				return err
			}, func() { _ = c.Close() }
		}},
		{"ulule", func(tb testing.TB) (func(context.Context, string) error, func()) {
			c := newGoRedis()
			st, err := ululeredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule-bench", MaxRetry: 3})
			if err != nil {
				tb.Fatal(err)
			}
			l := limiter.New(st, limiter.Rate{Period: time.Second, Limit: 1_000_000})
			return func(ctx context.Context, key string) error {
				_, err := l.Get(ctx, key)
				return err
			}, func() { _ = c.Close() }
		}},
	}
}

func newRueidis(tb testing.TB) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr()}, DisableCache: true})
	if err != nil {
		tb.Fatalf("rueidis: %v (is Redis running? ./scripts/redis.sh start)", err)
	}
	return c
}

func newGoRedis() *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: redisAddr(), PoolSize: 64})
}

func BenchmarkRedis(b *testing.B) {
	keys := make([]string, redisClients)
	for i := range keys {
		keys[i] = "bench-client:" + strconv.Itoa(i)
	}
	for _, p := range redisPeers() {
		b.Run("serial/"+p.name, func(b *testing.B) {
			op, closeFn := p.mk(b)
			defer closeFn()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := op(ctx, keys[i%redisClients]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	for _, p := range redisPeers() {
		b.Run("64-goroutines/"+p.name, func(b *testing.B) {
			op, closeFn := p.mk(b)
			defer closeFn()
			ctx := context.Background()
			b.SetParallelism(max(1, 64/runtimeProcs()))
			b.ReportAllocs()
			b.ResetTimer()
			var next int64
			var errs = make(chan error, 1)
			b.RunParallel(func(pb *testing.PB) {
				i := int(nextSeed(&next)) * 7919
				for pb.Next() {
					if err := op(ctx, keys[i%redisClients]); err != nil {
						select {
						case errs <- fmt.Errorf("%s: %w", p.name, err):
						default:
						}
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		})
	}
}
