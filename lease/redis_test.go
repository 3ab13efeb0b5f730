package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// redisProc is a redis-server the test started (and may kill and restart
// on the same port).
type redisProc struct {
	tb   testing.TB
	port int
	args []string // beyond the port and persistence
	dir  string
	cmd  *exec.Cmd
}

func (p *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// startRedis starts a redis-server on a free loopback port, killed when tb
// ends.
func startRedis(tb testing.TB, args ...string) *redisProc {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &redisProc{tb: tb, port: l.Addr().(*net.TCPAddr).Port, args: args, dir: tb.TempDir()}
	l.Close()
	p.start()
	tb.Cleanup(p.kill)
	return p
}

func (p *redisProc) start() {
	p.tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		p.tb.Fatal("no redis-server on PATH (scripts/redis.sh start installs it)")
	}
	p.cmd = exec.Command(path, append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(p.port), "--save", "", "--appendonly", "no"}, p.args...)...)
	p.cmd.Dir = p.dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test
	if err := p.cmd.Start(); err != nil {
		p.tb.Fatal(err)
	}
	for range 300 {
		if c, err := net.Dial("tcp", p.addr()); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.tb.Fatal("redis-server did not start")
}

// kill sends SIGKILL and reaps the process.
func (p *redisProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// redisAddr is the Redis of the tests: $FLOODGATE_REDIS_ADDR, or a
// redis-server started for tb.
func redisAddr(tb testing.TB) string {
	if a := os.Getenv(redistest.Env); a != "" {
		return a
	}
	return startRedis(tb).addr()
}

func dial(tb testing.TB, addr string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func redisClient(tb testing.TB) rueidis.Client { return dial(tb, redisAddr(tb)) }

// clusterClient is a client of the test Redis Cluster:
// $FLOODGATE_REDIS_CLUSTER (comma-separated seeds), or three
// cluster-enabled redis-servers started for t, all slots split among them.
func clusterClient(t *testing.T) rueidis.Client {
	t.Helper()
	if seeds := os.Getenv("FLOODGATE_REDIS_CLUSTER"); seeds != "" {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(seeds, ","), DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx := context.Background()
	var nodes []rueidis.Client
	var addrs []string
	for i := range 3 {
		p := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, p.addr())
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr()}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		lo, hi := i*16384/3, (i+1)*16384/3-1
		if err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE").Args(strconv.Itoa(lo), strconv.Itoa(hi)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, c)
	}
	for _, p := range addrs[1:] {
		host, port, _ := net.SplitHostPort(p)
		pn, _ := strconv.Atoi(port)
		if err := nodes[0].Do(ctx, nodes[0].B().ClusterMeet().Ip(host).Port(int64(pn)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, c := range nodes {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the test cluster did not reach cluster_state:ok")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newStore(tb testing.TB, c rueidis.Client, opts ...redisstore.Option) *redisstore.Store {
	tb.Helper()
	opts = append([]redisstore.Option{redisstore.WithPrefix("fgtest:lease:"), redisstore.WithTimeout(time.Second)}, opts...)
	st, err := redisstore.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// uniqueName is a limit name of tb's own (state and heartbeats apart
// from every other run).
func uniqueName(tb testing.TB) string {
	return fmt.Sprintf("%s-%x", strings.ReplaceAll(tb.Name(), "/", "-"), rand.Uint64())
}
