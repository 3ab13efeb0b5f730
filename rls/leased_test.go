package rls_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// fleet is n rls services on one Redis (one key prefix), each with its own
// client, store and policy.Live, as n processes of a fleet: served on
// loopback, one gRPC client each.
func fleet(t *testing.T, addrs []string, n int, files map[string]string) []*server {
	t.Helper()
	prefix := fmt.Sprintf("rlslease:%d:", rand.Uint64())
	dir := writeDir(t, files)
	var out []*server
	for range n {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := rls.LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := rls.New(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close(context.Background()) })
		out = append(out, serveService(t, svc, dir))
	}
	return out
}

// hammerFleet sends one-hit calls of req from g goroutines per server until
// stop is closed or d has passed, and counts the admitted ones; a call that
// fails or is not answered per descriptor fails the test.
func hammerFleet(t *testing.T, srvs []*server, g int, d time.Duration, req *rlspb.RateLimitRequest, admitted, calls *atomic.Int64) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	end := start.Add(d)
	for _, srv := range srvs {
		for range g {
			wg.Go(func() {
				for time.Now().Before(end) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := srv.client.ShouldRateLimit(ctx, req)
					cancel()
					calls.Add(1)
					if err != nil {
						failed.Store(err)
						return
					}
					if len(resp.Statuses) != len(req.Descriptors) || resp.Statuses[0].CurrentLimit == nil {
						failed.Store(fmt.Errorf("an unanswered descriptor: %v", resp))
						return
					}
					if resp.OverallCode == ok {
						admitted.Add(1)
					} else if resp.Statuses[0].DurationUntilReset.AsDuration() <= 0 {
						failed.Store(fmt.Errorf("a refusal without duration_until_reset: %v", resp))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

const fleetYAML = `domain: fleet
descriptors:
  - key: route
    rate_limit:
      algorithm: token-bucket
      unit: second
      requests_per_unit: 150
      burst: 50
      leased: true
      lease_refresh: 50ms
`

// Two services on one Redis (two nodes of a fleet) hammering one leased
// limit for 2 s admit within the one global bucket's bound (burst + rate x
// elapsed: tokens are debited from it before they are spent), at least 80%
// of it, every call answered, and decide on leases: Redis calls (grants and
// direct decisions) for at most half the calls.
func TestLeasedWithinGlobalBound(t *testing.T) {
	testLeasedBound(t, []string{singleAddr(t)}, 2*time.Second)
}

// The same on the Redis Cluster, for 1.5 s.
func TestLeasedWithinGlobalBoundCluster(t *testing.T) {
	testLeasedBound(t, clusterAddrs(t), 1500*time.Millisecond)
}

func testLeasedBound(t *testing.T, addrs []string, d time.Duration) {
	const rate, burst = 150, 50
	srvs := fleet(t, addrs, 2, map[string]string{"fleet.yaml": fleetYAML})
	req := &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("route", "/img")}}
	var admitted, calls atomic.Int64
	elapsed := hammerFleet(t, srvs, 6, d, req, &admitted, &calls)
	bound := burst + int64(rate*elapsed.Seconds()) + 1
	var grants, granted, direct int64
	for _, srv := range srvs {
		st, ok := rls.LeaseStats(srv.svc, "fleet.route")
		if !ok {
			t.Fatal("no lease limiter for fleet.route")
		}
		grants += st.Grants
		granted += st.Granted
		direct += st.Direct
		if st.Nodes != 2 {
			t.Errorf("a node counts %d nodes, want 2", st.Nodes)
		}
	}
	n := admitted.Load()
	t.Logf("admitted %d of at most %d in %v (%d calls); %d grants brought %d tokens, %d direct decisions", n, bound, elapsed, calls.Load(), grants, granted, direct)
	if n > bound {
		t.Errorf("admitted %d, above the global bound %d", n, bound)
	}
	if ideal := min(bound, calls.Load()); float64(n) < 0.8*float64(ideal) {
		t.Errorf("admitted %d, under 80%% of the %d that one bucket would have admitted", n, ideal)
	}
	if grants == 0 || grants+direct > calls.Load()/2 {
		t.Errorf("%d grants and %d direct decisions for %d calls: not decided on leases", grants, direct, calls.Load())
	}
}
