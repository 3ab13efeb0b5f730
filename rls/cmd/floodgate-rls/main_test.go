package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/redistest"
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
	return startLog(t, io.Discard, args...)
}

// startLog is start with the command's log written to logw.
func startLog(t *testing.T, logw io.Writer, args ...string) (rlspb.RateLimitServiceClient, *grpc.ClientConn, string, func() error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	args = append([]string{"-config", dir, "-addr", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-shutdown-drain", "0s"}, args...)
	go func() { done <- run(ctx, args, logw, ready) }()
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
	addr := redistest.Addr(t) // $FLOODGATE_REDIS_ADDR, or a server of the test's own
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
		{[]string{"-redis", "127.0.0.1:1", "-redis-failure", "error", "-nodes", "3"}, "-nodes applies only with -redis-failure local"},
		{[]string{"-redis", "127.0.0.1:1", "-redis-timeout", "0s"}, "-redis-timeout 0s"},
		{[]string{"-shutdown-timeout", "-1s"}, "-shutdown-timeout"},
		{[]string{"-redis-cluster", "127.0.0.1:1,"}, "an empty address"},
		{[]string{"-redis", "127.0.0.1:1", "-redis-cluster", "127.0.0.1:2"}, "choose one"},
		{[]string{"-over-limit-cache", "-1"}, "-over-limit-cache -1"},
		{[]string{"-headers", "ietf,envoy"}, "unknown group \"envoy\""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, append([]string{"-config", dir, "-addr", "127.0.0.1:0"}, tc.args...), io.Discard, nil)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the command's log and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// With Redis away, open answers OK with nothing that makes a client wait
// (no limit, no reset, no headers) and closed OVER_LIMIT without a made-up
// reset; the outage is logged once when it starts and once when it ends,
// and every call answered by the failure mode is counted.
func TestRedisOutageAnswersAndVisibility(t *testing.T) {
	for _, mode := range []string{"error", "open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			addr, redis := startRedis(t)
			var logb syncBuffer
			args := []string{"-redis", addr, "-redis-failure", mode, "-redis-timeout", "2s", "-headers", "ietf,legacy"}
			client, _, maddr, _ := startLog(t, &logb, args...)
			if !strings.Contains(logb.String(), "store=\"redis "+addr+"\" redis_failure="+mode) {
				t.Errorf("the startup log does not name the store and the failure mode:\n%s", logb.String())
			}
			if _, err := client.ShouldRateLimit(context.Background(), req("a")); err != nil {
				t.Fatal(err)
			}
			redis.Process.Kill()
			redis.Wait()
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := client.ShouldRateLimit(ctx, req("a"))
				cancel()
				switch mode {
				case "error":
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("%v %v, want Unavailable", r, err)
					}
				case "open":
					st := r.GetStatuses()[0]
					if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != 0 ||
						st.DurationUntilReset != nil || len(r.ResponseHeadersToAdd) != 0 {
						t.Fatalf("open: %v %v, want OK with no limit, no reset, no headers", r, err)
					}
				case "closed":
					st := r.GetStatuses()[0]
					if err != nil || r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
						st.DurationUntilReset != nil || len(r.ResponseHeadersToAdd) != 0 {
						t.Fatalf("closed: %v %v, want OVER_LIMIT with the limit, no reset, no headers", r, err)
					}
				case "local":
					if err != nil || r.GetStatuses()[0].CurrentLimit == nil {
						t.Fatalf("local: %v %v", r, err)
					}
				}
			}
			if n := strings.Count(logb.String(), "rate limit store unavailable"); n != 1 {
				t.Errorf("%d outage log lines after 3 calls, want 1:\n%s", n, logb.String())
			}
			m := scrape(t, maddr)
			if w := `floodgate_rls_store_unavailable_total{failure_mode="` + mode + `"} 3`; !strings.Contains(m, w) {
				t.Errorf("metrics lack %q:\n%s", w, m)
			}
			if mode != "local" {
				if w := `ratelimit_service_should_rate_limit_error{err_type="redis_error"} 3`; !strings.Contains(m, w) {
					t.Errorf("metrics lack %q:\n%s", w, m)
				}
			}
			// Redis back on the same port: one line says so.
			port := addr[strings.LastIndexByte(addr, ':')+1:]
			back := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
			if err := back.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { back.Process.Kill(); back.Wait() })
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(logb.String(), "rate limit store available again") {
				if time.Now().After(deadline) {
					t.Fatalf("no recovery logged:\n%s", logb.String())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				client.ShouldRateLimit(ctx, req("b"))
				cancel()
				time.Sleep(20 * time.Millisecond)
			}
			if n := strings.Count(logb.String(), "rate limit store available again"); n != 1 {
				t.Errorf("%d recovery lines, want 1", n)
			}
		})
	}
}

