package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// The reference and floodgate's service answer the same requests, one
// after the other, on one Redis: every answer must be the same (the
// sequences avoid the documented differences: no request is refused while
// another of its descriptors is counted, no hits_addend crosses a limit
// with more than one unit to spare).
var conformanceConfig = `domain: %[1]s
descriptors:
  - key: database
    value: users
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: client
    value: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api_key
    rate_limit: {name: per-key, unit: hour, requests_per_unit: 2}
  - key: plan
    value: enterprise
    rate_limit:
      unit: hour
      requests_per_unit: 5
      replaces: [{name: per-key}]
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: file
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 2}
`

type step struct {
	hits uint32
	ds   []*ratelimitpb.RateLimitDescriptor
}

func d(kv ...string) *ratelimitpb.RateLimitDescriptor {
	x := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		x.Entries = append(x.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return x
}

func hits(x *ratelimitpb.RateLimitDescriptor, n uint64) *ratelimitpb.RateLimitDescriptor {
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

func override(x *ratelimitpb.RateLimitDescriptor, n uint32, u typepb.RateLimitUnit) *ratelimitpb.RateLimitDescriptor {
	x.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
	return x
}

func steps() []step {
	var s []step
	add := func(n int, h uint32, ds ...func() *ratelimitpb.RateLimitDescriptor) {
		for range n {
			var x []*ratelimitpb.RateLimitDescriptor
			for _, f := range ds {
				x = append(x, f())
			}
			s = append(s, step{h, x})
		}
	}
	add(7, 0, func() *ratelimitpb.RateLimitDescriptor { return d("database", "users") })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return d("database", "orders") })
	add(6, 0, func() *ratelimitpb.RateLimitDescriptor {
		return d("message_type", "marketing", "to_number", "2061111111")
	})
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return d("message_type", "marketing") })
	add(2, 0, func() *ratelimitpb.RateLimitDescriptor { return d("to_number", "2061111111") })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return d("to_number", "2061111111", "extra", "x") })
	add(5, 0, func() *ratelimitpb.RateLimitDescriptor { return d("remote_address", "192.0.2.1") })
	add(3, 0, func() *ratelimitpb.RateLimitDescriptor { return d("remote_address", "10.0.0.1") })
	add(3, 0, func() *ratelimitpb.RateLimitDescriptor { return d("path", "/api/users") })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return d("path", "/static/x") })
	add(3, 0, func() *ratelimitpb.RateLimitDescriptor { return d("client", "trial") })
	add(3, 0, func() *ratelimitpb.RateLimitDescriptor { return d("api_key", "k1") })
	add(6, 0, func() *ratelimitpb.RateLimitDescriptor { return d("api_key", "k2") },
		func() *ratelimitpb.RateLimitDescriptor { return d("plan", "enterprise") })
	// hits_addend: the request's, the descriptor's (0: look only).
	add(1, 4, func() *ratelimitpb.RateLimitDescriptor { return d("tenant", "t1") })
	add(1, 9, func() *ratelimitpb.RateLimitDescriptor { return hits(d("tenant", "t1"), 0) })
	add(2, 0, func() *ratelimitpb.RateLimitDescriptor { return hits(d("tenant", "t1"), 3) })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return d("tenant", "t1") })
	add(2, 0, func() *ratelimitpb.RateLimitDescriptor { return d("tenant", "t1") })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return hits(d("tenant", "t1"), 0) })
	// Several descriptors, all within their limits.
	add(3, 2, func() *ratelimitpb.RateLimitDescriptor { return d("tenant", "t2") },
		func() *ratelimitpb.RateLimitDescriptor { return d("database", "nothing") },
		func() *ratelimitpb.RateLimitDescriptor { return d("remote_address", "10.0.0.1") })
	// The request's own limit.
	add(3, 0, func() *ratelimitpb.RateLimitDescriptor {
		return override(d("tenant", "t3"), 2, typepb.RateLimitUnit_HOUR)
	})
	add(2, 0, func() *ratelimitpb.RateLimitDescriptor { return d("blocked", "x") })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return hits(d("blocked", "x"), 0) })
	// share_threshold: the values of a wildcard share one counter.
	add(2, 0, func() *ratelimitpb.RateLimitDescriptor { return d("file", "files/a.pdf") })
	add(2, 0, func() *ratelimitpb.RateLimitDescriptor { return d("file", "files/b.csv") })
	add(3, 0, func() *ratelimitpb.RateLimitDescriptor { return d("route", "/img", "method", "GET") })
	add(1, 0, func() *ratelimitpb.RateLimitDescriptor { return d("route", "/img", "method", "POST") })
	return s
}

