package redistest

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
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ClusterEnv names the variable that holds the seeds of the test Redis
// Cluster, comma-separated (scripts/redis.sh start exports it).
const ClusterEnv = "FLOODGATE_REDIS_CLUSTER"

var cluster struct {
	once  sync.Once
	seeds []string
	err   error
	procs []*exec.Cmd
	dirs  []string
}

// Cluster returns the seeds of the Redis Cluster of the tests: those of
// $FLOODGATE_REDIS_CLUSTER, or else three cluster-enabled redis-servers
// (3 masters, no replica, the slots split in three) started on first use
// on free loopback ports (see [PortsEnv]) and shared by every test of the
// process. [StopCluster] stops them (call it from TestMain); on Linux they
// are killed with the test process in any case. Cluster fails t when
// redis-server is missing or the cluster does not form.
func Cluster(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(ClusterEnv); v != "" {
		return strings.Split(v, ",")
	}
	cluster.once.Do(func() {
		lo, hi := portRange(t)
		cluster.seeds, cluster.err = startCluster(lo, hi)
		if cluster.err != nil {
			StopCluster()
		}
	})
	if cluster.err != nil {
		t.Fatalf("starting a Redis Cluster for the tests (or set %s): %v", ClusterEnv, cluster.err)
	}
	return cluster.seeds
}

// StopCluster kills the servers [Cluster] started, if any, and removes
// their directories.
func StopCluster() {
	for _, c := range cluster.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	for _, d := range cluster.dirs {
		os.RemoveAll(d)
	}
	cluster.procs, cluster.dirs = nil, nil
}

func startCluster(lo, hi int) ([]string, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no redis-server on PATH (apt-get install redis-server)")
	}
	var seeds []string
	for range 3 {
		addr, err := startClusterNode(path, lo, hi)
		if err != nil {
			return nil, err
		}
		seeds = append(seeds, addr)
	}
	ctx := context.Background()
	nodes := make([]rueidis.Client, len(seeds))
	for i, a := range seeds {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		nodes[i] = c
		first, last := i*16384/len(seeds), (i+1)*16384/len(seeds)-1
		if err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE").Args(strconv.Itoa(first), strconv.Itoa(last)).Build()).Error(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", a, err)
		}
	}
	for _, a := range seeds[1:] {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		if err := nodes[0].Do(ctx, nodes[0].B().ClusterMeet().Ip(host).Port(int64(p)).Build()).Error(); err != nil {
			return nil, fmt.Errorf("CLUSTER MEET %s: %w", a, err)
		}
	}
	for range 400 { // 20 s
		ok := true
		for _, c := range nodes {
			info, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			return seeds, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, errors.New("the cluster did not reach cluster_state:ok in 20s")
}

// startClusterNode starts one cluster-enabled redis-server on a free port
// in [lo, hi] whose bus port (+10000) is free too, in a directory of its
// own (its nodes.conf), and waits until it answers.
func startClusterNode(path string, lo, hi int) (string, error) {
	for range 50 {
		port := lo + rand.IntN(hi-lo+1)
		if !free(port) || !free(port+10000) {
			continue
		}
		dir, err := os.MkdirTemp("", "floodgate-cluster-")
		if err != nil {
			return "", err
		}
		cluster.dirs = append(cluster.dirs, dir)
		cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		cmd.Dir = dir
		killWithParent(cmd)
		if err := cmd.Start(); err != nil {
			return "", err
		}
		cluster.procs = append(cluster.procs, cmd)
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
		if s.answers() {
			return s.Addr, nil
		}
		// The port was taken meanwhile: another server answers there.
	}
	return "", errors.New("no cluster node started on a free port")
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