// SIGHUP reloads the config directory (and does not kill the process);
// at shutdown the health turns NOT_SERVING while calls are still served
// for the drain, then the server stops and says so.
func TestSIGHUPAndDrain(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var logb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", dir, "-addr", "127.0.0.1:0", "-watch=false", "-shutdown-drain", "400ms"}, &logb, ready)
	}()
	var addrs [2]string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client, hc := rlspb.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
	// 2 per hour, then 5 per hour after the SIGHUP reload (no watch).
	if err := os.WriteFile(file, []byte(strings.Replace(config, "requests_per_unit: 2", "requests_per_unit: 5", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := client.ShouldRateLimit(context.Background(), req("hup"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload after SIGHUP:\n%s", logb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logb.String(), "SIGHUP: reloading") {
		t.Errorf("the SIGHUP is not logged:\n%s", logb.String())
	}
	cancel()
	// During the drain: NOT_SERVING, and calls are still answered.
	deadline = time.Now().Add(5 * time.Second)
	for {
		h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil {
			t.Fatalf("health during the drain: %v", err)
		}
		if h.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("health never NOT_SERVING")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := client.ShouldRateLimit(context.Background(), req("drain")); err != nil {
		t.Errorf("a call during the drain: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no stop")
	}
	if !strings.Contains(logb.String(), "msg=stopped") {
		t.Errorf("no \"stopped\" logged:\n%s", logb.String())
	}
}

// With the Redis node down at startup, the command starts and answers by
// the failure mode, and decides on Redis once it is there.
func TestRedisDownAtStartup(t *testing.T) {
	for _, mode := range []string{"error", "open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
			l.Close()
			var logb syncBuffer
			client, _, _, _ := startLog(t, &logb, "-redis", "127.0.0.1:"+port, "-redis-failure", mode, "-redis-timeout", "2s")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := client.ShouldRateLimit(ctx, req("down"))
			cancel()
			switch mode {
			case "error":
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("%v %v, want Unavailable", r, err)
				}
			case "open", "local":
				if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
					t.Fatalf("%v %v, want OK", r, err)
				}
			case "closed":
				if err != nil || r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("%v %v, want OVER_LIMIT", r, err)
				}
			}
			srv := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
			// Redis decides: 2 per hour, the third call over.
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(logb.String(), "rate limit store available again") {
				if time.Now().After(deadline) {
					t.Fatalf("Redis never decided:\n%s", logb.String())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				client.ShouldRateLimit(ctx, req("probe"))
				cancel()
				time.Sleep(20 * time.Millisecond)
			}
			var codes []rlspb.RateLimitResponse_Code
			for range 3 {
				r, err := client.ShouldRateLimit(context.Background(), req("up"))
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, r.OverallCode)
			}
			if codes[1] != rlspb.RateLimitResponse_OK || codes[2] != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("codes %v once Redis is up, want OK OK OVER_LIMIT", codes)
			}
			out, err := exec.Command("redis-cli", "-p", port, "dbsize").Output()
			if err != nil || strings.TrimSpace(string(out)) == "0" {
				t.Errorf("redis dbsize %q %v: the keys should be in Redis", out, err)
			}
		})
	}
}