func TestConformanceWithReference(t *testing.T) { conform(t, nil) }

// TestConformanceSettings runs the steps with the reference's settings
// that change answers, beside the service's matching options: every
// status, response header and dynamic metadata must be the same.
func TestConformanceSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		opts []rls.Option
	}{
		{"quota", []string{"QUOTA_MODE=true", "RESPONSE_DYNAMIC_METADATA=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true"},
			[]rls.Option{rls.WithGlobalQuotaMode(true), rls.WithDynamicMetadata(true), rls.WithHeaders(middleware.HeadersReference)}},
		{"local-cache", []string{"LOCAL_CACHE_SIZE_IN_BYTES=1048576", "RESPONSE_DYNAMIC_METADATA=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true"},
			[]rls.Option{rls.WithOverLimitCache(1000), rls.WithDynamicMetadata(true), rls.WithHeaders(middleware.HeadersReference)}},
	} {
		t.Run(tc.name, func(t *testing.T) { conform(t, tc.env, tc.opts...) })
	}
}

// conform runs the reference with the settings env and this service with
// opts on one Redis, sends both the steps and compares the answers.
func conform(t *testing.T, env []string, opts ...rls.Option) {
	redis := redistest.Addr(t) // $FLOODGATE_REDIS_ADDR, or a server of the test's own
	work := t.TempDir()
	domain := fmt.Sprintf("conf%d", rand.Uint64())
	cfg := fmt.Sprintf(conformanceConfig, domain)
	refDir := filepath.Join(work, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(refDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(refDir, "c.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "ratelimit")
	// Built from its module as this module requires it, outside the
	// workspace (go.work would raise its dependencies to the versions the
	// other modules need, which it does not build with).
	build := exec.Command("go", "build", "-o", bin, "github.com/envoyproxy/ratelimit/src/service_cmd")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the reference: %v\n%s", err, out)
	}
	port := freeTCPPort(t)
	ref := exec.Command(bin)
	ref.Env = append(os.Environ(), "USE_STATSD=false", "LOG_LEVEL=error", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis, "CACHE_KEY_PREFIX="+domain+":",
		"RUNTIME_ROOT="+filepath.Join(work, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(port), "HOST=127.0.0.1", "PORT="+strconv.Itoa(freeTCPPort(t)),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freeTCPPort(t)))
	ref.Env = append(ref.Env, env...)
	if err := ref.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Process.Kill(); ref.Wait() })
	refClient := client(t, "127.0.0.1:"+strconv.Itoa(port))

	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redis}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	st, err := redisstore.New(rc, redisstore.WithPrefix(domain+":fg:"), redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dom, err := rls.ParseDomain("c.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(st, rls.Config{Domains: []rls.Domain{dom}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	fgClient := client(t, lis.Addr().String())

	// Wait for the reference to serve its config.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := refClient.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitpb.RateLimitDescriptor{d("database", "probe")}})
		cancel()
		if err == nil && r != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reference does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Stay clear of a minute's end: the per-minute limit must not reset
	// between the two answers of a step.
	if s := time.Now().Second(); s > 40 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	for i, s := range steps() {
		req := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: s.hits, Descriptors: s.ds}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		want, err1 := refClient.ShouldRateLimit(ctx, req)
		got, err2 := fgClient.ShouldRateLimit(ctx, req)
		cancel()
		if err1 != nil || err2 != nil {
			t.Fatalf("step %d: reference %v, floodgate %v", i, err1, err2)
		}
		if diff := compare(want, got); diff != "" {
			t.Errorf("step %d (%v): %s\n reference %v\n floodgate %v", i, describe(req), diff, want, got)
		}
	}
}

