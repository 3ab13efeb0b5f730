package redistest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) {
	code := m.Run()
	StopCluster()
	os.Exit(code)
}

// Without FLOODGATE_REDIS_CLUSTER, Cluster starts three masters of its own
// that share all slots: keys of many slots are written and read through a
// cluster client, and every node holds some of them. A second call
// returns the same cluster.
func TestClusterStartsItsOwn(t *testing.T) {
	t.Setenv(ClusterEnv, "")
	seeds := Cluster(t)
	if len(seeds) != 3 {
		t.Fatalf("seeds %v, want 3", seeds)
	}
	if again := Cluster(t); fmt.Sprint(again) != fmt.Sprint(seeds) {
		t.Fatalf("second call %v, first %v", again, seeds)
	}
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: seeds, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 60 {
		k := fmt.Sprint("fgtest:cluster:", i)
		if err := c.Do(ctx, c.B().Set().Key(k).Value(k).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if v, err := c.Do(ctx, c.B().Get().Key(k).Build()).ToString(); err != nil || v != k {
			t.Fatalf("GET %s = %q, %v", k, v, err)
		}
	}
	for _, a := range seeds {
		n, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		size, err := n.Do(ctx, n.B().Dbsize().Build()).AsInt64()
		n.Close()
		if err != nil || size == 0 {
			t.Errorf("node %s holds %d keys (%v): the slots are not shared out", a, size, err)
		}
	}
}

// With FLOODGATE_REDIS_CLUSTER set, Cluster returns its seeds and starts
// nothing.
func TestClusterFromEnv(t *testing.T) {
	t.Setenv(ClusterEnv, "127.0.0.1:1,127.0.0.1:2")
	if got := Cluster(t); fmt.Sprint(got) != "[127.0.0.1:1 127.0.0.1:2]" {
		t.Fatalf("Cluster = %v", got)
	}
}
