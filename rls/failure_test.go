package rls_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// When Redis goes away, the failure mode decides, and the observer is told.
func TestRedisAway(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    middleware.FailMode
		code    codes.Code
		overall rlspb.RateLimitResponse_Code
		outcome floodgate.Outcome
	}{
		{"error", middleware.FailError, codes.Unavailable, 0, floodgate.OutcomeErrorOpen},
		{"open", middleware.FailOpen, codes.OK, ok, floodgate.OutcomeErrorOpen},
		{"closed", middleware.FailClosed, codes.OK, over, floodgate.OutcomeErrorClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			srvCmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
			if err := srvCmd.Start(); err != nil {
				t.Fatalf("redis-server: %v", err)
			}
			t.Cleanup(func() { srvCmd.Process.Kill(); srvCmd.Wait() })
			addr := "127.0.0.1:" + strconv.Itoa(port)
			for range 300 {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			st, err := redisstore.New(c, redisstore.WithTimeout(2*time.Second)) // a loaded test machine
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var last floodgate.Event
			srv := serve(t, st, fixtures, rls.WithFailMode(tc.mode), rls.WithObserver(floodgate.ObserverFunc(func(e floodgate.Event) {
				mu.Lock()
				last = e
				mu.Unlock()
			})))
			want(t, srv.call(t, "edge", 0, desc("tenant", "x")), ok, "OK 9")
			srvCmd.Process.Kill()
			srvCmd.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			r, err := srv.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("tenant", "x")}})
			if status.Code(err) != tc.code || (err == nil && r.OverallCode != tc.overall) {
				t.Fatalf("%v %v, want %v %v", r, err, tc.code, tc.overall)
			}
			mu.Lock()
			defer mu.Unlock()
			if last.Outcome != tc.outcome || last.Err == nil {
				t.Errorf("event %+v, want %v with the error", last, tc.outcome)
			}
		})
	}
}