// With the Redis Cluster down at startup, the command starts, answers by
// the failure mode and connects in the background: once a (one-node)
// cluster is up, Redis decides.
func TestRedisClusterDownAtStartup(t *testing.T) {
	var port int
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			bus.Close()
			port = p
			break
		}
	}
	if port == 0 {
		t.Fatal("no free port pair for a cluster node")
	}
	ps := strconv.Itoa(port)
	var logb syncBuffer
	client, _, _, _ := startLog(t, &logb, "-redis-cluster", "127.0.0.1:"+ps, "-redis-failure", "local", "-redis-timeout", "2s")
	r, err := client.ShouldRateLimit(context.Background(), req("down"))
	if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK || !strings.Contains(logb.String(), "redis cluster unreachable at startup") {
		t.Fatalf("%v %v, want OK from the local fallback:\n%s", r, err, logb.String())
	}
	dir := t.TempDir()
	srv := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", ps, "--save", "", "--appendonly", "no",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--dir", dir)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := exec.Command("redis-cli", "-p", ps, "cluster", "addslotsrange", "0", "16383").CombinedOutput()
		info, _ := exec.Command("redis-cli", "-p", ps, "cluster", "info").Output()
		if strings.Contains(string(info), "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cluster: %s %s", out, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for !strings.Contains(logb.String(), "rate limit store available again") {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster never decided:\n%s", logb.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		client.ShouldRateLimit(ctx, req("probe"))
		cancel()
		time.Sleep(20 * time.Millisecond)
	}
	var codes []rlspb.RateLimitResponse_Code
	for range 3 {
		r, err := client.ShouldRateLimit(context.Background(), req("up"))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, r.OverallCode)
	}
	if codes[1] != rlspb.RateLimitResponse_OK || codes[2] != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("codes %v on the cluster, want OK OK OVER_LIMIT", codes)
	}
	out, err := exec.Command("redis-cli", "-p", ps, "dbsize").Output()
	if err != nil || strings.TrimSpace(string(out)) == "0" {
		t.Errorf("redis dbsize %q %v: the keys should be in the cluster", out, err)
	}
}

// The default failure mode keeps the limits: with Redis down and no
// -redis-failure, the command decides locally (OK here, under the limit),
// not Unavailable (which Envoy's default failure_mode_deny admits), and
// warns that -nodes is missing.
func TestDefaultFailureIsLocal(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	var logb syncBuffer
	client, _, _, _ := startLog(t, &logb, "-redis", "127.0.0.1:"+port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := client.ShouldRateLimit(ctx, req("down"))
	if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("%v %v, want OK from the local fallback", r, err)
	}
	if !strings.Contains(logb.String(), "redis_failure=local") || !strings.Contains(logb.String(), "without -nodes") {
		t.Errorf("the startup log does not say local, nor warn about -nodes:\n%s", logb.String())
	}
}

// -version needs no config and starts nothing; its line names both
// modules (their versions come from the build: see scripts/release).
func TestVersionFlag(t *testing.T) {
	if err := run(context.Background(), []string{"-version"}, io.Discard, nil); err != nil {
		t.Fatalf("-version: %v", err)
	}
	if v := versionLine(); !strings.HasPrefix(v, "floodgate-rls ") || !strings.Contains(v, "(floodgate ") {
		t.Fatalf("versionLine() = %q", v)
	}
}

// The reference's settings as flags: the global quota mode, the dynamic
// metadata, the reference's header names, the over-limit cache.
func TestReferenceSettingsFlags(t *testing.T) {
	client, _, _, _ := start(t, "-headers", "reference", "-quota-mode", "-response-dynamic-metadata", "-over-limit-cache", "10")
	var r *rlspb.RateLimitResponse
	for range 3 {
		var err error
		if r, err = client.ShouldRateLimit(context.Background(), req("q")); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Statuses[0]
	if r.OverallCode != rlspb.RateLimitResponse_OK || st.Code != rlspb.RateLimitResponse_OK || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
		t.Errorf("third call %v: want OK, the quota's status OK with nothing left and no reset", r)
	}
	h := map[string]string{}
	for _, x := range r.ResponseHeadersToAdd {
		h[x.Key] = x.Value
	}
	if h["RateLimit-Limit"] != "2" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] == "" {
		t.Errorf("headers %v, want RateLimit-Limit 2, RateLimit-Remaining 0, RateLimit-Reset", h)
	}
	if md := r.DynamicMetadata.AsMap(); md["domain"] != "edge" || len(md["quotaModeViolations"].([]any)) != 1 {
		t.Errorf("dynamic metadata %v, want domain edge and one quota violation", md)
	}
}
