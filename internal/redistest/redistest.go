// Package redistest connects the tests of the algorithm packages to the
// Redis server of the test setup: the one at FLOODGATE_REDIS_ADDR, which
// scripts/redis.sh start exports. Tests only.
package redistest

import (
	"fmt"
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
