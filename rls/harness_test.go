package rls_test

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
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// The Redis tests run against real servers: $FLOODGATE_REDIS_ADDR (a
// redis-server is started for the tests when it is not set) and
// $FLOODGATE_REDIS_CLUSTER (a 3-master cluster is started for the tests
// when it is not set; scripts/redis.sh start exports both, and
// scripts/test.sh runs these tests with them).
var (
	redisOnce    sync.Once
	redisAddr    string
	redisErr     error
	clientsMu    sync.Mutex
	redisClients = map[string]rueidis.Client{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range redisClients {
		c.Close()
	}
	if redisCmd != nil {
		redisCmd.Process.Kill()
		redisCmd.Wait()
	}
	redistest.StopCluster()
	os.Exit(code)
}

var redisCmd *exec.Cmd

func singleAddr(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() {
		if a := os.Getenv("FLOODGATE_REDIS_ADDR"); a != "" {
			redisAddr = a
			return
		}
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			redisErr = fmt.Errorf("no FLOODGATE_REDIS_ADDR and no redis-server: run scripts/redis.sh start")
			return
		}
		port := 20000 + rand.IntN(10000)
		redisCmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
		if redisErr = redisCmd.Start(); redisErr != nil {
			return
		}
		redisAddr = "127.0.0.1:" + strconv.Itoa(port)
		for range 300 {
			if c, err := net.Dial("tcp", redisAddr); err == nil {
				c.Close()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		redisErr = fmt.Errorf("redis-server on %s did not start", redisAddr)
	})
	if redisErr != nil {
		t.Fatal(redisErr)
	}
	return redisAddr
}

func clusterAddrs(t testing.TB) []string {
	t.Helper()
	return redistest.Cluster(t)
}

func redisClient(t testing.TB, addrs []string) rueidis.Client {
	t.Helper()
	k := strings.Join(addrs, ",")
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if c, ok := redisClients[k]; ok {
		return c
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("connect to Redis at %s: %v", k, err)
	}
	redisClients[k] = c
	return c
}

// stores are the stores every behaviour test runs on.
var stores = []struct {
	name string
	make func(t testing.TB, clock floodgate.Clock) store.Store
}{
	{"memstore", func(t testing.TB, clock floodgate.Clock) store.Store {
		opts := []memstore.Option{}
		if clock != nil {
			opts = append(opts, memstore.WithClock(clock))
		}
		s, err := memstore.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"redis", func(t testing.TB, _ floodgate.Clock) store.Store {
		return redisStore(t, redisClient(t, []string{singleAddr(t)}))
	}},
	{"cluster", func(t testing.TB, _ floodgate.Clock) store.Store {
		return redisStore(t, redisClient(t, clusterAddrs(t)))
	}},
}

func redisStore(t testing.TB, c rueidis.Client, opts ...redisstore.Option) store.Store {
	t.Helper()
	name := strings.NewReplacer("/", ":", "{", "(", "}", ")").Replace(t.Name())
	opts = append([]redisstore.Option{redisstore.WithPrefix(fmt.Sprintf("rlstest:%s:%d:", name, rand.Uint64())),
		redisstore.WithTimeout(5 * time.Second)}, opts...)
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// server is a Service on a real gRPC server on loopback, and a client.
type server struct {
	svc    *rls.Service
	client rlspb.RateLimitServiceClient
	dir    string
}

// writeDir writes files (name -> YAML) into a fresh directory.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func serve(t *testing.T, s store.Store, files map[string]string, opts ...rls.Option) *server {
	t.Helper()
	dir := writeDir(t, files)
	cfg, err := rls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(s, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return serveService(t, svc, dir)
}

func serveService(t *testing.T, svc *rls.Service, dir string) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &server{svc: svc, client: rlspb.NewRateLimitServiceClient(conn), dir: dir}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *ratelimitpb.RateLimitDescriptor, n uint64) *ratelimitpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// call sends what Envoy sends: a domain, descriptors, hits_addend.
func (s *server) call(t *testing.T, domain string, hits uint32, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// want checks a response: its overall code and, per descriptor, "OK 4"
// (code and limit_remaining) or "OK -" (no limit) or "OVER".
func want(t *testing.T, resp *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, statuses ...string) {
	t.Helper()
	if resp.OverallCode != overall {
		t.Errorf("overall_code %v, want %v (%v)", resp.OverallCode, overall, resp)
	}
	for i, w := range statuses {
		st := resp.Statuses[i]
		var got string
		switch {
		case st.Code == over:
			got = "OVER"
		case st.CurrentLimit == nil:
			got = "OK -"
			if st.LimitRemaining != 0 {
				got = "OK unlimited"
			}
		default:
			got = "OK " + strconv.FormatUint(uint64(st.LimitRemaining), 10)
		}
		if got != w {
			t.Errorf("status %d: %s, want %s (%v)", i, got, w, st)
		}
	}
}
