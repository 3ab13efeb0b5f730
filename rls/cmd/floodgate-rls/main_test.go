package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const config = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// start runs the command with args and returns its addresses, a client
// connection and the function that stops it (and reports run's error).
func start(t *testing.T, args ...string) (rlspb.RateLimitServiceClient, *grpc.ClientConn, string, func() error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	args = append([]string{"-config", dir, "-addr", "127.0.0.1:0", "-metrics", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, io.Discard, ready) }()
	var addrs [2]string
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("no shutdown within 15s")
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	return rlspb.NewRateLimitServiceClient(conn), conn, addrs[1], stop
}

func req(tenant string) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{{
		Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}}}
}

func TestCommand(t *testing.T) {
	client, conn, metrics, stop := start(t, "-headers", "ietf,legacy")
	ctx := context.Background()
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, h, err)
		}
	}
	var codes []rlspb.RateLimitResponse_Code
	for range 3 {
		r, err := client.ShouldRateLimit(ctx, req("a"))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, r.OverallCode)
		if len(r.ResponseHeadersToAdd) != 5 {
			t.Errorf("headers %v, want RateLimit-Policy, RateLimit and 3 X-RateLimit", r.ResponseHeadersToAdd)
		}
	}
	if codes[0] != rlspb.RateLimitResponse_OK || codes[1] != rlspb.RateLimitResponse_OK || codes[2] != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("codes %v, want OK OK OVER_LIMIT", codes)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range []string{`ratelimit_service_rate_limit_total_hits{domain="edge",key="tenant"} 3`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key="tenant"} 1`, `ratelimit_service_config_load_success 1`} {
		if !strings.Contains(string(body), w) {
			t.Errorf("metrics lack %q:\n%s", w, body)
		}
	}
	// A call in flight at shutdown finishes; then the server is gone.
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := client.ShouldRateLimit(ctx, req("a")); err == nil {
		t.Error("a call after shutdown succeeded")
	}
}

// startRedis starts a redis-server of the test's own, to be killed.
func startRedis(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for range 300 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, cmd
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("redis-server did not start")
	return "", nil
}

// With Redis away, the failure policy decides.
func TestRedisAway(t *testing.T) {
	for _, tc := range []struct {
		failure string
		code    codes.Code
		overall rlspb.RateLimitResponse_Code
	}{
		{"error", codes.Unavailable, 0},
		{"open", codes.OK, rlspb.RateLimitResponse_OK},
		{"closed", codes.OK, rlspb.RateLimitResponse_OVER_LIMIT},
		{"local", codes.OK, rlspb.RateLimitResponse_OK},
	} {
		t.Run(tc.failure, func(t *testing.T) {
			addr, redis := startRedis(t)
			client, _, _, _ := start(t, "-redis", addr, "-redis-failure", tc.failure, "-redis-timeout", "5s") // a loaded test machine
			if r, err := client.ShouldRateLimit(context.Background(), req("a")); err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
				t.Fatalf("with Redis up: %v %v", r, err)
			}
			redis.Process.Kill()
			redis.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := client.ShouldRateLimit(ctx, req("a"))
			if status.Code(err) != tc.code || (err == nil && r.OverallCode != tc.overall) {
				t.Fatalf("%v %v, want %v %v", r, err, tc.code, tc.overall)
			}
		})
	}
}

func TestRedis(t *testing.T) {
	addr := os.Getenv("FLOODGATE_REDIS_ADDR")
	if addr == "" {
		t.Fatal("FLOODGATE_REDIS_ADDR is not set: run scripts/redis.sh start and export what it prints (scripts/test.sh does)")
	}
	prefix := "rlscmd:" + time.Now().Format("150405.000000") + ":"
	client, _, _, _ := start(t, "-redis", addr, "-redis-prefix", prefix, "-redis-timeout", "5s")
	var got []rlspb.RateLimitResponse_Code
	for range 3 {
		r, err := client.ShouldRateLimit(context.Background(), req("r"))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.OverallCode)
	}
	if got[2] != rlspb.RateLimitResponse_OVER_LIMIT || got[1] != rlspb.RateLimitResponse_OK {
		t.Fatalf("codes %v", got)
	}
}

// Every flag is checked at startup: values that could only fail later
// (-nodes 0 fails only once Redis is away) and flags that would be
// ignored (-redis-failure, -nodes without Redis) are refused.
func TestFlagsCheckedAtStartup(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis", "127.0.0.1:1", "-redis-failure", "local", "-nodes", "0"}, "-nodes 0"},
		{[]string{"-redis", "127.0.0.1:1", "-redis-failure", "local", "-nodes", "-3"}, "-nodes -3"},
		{[]string{"-nodes", "0"}, "-nodes 0"},
		{[]string{"-redis-failure", "fail"}, "unknown \"fail\""},
		{[]string{"-redis-failure", "closed"}, "-redis-failure needs -redis"},
		{[]string{"-nodes", "3"}, "-nodes needs -redis"},
		{[]string{"-redis-timeout", "1s"}, "-redis-timeout needs -redis"},
		{[]string{"-redis", "127.0.0.1:1", "-nodes", "3"}, "-nodes applies only with -redis-failure local"},
		{[]string{"-redis", "127.0.0.1:1", "-redis-timeout", "0s"}, "-redis-timeout 0s"},
		{[]string{"-shutdown-timeout", "-1s"}, "-shutdown-timeout"},
		{[]string{"-redis-cluster", "127.0.0.1:1,"}, "an empty address"},
		{[]string{"-redis", "127.0.0.1:1", "-redis-cluster", "127.0.0.1:2"}, "choose one"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, append([]string{"-config", dir, "-addr", "127.0.0.1:0"}, tc.args...), io.Discard, nil)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
