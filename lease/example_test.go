package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
)

// inProcess is a lease.Global in memory, so that this example runs
// without Redis; in production the Global is a *redisstore.Store (see
// examples/twotier). It steps the bucket's own Go step and grant.
type inProcess struct {
	mu    sync.Mutex
	tat   map[string]int64
	nodes int
}

func (g *inProcess) Apply(_ context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, d := alg.Step(algo.State{W: [algo.MaxWords]int64{g.tat[key]}}, time.Now().UnixMicro(), n)
	g.tat[key] = s.W[0]
	return d, nil
}

func (g *inProcess) ApplyAll(context.Context, []store.Op, []floodgate.Decision, bool) (bool, error) {
	return false, errors.New("not needed here")
}

func (g *inProcess) Grant(_ context.Context, key string, alg algo.Algorithm, c algo.Claim) (algo.Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, gr := alg.(algo.Granter).Grant(g.tat[key], time.Now().UnixMicro(), c.Want, c.Least)
	g.tat[key] = w
	return gr, nil
}

func (g *inProcess) Heartbeat(context.Context, string, string, time.Duration) (int, error) {
	return g.nodes, nil
}

func (g *inProcess) Leave(context.Context, string, string) (int, error) { return g.nodes - 1, nil }

func Example() {
	ctx := context.Background()
	global := &inProcess{tat: map[string]int64{}, nodes: 1}

	// A fleet-wide 1,000/s (burst 1,000) on one API key, decided locally.
	l, err := lease.New(global, lease.Config{
		Bucket: bucket.Config{Name: "api", Rate: floodgate.PerSecond(1000), Burst: 1000},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close(ctx)
	admitted := 0
	for range 500 {
		d, err := l.Take(ctx, "key-1", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if d.Allowed {
			admitted++
		}
	}
	s := l.Stats()
	fmt.Printf("admitted %d of 500; leased: %v; calls to the global store: under 100: %v\n",
		admitted, s.Leased == 1, s.Grants+s.Direct < 100)

	// Fleet-divided mode: 4 live nodes (from the heartbeats), so this
	// node enforces 250 an hour with a burst of 250, in memory (an hourly
	// rate: nothing refills while the example runs, however slowly).
	global.nodes = 4
	d, err := lease.New(global, lease.Config{
		Bucket: bucket.Config{Name: "search", Rate: floodgate.PerHour(1000), Burst: 1000},
		Mode:   lease.Divided,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close(ctx)
	admitted = 0
	for range 500 {
		if dec, _ := d.Take(ctx, "key-1", 1); dec.Allowed {
			admitted++
		}
	}
	fmt.Printf("divided by %d nodes: admitted %d of 500\n", d.Stats().Nodes, admitted)
	// Output:
	// admitted 500 of 500; leased: true; calls to the global store: under 100: true
	// divided by 4 nodes: admitted 250 of 500
}
