// Package redistest connects the tests to the Redis servers of the test
// setup: the server at FLOODGATE_REDIS_ADDR and the cluster at
// FLOODGATE_REDIS_CLUSTER, which scripts/redis.sh start exports; without
// them it starts servers of the tests' own ([Addr], [Cluster]), so that
// go test needs nothing but redis-server on PATH. Tests only.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// Env names the variable that holds the server's address.
const Env = "FLOODGATE_REDIS_ADDR"

// Addr returns the address of the Redis server of the tests: the one at
// $FLOODGATE_REDIS_ADDR (scripts/redis.sh start exports it), or else a
// redis-server started for t on a free loopback port and stopped when t
// ends. It fails t when there is neither.
func Addr(t *testing.T) string {
	t.Helper()
	if a := os.Getenv(Env); a != "" {
		return a
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("no %s and no redis-server: run scripts/redis.sh start (it installs Redis when missing)", Env)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for range 200 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("redis-server did not start")
	return ""
}

// Client returns a client of [Addr]'s server, closed when t ends.
func Client(t *testing.T) rueidis.Client {
	t.Helper()
	addr := Addr(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("connect to Redis at %s: %v", addr, err)
	}
	t.Cleanup(client.Close)
	return client
}

// Stores returns a function that makes an empty Redis store (a key prefix
// of its own) on [Addr]'s server, for storetest.RunAlgorithm and
// storetest.RunEquivalence. The client is closed when t ends.
func Stores(t *testing.T) func(t *testing.T) store.Store {
	t.Helper()
	client := Client(t)
	return func(t *testing.T) store.Store {
		t.Helper()
		name := strings.NewReplacer("/", ":", "{", "(", "}", ")").Replace(t.Name())
		s, err := redisstore.New(client,
			redisstore.WithPrefix(fmt.Sprintf("fgtest:%s:%d:", name, rand.Uint64())),
			redisstore.WithTimeout(5*time.Second)) // a loaded test machine
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// PortsEnv names the variable that bounds the ports of the servers
// [Start] starts ("lo-hi", e.g. "38000-38999"); without it they are picked
// in 10000-21999, below Linux's ephemeral range (a client reconnecting to a
// killed server on an ephemeral port can be handed that very port as its
// source port, which keeps the server from binding it again).
const PortsEnv = "FLOODGATE_TEST_PORTS"

// Server is a redis-server of one test, which the test may kill.
type Server struct {
	// Addr is the server's address, 127.0.0.1:port.
	Addr string
	cmd  *exec.Cmd
}

// Start starts a redis-server for t on a free loopback port (see
// [PortsEnv]) and kills it when t ends. It fails t when redis-server is
// missing or does not start.
func Start(t testing.TB) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("no redis-server: run scripts/redis.sh start (it installs Redis when missing)")
	}
	lo, hi := portRange(t)
	for range 50 {
		port := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port)}
		s.cmd = exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Kill)
		if s.answers() {
			return s
		}
		s.Kill() // the port was taken meanwhile: another server answers there
	}
	t.Fatal("no redis-server started on a free port")
	return nil
}

func portRange(t testing.TB) (lo, hi int) {
	v := os.Getenv(PortsEnv)
	if v == "" {
		return 10000, 21999
	}
	a, b, ok := strings.Cut(v, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi < lo {
		t.Fatalf("%s=%q: want lo-hi", PortsEnv, v)
	}
	return lo, hi
}

// answers reports whether the server at s.Addr answers and is s's own
// process (INFO's process_id), not one another test started on the port.
func (s *Server) answers() bool {
	want := "process_id:" + strconv.Itoa(s.cmd.Process.Pid) + "\r\n"
	for range 200 {
		if info, err := Info(s.Addr); err == nil {
			return strings.Contains(info, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Info returns the reply of INFO server from the Redis server at addr,
// over a plain connection.
func Info(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO: reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// Kill kills the server (SIGKILL) and waits for it; a killed server stays
// dead. Kill is idempotent.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
