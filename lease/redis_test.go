package lease_test

import (
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
// $FLOODGATE_REDIS_CLUSTER (comma-separated seeds), or the one
// redistest.Cluster starts for the package's tests.
func clusterClient(t *testing.T) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: redistest.Cluster(t), DisableCache: true})
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
