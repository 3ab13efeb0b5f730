// Command quickstart is floodgate's first demo: a keyed token bucket on the
// embedded in-memory store, deciding for a few clients and printing every
// decision the way a person (or a 429 response) would read it.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -redis 127.0.0.1:6379   # the same, on Redis
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
	"github.com/redis/rueidis"
)

func main() {
	redisAddr := flag.String("redis", "", "run on this Redis server (host:port) instead of the in-memory store")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer, redisAddr string) error {
	// 1. A store. The embedded default keeps state in this process; Redis
	//    shares it across a fleet. Nothing else changes.
	var s store.Store
	if redisAddr == "" {
		ms, err := memstore.New()
		if err != nil {
			return err
		}
		defer ms.Close()
		s = ms
		fmt.Fprintln(w, "store: in-memory (memstore)")
	} else {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
		if err != nil {
			return fmt.Errorf("connect to Redis: %w", err)
		}
		defer client.Close()
		rs, err := redisstore.New(client, redisstore.WithPrefix("floodgate-quickstart:"))
		if err != nil {
			return err
		}
		s = rs
		fmt.Fprintf(w, "store: Redis at %s\n", redisAddr)
	}

	// 2. A policy: every client may make 10 requests per second, with bursts
	//    of up to 3 at once.
	perClient, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 3})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "policy: 10 requests per second per client, burst 3")
	fmt.Fprintln(w)

	// 3. Decisions. alice sends 5 requests at once: the burst passes, the
	//    rest are told exactly when to come back. bob has his own budget.
	fmt.Fprintln(w, "alice sends 5 requests at once:")
	var retry time.Duration
	for i := 1; i <= 5; i++ {
		d, err := perClient.Take(ctx, "alice", 1)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  request %d: %s\n", i, describe(d))
		if !d.Allowed {
			retry = d.RetryAfter
		}
	}
	fmt.Fprintln(w, "bob sends 1 request:")
	d, err := perClient.Take(ctx, "bob", 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  request 1: %s\n", describe(d))

	// 4. alice honours Retry-After and is admitted.
	fmt.Fprintf(w, "alice waits the Retry-After (%s) and tries again:\n", roundMs(retry))
	time.Sleep(retry)
	d, err = perClient.Take(ctx, "alice", 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  request 6: %s\n", describe(d))

	// 5. Or let floodgate.Wait do the waiting (it fails fast when the wait
	//    would pass the context's deadline, and charges nothing then).
	fmt.Fprintln(w, "alice uses floodgate.Wait for a request of cost 2:")
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d, err = floodgate.Wait(wctx, perClient, "alice", 2)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  admitted after waiting about %s: %s\n", roundMs(time.Since(start)).Round(50*time.Millisecond), describe(d))

	// 6. Two limits at once: 10/s AND 20/min; nothing is consumed from one
	//    when the other says no.
	perMinute, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerMinute(20), Burst: 4})
	if err != nil {
		return err
	}
	both, err := floodgate.All(perClient, perMinute)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "carol, under 10/s (burst 3) AND 20/min (burst 4), sends 3 requests, pauses 300ms, sends 3 more:")
	for i := 1; i <= 6; i++ {
		if i == 4 {
			time.Sleep(300 * time.Millisecond)
		}
		d, err := both.Take(ctx, "carol", 1)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  request %d: %s\n", i, describe(d))
	}
	return nil
}

// describe prints a decision the way the response headers would carry it.
func describe(d floodgate.Decision) string {
	if d.Allowed {
		return fmt.Sprintf("allowed (remaining %d of %d, full again in %s)", d.Remaining, d.Limit, roundMs(d.ResetAfter))
	}
	return fmt.Sprintf("DENIED  (429, retry after %s, remaining %d of %d)", roundMs(d.RetryAfter), d.Remaining, d.Limit)
}

func roundMs(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
