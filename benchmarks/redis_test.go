package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
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
// Parallel: 64 goroutines, throughput in ops/s. Every case also reports the
// Redis server's CPU per operation (redis-cpu-us/op: the growth of INFO
// cpu's used_cpu_user + used_cpu_sys over the run, divided by the
// operations), measured in the same run as the rest, so that a library that
// is fast on the client because it is costly on the server shows it. The
// server must serve nobody else meanwhile. The go-redis based peers get a
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
		// Not a limiter: the least a lone decision that reads the server's
		// clock and keeps a one-word state costs the server (a function that
		// reads TIME, GETs the key, SETs it with a TTL and returns a
		// decision's six numbers), one FCALL per decision: the floor of
		// floodgate's token bucket and of redis_rate's GCRA, which do that
		// work; not of ulule's fixed window (INCRBY and PTTL: the key's
		// TTL is its clock). Serial only: 64 goroutines' calls are batched.
		{"floor-lua", func(tb testing.TB) (func(context.Context, string) error, func()) {
			c := newRueidis(tb)
			ctx := context.Background()
			if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(floorLua).Build()).Error(); err != nil {
				tb.Fatalf("FUNCTION LOAD: %v", err)
			}
			return func(ctx context.Context, key string) error {
				return c.Do(ctx, c.B().Fcall().Function("fgbench_floor").Numkeys(1).Key("floor:"+key).Build()).Error()
			}, c.Close
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
	admin := newRueidis(b)
	defer admin.Close()
	for _, p := range redisPeers() {
		b.Run("serial/"+p.name, func(b *testing.B) {
			op, closeFn := p.mk(b)
			defer closeFn()
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := serverCPU(b, admin)
			i := 0
			for b.Loop() {
				if err := op(ctx, keys[i%redisClients]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportServerCPU(b, admin, cpu0)
		})
	}
	for _, p := range redisPeers() {
		if strings.HasPrefix(p.name, "floor") {
			continue // one call per decision: not a floor for batched calls
		}
		b.Run("64-goroutines/"+p.name, func(b *testing.B) {
			op, closeFn := p.mk(b)
			defer closeFn()
			ctx := context.Background()
			b.SetParallelism(max(1, 64/runtimeProcs()))
			b.ReportAllocs()
			cpu0 := serverCPU(b, admin)
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
			reportServerCPU(b, admin, cpu0)
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		})
	}
}

// serverCPU returns the Redis server's CPU time so far (INFO cpu:
// used_cpu_user + used_cpu_sys), in microseconds.
func serverCPU(tb testing.TB, c rueidis.Client) float64 {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	var total float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %s: %v", line, err)
		}
		total += f * 1e6
		found++
	}
	if found != 2 {
		tb.Fatalf("INFO cpu: no used_cpu_user and used_cpu_sys in %q", info)
	}
	return total
}

// reportServerCPU reports the server's CPU per operation since cpu0.
func reportServerCPU(b *testing.B, c rueidis.Client, cpu0 float64) {
	b.StopTimer()
	if b.N > 0 {
		b.ReportMetric((serverCPU(b, c)-cpu0)/float64(b.N), "redis-cpu-us/op")
	}
}

// floorLua is the floor-lua row's function: what a decision that reads
// the server's clock and keeps a one-word state cannot do without (TIME,
// GET, SET with a TTL, a reply of six numbers), deciding nothing.
const floorLua = `#!lua name=fgbench_floor
redis.register_function('fgbench_floor', function(keys, args)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local w = tonumber(redis.call('GET', keys[1])) or 0
  if w < now then w = now end
  w = w + 1
  redis.call('SET', keys[1], w, 'PX', 1000)
  return {1, 1000000, 999999, 0, 1, 0}
end)
`
