// Package redistest connects the tests of the algorithm packages to the
// Redis server of the test setup: the one at FLOODGATE_REDIS_ADDR, which
// scripts/redis.sh start exports. Tests only.
package redistest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// Env names the variable that holds the server's address.
const Env = "FLOODGATE_REDIS_ADDR"

// Stores returns a function that makes an empty Redis store (a key prefix
// of its own) on the server at $FLOODGATE_REDIS_ADDR, for
// storetest.RunAlgorithm and storetest.RunEquivalence. It skips t when the
// variable is not set. The client is closed when t ends.
func Stores(t *testing.T) func(t *testing.T) store.Store {
	t.Helper()
	addr := os.Getenv(Env)
	if addr == "" {
		t.Skipf("%s is not set: no Redis to run the Lua twins on (eval \"$(scripts/redis.sh start)\")", Env)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("connect to Redis at %s: %v", addr, err)
	}
	t.Cleanup(client.Close)
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
