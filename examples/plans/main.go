// Command plans runs per-plan and per-service limits from a config file
// and changes them live: a file (limits.yaml) holds the policies, the plans
// and their overrides and the descriptor rules; the program serves HTTP
// through httplimit.Policies and reloads the file whenever it changes,
// keeping every key's state across the change. Internal callers send a
// service token (X-Service-Token): it is verified against the digests of
// the tokens the service accepts and mapped to the caller's service name,
// and the per-service budgets are keyed by that name, never by the token
// (see examples/servicetokens).
//
//	go run ./examples/plans              # serve on :8080, reload limits.yaml on change
//	go run ./examples/plans -demo        # a scripted run: plans, a raise, a bad file
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "plans:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("plans", flag.ContinueOnError)
	fs.SetOutput(out)
	file := fs.String("config", "examples/plans/limits.yaml", "the limits file")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	demo := fs.Bool("demo", false, "run a scripted demo on a copy of the file and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := *file
	if *demo {
		dir, err := os.MkdirTemp("", "floodgate-plans")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		path = filepath.Join(dir, "limits.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	cfg, err := policy.LoadFile(path)
	if err != nil {
		return err
	}
	// The demo runs on a clock that stands still unless the script moves
	// it, so that what it prints does not depend on the machine's speed.
	clock := &manualClock{}
	clock.ns.Store(time.Now().UnixNano())
	var memOpts []memstore.Option
	if *demo {
		memOpts = append(memOpts, memstore.WithClock(clock))
	}
	s, err := memstore.New(memOpts...)
	if err != nil {
		return err
	}
	defer s.Close()
	changes := make(chan policy.Change, 8)
	live, err := policy.NewLive(cfg, s, policy.WithOnChange(func(c policy.Change) {
		if c.Err != nil {
			fmt.Fprintf(out, "config v%d kept: %v\n", c.Version, c.Err)
		} else {
			fmt.Fprintf(out, "config v%d applied from %s: added %v, changed %v %v\n", c.Version, filepath.Base(c.Source), c.Added, c.Changed, c.Details)
		}
		select {
		case changes <- c:
		default:
		}
	}))
	if err != nil {
		return err
	}
	<-changes // the initial config
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := live.WatchFile(ctx, path); err != nil {
		return err
	}
	// The internal callers' tokens: in production, the digests come from
	// your secret store; the demo makes fresh tokens.
	tokens := map[string]string{}
	known := serviceTokens{}
	for _, svc := range []string{"purge-orchestrator", "log-shipper", "thumbnailer"} {
		tokens[svc] = "svc_" + rand.Text()
		known[sha256.Sum256([]byte(tokens[svc]))] = svc
	}
	// A service's rate limiting: the file, and this.
	origin := httplimit.ValueEntry("destination", false, func(*http.Request) string { return "image-origin" })
	limit, err := httplimit.Policies(live,
		httplimit.WithDescriptor(httplimit.HeaderEntry("X-API-Key", "api_key")),
		httplimit.WithDescriptor(origin), // the origin's own budget, every caller
		// Per service: its verified name, never its token.
		httplimit.WithDescriptor(origin, httplimit.ValueEntry("service", false, serviceOf)),
		httplimit.WithDescriptor(httplimit.ClientIPEntry("remote_address")),
	)
	if err != nil {
		return err
	}
	handler := known.authenticate(limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "image\n") })))
	listen := *addr
	if *demo {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if !*demo {
		fmt.Fprintf(out, "serving on http://%s; edit %s to change the limits\n", ln.Addr(), path)
		<-ctx.Done()
		return nil
	}
	return runDemo(out, "http://"+ln.Addr().String(), path, changes, clock, tokens)
}

// serviceTokens maps the SHA-256 digest of each accepted service token to
// its service's name: the process keeps no token.
type serviceTokens map[[sha256.Size]byte]string

type serviceKey struct{}

// authenticate verifies the X-Service-Token of a request that has one
// (401 when it is unknown), puts the service's name in the request's
// context and drops the token from the request.
func (k serviceTokens) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := r.Header.Get("X-Service-Token")
		if token == "" {
			next.ServeHTTP(w, r)
			return
		}
		name, ok := k[sha256.Sum256([]byte(token))]
		if !ok {
			http.Error(w, "unknown service token", http.StatusUnauthorized)
			return
		}
		r.Header.Del("X-Service-Token")
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serviceKey{}, name)))
	})
}

// serviceOf is the service descriptor's value: the verified service's
// name, "" for a request without a service token.
func serviceOf(r *http.Request) string {
	name, _ := r.Context().Value(serviceKey{}).(string)
	return name
}

// manualClock is the demo's clock: it moves only when the script says.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// runDemo sends bursts as several callers and changes the file live.
func runDemo(out io.Writer, base, path string, changes <-chan policy.Change, clock *manualClock, tokens map[string]string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	burst := func(label string, n int, hdr map[string]string) error {
		ok := 0
		var last *http.Response
		for range n {
			req, _ := http.NewRequest("GET", base+"/img/1.png", nil)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok++
			}
			last = resp
		}
		fmt.Fprintf(out, "%-34s %4d of %4d admitted | %s\n", label, ok, n, last.Header.Get("RateLimit-Policy"))
		return nil
	}
	for _, step := range []struct {
		label string
		n     int
		hdr   map[string]string
	}{
		{"free API key (default plan):", 15, map[string]string{"X-API-Key": "key_someone"}},
		{"pro API key (override):", 120, map[string]string{"X-API-Key": "key_pro_live_7"}},
		{"purge-orchestrator token:", 520, map[string]string{"X-Service-Token": tokens["purge-orchestrator"]}},
		{"log-shipper token:", 60, map[string]string{"X-Service-Token": tokens["log-shipper"]}},
		{"thumbnailer token (other-service):", 30, map[string]string{"X-Service-Token": tokens["thumbnailer"]}},
		{"a forged token:", 3, map[string]string{"X-Service-Token": "purge-orchestrator"}},
	} {
		if err := burst(step.label, step.n, step.hdr); err != nil {
			return err
		}
	}
	edit := func(from, to string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		select {
		case <-changes:
			return nil
		case <-time.After(3 * time.Second):
			return errors.New("the change was not picked up within 3 s")
		}
	}
	fmt.Fprintln(out, "raising pro from 100/s to 200/s in the file:")
	if err := edit("{name: pro, rate: 100/s}", "{name: pro, rate: 200/s}"); err != nil {
		return err
	}
	if err := burst("pro API key, just after:", 20, map[string]string{"X-API-Key": "key_pro_live_7"}); err != nil {
		return err
	}
	fmt.Fprintln(out, "100 ms later:")
	clock.advance(100 * time.Millisecond)
	if err := burst("pro API key, refilled at 200/s:", 30, map[string]string{"X-API-Key": "key_pro_live_7"}); err != nil {
		return err
	}
	fmt.Fprintln(out, "a bad edit (a negative rate):")
	if err := edit("{name: free, rate: 10/s}", "{name: free, rate: -10/s}"); err != nil {
		return err
	}
	return burst("free API key, still served:", 5, map[string]string{"X-API-Key": "key_other"})
}
