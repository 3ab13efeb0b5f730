// Command twotier shows the two tiers of a fleet-wide limit: a loose per-node
// limit at the edge (in memory, free, and it stops floods before they cost a
// Redis round trip) in front of a tight global limit shared by every node
// (Redis with -redis; an in-process shared store otherwise, standing in for
// it).
//
// The rule of thumb: set the edge at 5-10x the global limit. It then never
// denies legitimate traffic that the global tier would admit, and it caps
// what one client can throw at the shared store from one node.
//
// Two nodes serve one client here. The global policy is 10 requests per
// minute per client (burst 10); each node's edge policy is 50 per minute
// (burst 50), 5x. The headers the client sees stay honest: RateLimit lists
// both policies, and the legacy X-RateLimit-* fields and Retry-After follow
// the tighter one.
//
//	go run ./examples/twotier
//	go run ./examples/twotier -redis 127.0.0.1:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
	"github.com/redis/rueidis"
)

const (
	globalRate = 10 // per minute per client, across the fleet
	edgeFactor = 5  // the edge allows 5x the global rate, per node
)

func main() {
	redisAddr := flag.String("redis", "", "Redis server (host:port) for the global tier; in-process when empty")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

// counter is an observer counting the decisions of one tier.
type counter struct{ allowed, denied atomic.Int64 }

func (c *counter) Observe(e floodgate.Event) {
	switch e.Outcome {
	case floodgate.OutcomeAllowed:
		c.allowed.Add(1)
	case floodgate.OutcomeDenied:
		c.denied.Add(1)
	}
}

type node struct {
	url  string
	edge *counter
	srv  *http.Server
}

func run(ctx context.Context, w io.Writer, redisAddr string) error {
	// The global tier's store: shared by every node.
	var shared store.Store
	if redisAddr == "" {
		ms, err := memstore.New()
		if err != nil {
			return err
		}
		defer ms.Close()
		shared = ms
		fmt.Fprintln(w, "global tier: in-process shared store (use -redis host:port for Redis)")
	} else {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
		if err != nil {
			return err
		}
		defer client.Close()
		rs, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("floodgate-twotier-%d:", time.Now().UnixNano())))
		if err != nil {
			return err
		}
		shared = rs
		fmt.Fprintf(w, "global tier: Redis at %s\n", redisAddr)
	}
	global, err := bucket.NewKeyed(shared, bucket.Config{Rate: floodgate.PerMinute(globalRate), Burst: globalRate})
	if err != nil {
		return err
	}
	globalCount := &counter{}
	globalMW, err := httplimit.Middleware(global,
		httplimit.WithName("global"), httplimit.WithTier("global"), httplimit.WithObserver(globalCount),
		httplimit.WithPolicy(httplimit.Policy{Name: "global", Window: time.Minute}))
	if err != nil {
		return err
	}

	nodes := make([]*node, 2)
	for i := range nodes {
		// Each node's edge tier: its own memory, 5x the global rate.
		local, err := memstore.New()
		if err != nil {
			return err
		}
		defer local.Close()
		edge, err := bucket.NewKeyed(local, bucket.Config{Rate: floodgate.PerMinute(edgeFactor * globalRate), Burst: edgeFactor * globalRate})
		if err != nil {
			return err
		}
		n := &node{edge: &counter{}}
		edgeMW, err := httplimit.Middleware(edge,
			httplimit.WithName("edge"), httplimit.WithTier("edge"), httplimit.WithObserver(n.edge),
			httplimit.WithPolicy(httplimit.Policy{Name: "edge", Window: time.Minute}))
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
		n.srv = &http.Server{Handler: edgeMW(globalMW(app)), ReadHeaderTimeout: 5 * time.Second}
		go n.srv.Serve(ln)
		defer n.srv.Close()
		n.url = "http://" + ln.Addr().String() + "/"
		nodes[i] = n
	}
	fmt.Fprintf(w, "policies: global %d/min per client (burst %d); edge %d/min per client per node (burst %d), %dx\n\n",
		globalRate, globalRate, edgeFactor*globalRate, edgeFactor*globalRate, edgeFactor)

	// 1. A client spreads 14 requests over both nodes: the global limit holds
	//    across the fleet, and every response tells the truth about it.
	fmt.Fprintln(w, "one client, 14 requests alternating between node A and node B:")
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < 14; i++ {
		n := nodes[i%2]
		resp, err := client.Get(n.url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		h := resp.Header
		line := fmt.Sprintf("  %2d node %c: %d  RateLimit: %s | X-RateLimit-Remaining: %s",
			i+1, 'A'+rune(i%2), resp.StatusCode, strings.Join(h.Values("RateLimit"), ", "), h.Get("X-RateLimit-Remaining"))
		if ra := h.Get("Retry-After"); ra != "" {
			line += " | Retry-After: " + ra
		}
		fmt.Fprintln(w, line)
	}

	// 2. A flood of 200 requests at node A: the edge absorbs it in memory,
	//    so the shared store sees at most the edge's burst.
	before := globalCount.allowed.Load() + globalCount.denied.Load()
	codes := map[int]int{}
	floodStart := time.Now()
	for i := 0; i < 200; i++ {
		resp, err := client.Get(nodes[0].url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	reached := globalCount.allowed.Load() + globalCount.denied.Load() - before
	fmt.Fprintf(w, "\na flood of 200 requests at node A in %dms: %d x 200, %d x 429\n",
		time.Since(floodStart).Milliseconds(), codes[200], codes[429])
	fmt.Fprintf(w, "  edge tier of node A denied %d of them in memory; only %d reached the global store\n",
		nodes[0].edge.denied.Load(), reached)
	return nil
}
