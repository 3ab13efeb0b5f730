package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The tests run against real servers of their own: TestMain starts a
// redis-server and a 3-master cluster on free loopback ports, and stops
// them at the end. They do not use the servers scripts/redis.sh exports
// (FLOODGATE_REDIS_ADDR, FLOODGATE_REDIS_CLUSTER) unless
// FLOODGATE_REDISSTORE_SHARED=1: several tests count the writes and script
// calls the servers ran (INFO commandstats), which the tests of the other
// packages, run by go test at the same time on the shared servers, would
// disturb. The fault tests always start (and kill) servers of their own.
const (
	envSingle  = "FLOODGATE_REDIS_ADDR"
	envCluster = "FLOODGATE_REDIS_CLUSTER"
	envChild   = "FLOODGATE_REDISSTORE_CHILD"
)

var (
	singleAddr   string
	clusterAddrs []string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	if os.Getenv(envChild) != "" {
		singleAddr = os.Getenv(envSingle)
		return m.Run()
	}
	if os.Getenv("FLOODGATE_REDISSTORE_SHARED") == "1" {
		singleAddr = os.Getenv(envSingle)
		if c := os.Getenv(envCluster); c != "" {
			clusterAddrs = strings.Split(c, ",")
		}
	}
	var procs []*redisProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	if singleAddr == "" {
		p, err := startRedis(0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "redisstore tests:", err)
			return 1
		}
		procs = append(procs, p)
		singleAddr = p.addr
	}
	if len(clusterAddrs) == 0 {
		ps, err := startCluster()
		procs = append(procs, ps...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "redisstore tests:", err)
			return 1
		}
		for _, p := range ps {
			clusterAddrs = append(clusterAddrs, p.addr)
		}
	}
	// The examples read the addresses from the environment, like a program
	// would.
	os.Setenv(envSingle, singleAddr)
	os.Setenv(envCluster, strings.Join(clusterAddrs, ","))
	return m.Run()
}

// redisProc is a redis-server started by the tests (never daemonized: it is
// our child, killed with us).
type redisProc struct {
	cmd  *exec.Cmd
	port int
	addr string
	dir  string
	args []string
}

func redisServerPath() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found in PATH: install it (apt-get install redis-server) or run scripts/redis.sh start and export FLOODGATE_REDIS_ADDR / FLOODGATE_REDIS_CLUSTER")
	}
	return p, nil
}

// freePort returns a loopback port that is free now (in
// $FLOODGATE_TEST_PORTS when set), and whose cluster bus
// port (+10000) is free as well. Both stay below Linux's ephemeral range
// (32768 and up): a client reconnecting to a killed server on an ephemeral
// port can be handed that very port as its own source port (a TCP
// self-connect), which then keeps the server from binding it on restart.
// FLOODGATE_TEST_PORTS=lo-hi picks the port in [lo, hi] instead (on a
// machine shared by several test runs), checking that port only.
func freePort() (int, error) {
	lo, n, bus := 10000, 12000, []int{0, 10000}
	if r := os.Getenv("FLOODGATE_TEST_PORTS"); r != "" {
		a, b, _ := strings.Cut(r, "-")
		l, err1 := strconv.Atoi(a)
		h, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || h < l {
			return 0, fmt.Errorf("FLOODGATE_TEST_PORTS=%q: want lo-hi", r)
		}
		lo, n, bus = l, h-l+1, []int{0}
	}
	for range 100 {
		p := lo + rand.IntN(n)
		ok := true
		for _, d := range bus {
			q := p + d
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("no free port pair found")
}

// startRedis starts a redis-server on a free port (or on port when > 0).
func startRedis(port int, extra ...string) (*redisProc, error) {
	bin, err := redisServerPath()
	if err != nil {
		return nil, err
	}
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "floodgate-redisstore-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	p := &redisProc{port: port, addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, args: args}
	if err := p.start(bin); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *redisProc) start(bin string) error {
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not start: %s", p.addr, log)
}

// kill sends SIGKILL to the server's PID and waits for it.
func (p *redisProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		p.cmd = nil
	}
}

// restart starts the server again on the same port.
func (p *redisProc) restart() error {
	bin, err := redisServerPath()
	if err != nil {
		return err
	}
	return p.start(bin)
}

func (p *redisProc) stop() {
	p.kill()
	os.RemoveAll(p.dir)
}

// startCluster starts 3 cluster-enabled servers and joins them into a
// cluster with all 16384 slots split among the three masters.
func startCluster() ([]*redisProc, error) {
	var ps []*redisProc
	for i := range 3 {
		p, err := startRedis(0, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
		_ = i
	}
	ctx := context.Background()
	var clients []rueidis.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, p := range ps {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			return ps, err
		}
		clients = append(clients, c)
	}
	for i, c := range clients {
		lo, hi := i*16384/3, (i+1)*16384/3-1
		if err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE").Args(strconv.Itoa(lo), strconv.Itoa(hi)).Build()).Error(); err != nil {
			return ps, fmt.Errorf("cluster addslotsrange: %w", err)
		}
	}
	for _, p := range ps[1:] {
		c := clients[0]
		if err := c.Do(ctx, c.B().ClusterMeet().Ip("127.0.0.1").Port(int64(p.port)).Build()).Error(); err != nil {
			return ps, fmt.Errorf("cluster meet: %w", err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for _, c := range clients {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				ok = false
				break
			}
		}
		if ok {
			return ps, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ps, errors.New("the test cluster did not reach cluster_state:ok")
}

func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("connect to %v: %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// uniquePrefix gives every test its own key space.
func uniquePrefix(t testing.TB) string {
	name := strings.NewReplacer("/", ":", "{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("fgtest:%s:%d:", name, rand.Uint64())
}

// targets are the servers every functional test runs against.
func targets(t *testing.T) map[string]rueidis.Client {
	return map[string]rueidis.Client{
		"single":  newClient(t, singleAddr),
		"cluster": newClient(t, clusterAddrs...),
	}
}
