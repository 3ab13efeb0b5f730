// Command twotier shows the two tiers of a fleet-wide limit: a loose
// per-node limit in memory at the edge, and the global limit in Redis,
// decided at local speed from leases (package lease): each node spends
// tokens it leased from the global bucket in batches, so a decision costs
// no round trip and the fleet still never exceeds the global rate.
//
// Two nodes (two leased limiters on one Redis, as two processes would
// have) share a global limit of 2,000 requests per second (burst 100) on
// one key. The program prints what a decision costs (leased, and a direct
// Redis decision for comparison), how many Redis calls the nodes made,
// and how close the fleet came to the global bound under a load twice the
// limit. Each node's edge (memory, 5x the global rate) stops floods before
// they reach the global tier.
//
//	go run ./examples/twotier -redis 127.0.0.1:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

const (
	globalRate  = 2000 // per second, across the fleet
	globalBurst = 100
	edgeFactor  = 5 // the edge allows 5x the global rate, per node
)

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis server (host:port) of the global tier")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

// node is one process of the fleet: its edge in memory, then the global
// limit, leased.
type node struct {
	edge   floodgate.Limiter
	global *lease.Limiter
}

// take admits a request when both tiers do (the edge first: a flood stops
// there, in memory).
func (n *node) take(ctx context.Context, key string) (bool, error) {
	if d, err := n.edge.Take(ctx, key, 1); err != nil || !d.Allowed {
		return false, err
	}
	d, err := n.global.Take(ctx, key, 1)
	return d.Allowed, err
}

func run(ctx context.Context, w io.Writer, redisAddr string) error {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("floodgate-twotier-%d:", time.Now().UnixNano())),
		redisstore.WithTimeout(time.Second)) // a demo on a laptop or a loaded CI machine; production keeps a tight timeout
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "global tier: %d/s (burst %d) on one key, leased from Redis at %s; edge: %dx per node, in memory\n",
		globalRate, globalBurst, redisAddr, edgeFactor)

	// 1. What a decision costs: leased (local) and direct (one Redis round
	//    trip), on a limit too high to deny (a burst of 100M: a loop that
	//    takes as fast as it can never drains it).
	cost := bucket.Config{Name: "twotier-cost", Rate: floodgate.PerSecond(1_000_000), Burst: 100_000_000}
	fast, err := lease.New(rs, lease.Config{Bucket: cost})
	if err != nil {
		return err
	}
	defer fast.Close(ctx)
	direct, err := bucket.NewKeyed(rs, cost)
	if err != nil {
		return err
	}
	const n = 200_000
	warm := time.Now()
	for time.Since(warm) < 200*time.Millisecond { // the key turns hot, its lease grows
		fast.Take(ctx, "warm", 1)
	}
	before := fast.Stats()
	t0 := time.Now()
	for range n {
		if _, err := fast.Take(ctx, "warm", 1); err != nil {
			return err
		}
	}
	leased := time.Since(t0) / n
	after := fast.Stats()
	const m = 2_000
	t0 = time.Now()
	for range m {
		if _, err := direct.Take(ctx, "direct", 1); err != nil {
			return err
		}
	}
	round := time.Since(t0) / m
	fmt.Fprintf(w, "\ndecision cost: leased %v, direct Redis %v (%.0fx); %d decisions cost %d Redis calls\n",
		leased, round, float64(round)/float64(max(leased, 1)), n, after.Grants+after.Direct-before.Grants-before.Direct)

	// 2. Two nodes under twice the global rate for 2s (one sends 3x what
	//    the other does): never above the bound, close to it.
	cfg := bucket.Config{Name: "twotier-global", Rate: floodgate.PerSecond(globalRate), Burst: globalBurst}
	nodes := make([]*node, 2)
	for i := range nodes {
		local, err := memstore.New()
		if err != nil {
			return err
		}
		defer local.Close()
		edge, err := bucket.NewKeyed(local, bucket.Config{Rate: floodgate.PerSecond(edgeFactor * globalRate), Burst: edgeFactor * globalBurst})
		if err != nil {
			return err
		}
		g, err := lease.New(rs, lease.Config{Bucket: cfg})
		if err != nil {
			return err
		}
		defer g.Close(ctx)
		nodes[i] = &node{edge: edge, global: g}
	}
	const d = 2 * time.Second
	var admitted, offered, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i, nd := range nodes {
		perNode := []float64{3000, 1000}[i] // requests per second
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				every := time.Duration(float64(time.Second) * 8 / perNode)
				next := start.Add(every * time.Duration(g) / 8)
				for {
					time.Sleep(time.Until(next))
					if time.Since(start) >= d {
						return
					}
					next = next.Add(every)
					ok, err := nd.take(ctx, "one-key")
					offered.Add(1)
					if err != nil {
						errs.Add(1)
					} else if ok {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if errs.Load() > 0 {
		return fmt.Errorf("%d errors", errs.Load())
	}
	bound := int64(globalBurst) + int64(globalRate*d.Seconds())
	var calls int64
	for _, nd := range nodes {
		s := nd.global.Stats()
		calls += s.Grants + s.Direct
	}
	fmt.Fprintf(w, "\ntwo nodes, %d requests in %v (twice the limit): %d admitted, global bound %d (burst + rate x time): %.1f%% of it, never above; %d Redis calls\n",
		offered.Load(), d, admitted.Load(), bound, 100*float64(admitted.Load())/float64(bound), calls)

	// 3. A flood at one node: the edge stops it in memory.
	nd := nodes[0]
	var flood, passedEdge int64
	for range 5_000 {
		flood++
		if dd, _ := nd.edge.Take(ctx, "flooder", 1); dd.Allowed {
			passedEdge++
			nd.global.Take(ctx, "flooder", 1)
		}
	}
	fmt.Fprintf(w, "\na flood of %d requests at node A: %d passed the edge (its burst), %d stopped in memory\n", flood, passedEdge, flood-passedEdge)
	return nil
}
