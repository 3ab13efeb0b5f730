package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

const leasedConfig = `domain: edge
descriptors:
  - key: tenant
    rate_limit:
      algorithm: token-bucket
      unit: minute
      requests_per_unit: 1
      burst: 1000
      leased: true
      lease_refresh: 1s
`

// A leased limit on Redis: at shutdown the command gives back what its
// leases hold, so that the global bucket has lost only what was admitted.
// On the memory store it is refused at startup with the file and line.
func TestLeasedGivenBackAtShutdown(t *testing.T) {
	addr := redistest.Addr(t) // $FLOODGATE_REDIS_ADDR, or a server of the test's own
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(leasedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-config", dir, "-addr", "127.0.0.1:0"}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "edge.yaml:9: leased needs a store shared by the fleet that grants leases") {
		t.Fatalf("on the memory store: %v, want edge.yaml:9: leased needs a store that grants leases", err)
	}

	prefix := "rlscmd-leased:" + time.Now().Format("150405.000000") + ":"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", dir, "-addr", "127.0.0.1:0", "-shutdown-drain", "0s", "-redis", addr, "-redis-prefix", prefix, "-redis-timeout", "5s"}, io.Discard, ready)
	}()
	var addrs [2]string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				r, err := client.ShouldRateLimit(context.Background(), req("acme"))
				if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
					t.Errorf("call: %v %v", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no shutdown within 15s")
	}

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	l, err := policy.Policy{Name: "edge.tenant", Rate: floodgate.Rate{N: 1, Per: time.Minute}, Burst: 1000}.Limiter(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Peek(context.Background(), "edge|tenant=acme")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining < 800 || d.Remaining > 801 {
		t.Errorf("the global bucket has %d after shutdown, want 800 (1000 less the 200 admitted: the leases given back)", d.Remaining)
	}
}
