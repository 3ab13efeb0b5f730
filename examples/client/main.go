// Command client shows caller-side throttling: a client that budgets its own
// outgoing calls with a local token bucket, and retries the origin's 429
// answers after the Retry-After it was given (capped exponential backoff with
// full jitter as the floor), for idempotent requests only.
//
// It starts an origin on 127.0.0.1 that allows 5 requests per second per
// client, then sends 20 GETs and 1 POST from 4 workers through
// httplimit.Transport and prints what happened on the wire.
//
//	go run ./examples/client
//	go run ./examples/client -rate 4   # a local budget under the origin's limit: no 429 at all
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
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func main() {
	rate := flag.Float64("rate", 8, "the client's own budget, in requests per second")
	requests := flag.Int("n", 20, "GET requests to send")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *rate, *requests); err != nil {
		log.Fatal(err)
	}
}

// counting counts what actually goes on the wire.
type counting struct {
	base            http.RoundTripper
	sent, throttled atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	resp, err := c.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.throttled.Add(1)
	}
	return resp, err
}

func run(ctx context.Context, w io.Writer, rate float64, requests int) error {
	// The origin: 5 requests per second per client IP, bursts of 5.
	s, err := memstore.New()
	if err != nil {
		return err
	}
	defer s.Close()
	perIP, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(5), Burst: 5})
	if err != nil {
		return err
	}
	mw, err := httplimit.Middleware(perIP, httplimit.WithPolicy(floodgate.Description{Name: "per-ip", Window: time.Second}))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/items"
	fmt.Fprintf(w, "origin: %s allows 5 req/s per client (burst 5)\n", url)
	fmt.Fprintf(w, "client: own budget %.0f req/s (burst 2), retries 429 for idempotent requests, at most 4 attempts\n", rate)

	// The client: a local budget, then the network; 429s are retried.
	wire := &counting{base: http.DefaultTransport}
	tr, err := httplimit.NewTransport(wire,
		httplimit.WithThrottle(bucket.NewLimiter(bucket.Limit(rate), 2)),
		httplimit.WithMaxAttempts(4),
		httplimit.WithBackoff(50*time.Millisecond, 2*time.Second),
	)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}

	start := time.Now()
	jobs := make(chan int)
	var mu sync.Mutex
	status := map[int]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				resp, err := client.Get(url)
				mu.Lock()
				if err != nil {
					status[-1]++
				} else {
					status[resp.StatusCode]++
					resp.Body.Close()
				}
				mu.Unlock()
			}
		}()
	}
	for i := range requests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	getAttempts, getThrottled := wire.sent.Load(), wire.throttled.Load()

	// A POST is not idempotent: a 429 is handed back, never retried.
	for range 6 { // drain the origin's budget first, around the transport
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
		}
	}
	before := wire.sent.Load()
	resp, err := client.Post(url, "text/plain", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	postAttempts := wire.sent.Load() - before

	codes := make([]int, 0, len(status))
	for c := range status {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	fmt.Fprintf(w, "GET results:")
	for _, c := range codes {
		fmt.Fprintf(w, " %d x %d", status[c], c)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "on the wire: %d GET attempts for %d requests, %d answered 429 and were retried after Retry-After\n",
		getAttempts, requests, getThrottled)
	fmt.Fprintf(w, "took %.1fs (the origin's limit is the floor: %d requests at 5/s after a burst of 5)\n", elapsed.Seconds(), requests)
	fmt.Fprintf(w, "POST refused with %d after %d attempt(s): not idempotent, not retried\n", resp.StatusCode, postAttempts)
	return nil
}
