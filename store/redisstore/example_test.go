package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// Addresses come from the environment, as scripts/test.sh exports them
// (scripts/redis.sh start).
func redisAddrs(env, def string) []string {
	if v := os.Getenv(env); v != "" {
		return strings.Split(v, ",")
	}
	return []string{def}
}

// A token bucket shared by every process that talks to the same Redis.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  redisAddrs("FLOODGATE_REDIS_ADDR", "127.0.0.1:6379"),
		DisableCache: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	st, err := redisstore.New(client,
		redisstore.WithPrefix(fmt.Sprintf("example:%d:", time.Now().UnixNano())), // a fresh key space
		redisstore.WithFailurePolicy(redisstore.FailOpen()),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, err := bucket.NewKeyed(st, bucket.Config{Rate: floodgate.PerMinute(3), Burst: 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 4 {
		d, err := limiter.Take(context.Background(), "alice", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 20s
}

// "10 per second AND 100 per hour" on one key, atomically, on a Redis
// Cluster: floodgate.All over two keyed limiters on one Store decides each
// request in one script (Store.ApplyAll).
func Example_all() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  redisAddrs("FLOODGATE_REDIS_CLUSTER", "127.0.0.1:7000"),
		DisableCache: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	st, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("example:%d:", time.Now().UnixNano())))
	if err != nil {
		fmt.Println(err)
		return
	}
	perSecond, _ := bucket.NewKeyed(st, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 10})
	perHour, _ := bucket.NewKeyed(st, bucket.Config{Rate: floodgate.PerHour(100), Burst: 12})
	limiter, err := floodgate.All(perSecond, perHour)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	d, _ := limiter.Take(ctx, "bob", 10) // empties the per-second bucket
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.Take(ctx, "bob", 2) // denied by the per-second policy...
	fmt.Println(d.Allowed)
	h, _ := perHour.Peek(ctx, "bob") // ...and charged nothing to the hourly one
	fmt.Println(h.Remaining)
	// Output:
	// true 0
	// false
	// 2
}

// Limits on different keys ("per IP AND per API key") in one all-or-nothing
// decision with floodgate.TakeAll; each check gets its own Decision.
func Example_takeAll() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  redisAddrs("FLOODGATE_REDIS_ADDR", "127.0.0.1:6379"),
		DisableCache: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	st, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("example:%d:", time.Now().UnixNano())))
	if err != nil {
		fmt.Println(err)
		return
	}
	perIP, _ := bucket.NewKeyed(st, bucket.Config{Name: "per-ip", Rate: floodgate.PerMinute(100), Burst: 3})
	perKey, _ := bucket.NewKeyed(st, bucket.Config{Name: "per-api-key", Rate: floodgate.PerHour(1000), Burst: 1000})
	ctx := context.Background()
	for range 4 {
		checks := []floodgate.Check{
			{Limiter: perIP, Key: "203.0.113.7", N: 1},
			{Limiter: perKey, Key: "key-42", N: 1},
		}
		d, err := floodgate.TakeAll(ctx, checks) // one script on a single node
		if err != nil {
			fmt.Println(err)
			return
		}
		// On the refusal, the key's budget is reported as it stands:
		// nothing was taken from it.
		fmt.Println(d.Allowed, checks[0].Decision.Remaining, checks[1].Decision.Remaining)
	}
	// Output:
	// true 2 999
	// true 1 998
	// true 0 997
	// false 0 997
}