// compare returns what differs between two answers; durations may differ
// by one second (the two calls are not at the same instant).
func compare(a, b *rlspb.RateLimitResponse) string {
	out := compareExtras(a, b)
	if a.OverallCode != b.OverallCode {
		out = append(out, fmt.Sprintf("overall_code %v vs %v", a.OverallCode, b.OverallCode))
	}
	if len(a.Statuses) != len(b.Statuses) {
		return fmt.Sprintf("%d vs %d statuses", len(a.Statuses), len(b.Statuses))
	}
	for i := range a.Statuses {
		x, y := a.Statuses[i], b.Statuses[i]
		if x.Code != y.Code || x.LimitRemaining != y.LimitRemaining {
			out = append(out, fmt.Sprintf("status %d: %v %d vs %v %d", i, x.Code, x.LimitRemaining, y.Code, y.LimitRemaining))
		}
		if (x.CurrentLimit == nil) != (y.CurrentLimit == nil) ||
			x.CurrentLimit.GetRequestsPerUnit() != y.CurrentLimit.GetRequestsPerUnit() || x.CurrentLimit.GetUnit() != y.CurrentLimit.GetUnit() ||
			x.CurrentLimit.GetName() != y.CurrentLimit.GetName() {
			out = append(out, fmt.Sprintf("status %d: current_limit %v vs %v", i, x.CurrentLimit, y.CurrentLimit))
		}
		dx, dy := x.GetDurationUntilReset().AsDuration(), y.GetDurationUntilReset().AsDuration()
		if (x.DurationUntilReset == nil) != (y.DurationUntilReset == nil) || dx-dy > time.Second || dy-dx > time.Second {
			out = append(out, fmt.Sprintf("status %d: duration_until_reset %v vs %v", i, dx, dy))
		}
	}
	return strings.Join(out, "; ")
}

func describe(r *rlspb.RateLimitRequest) string {
	var parts []string
	for _, x := range r.Descriptors {
		var es []string
		for _, e := range x.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		s := strings.Join(es, ",")
		if x.HitsAddend != nil {
			s += fmt.Sprintf(" hits=%d", x.HitsAddend.Value)
		}
		parts = append(parts, "["+s+"]")
	}
	return fmt.Sprintf("hits_addend=%d %s", r.HitsAddend, strings.Join(parts, " "))
}

func client(t *testing.T, addr string) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// compareExtras returns what differs between the response headers and the
// dynamic metadata of two answers: RateLimit-Reset may differ by one
// second; a descriptor's limit in the metadata is protobuf's text format,
// whose spacing protobuf randomises, so it is compared without spaces.
func compareExtras(a, b *rlspb.RateLimitResponse) []string {
	var out []string
	ha, hb := headerMap(a), headerMap(b)
	if len(ha) != len(hb) {
		out = append(out, fmt.Sprintf("headers %v vs %v", ha, hb))
	}
	for k, va := range ha {
		vb, ok := hb[k]
		x, _ := strconv.Atoi(va)
		y, _ := strconv.Atoi(vb)
		if !ok || (va != vb && !(k == "RateLimit-Reset" && x-y <= 1 && y-x <= 1)) {
			out = append(out, fmt.Sprintf("header %s: %q vs %q", k, va, vb))
		}
	}
	ma, mb := normalise(a.GetDynamicMetadata().AsMap()), normalise(b.GetDynamicMetadata().AsMap())
	if fmt.Sprint(ma) != fmt.Sprint(mb) {
		out = append(out, fmt.Sprintf("dynamic_metadata %v vs %v", ma, mb))
	}
	return out
}

func headerMap(r *rlspb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

// normalise removes the spaces of the metadata's descriptor limits.
func normalise(m map[string]any) map[string]any {
	ds, _ := m["descriptors"].([]any)
	for _, d := range ds {
		if dm, ok := d.(map[string]any); ok {
			if l, ok := dm["limit"].(string); ok {
				dm["limit"] = strings.ReplaceAll(l, " ", "")
			}
		}
	}
	return m
}
