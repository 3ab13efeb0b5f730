// Command servicetokens limits internal callers by the service their token
// belongs to, never by the token: the safe path for service tokens.
//
//  1. Verify the token first: the process holds only the SHA-256 digests
//     of the tokens it accepts (from your secret store), never a token.
//  2. Map it to the service's name, and drop the token from the request.
//  3. Limit by the name: every token of a service (the old and the new one
//     during a rotation, one per replica) spends one budget, and a store,
//     an observer or a log sees "billing", never a credential.
//
// An unknown token is refused (401) before the limiter, behind a per-IP
// limit that keeps a token-guessing client from costing more than that.
//
//	go run ./examples/servicetokens          # serve on 127.0.0.1:8080 (tokens printed once)
//	go run ./examples/servicetokens -demo    # a scripted run: a rotation, a second service, a forged token
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/observer/slogobserver"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "servicetokens:", err)
		os.Exit(1)
	}
}

// services maps the SHA-256 digest of each accepted token to the name of
// the service it belongs to. Tokens are random (128 bits or more), so a
// digest cannot be turned back into one; it is all the process keeps.
type services map[[sha256.Size]byte]string

// parseServices reads "hex-digest service-name" lines, as a secret store
// would hand them out (`printf %s "$TOKEN" | sha256sum`).
func parseServices(text string) (services, error) {
	s := services{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		digest, name, ok := strings.Cut(line, " ")
		b, err := hex.DecodeString(digest)
		name = strings.TrimSpace(name)
		if !ok || err != nil || len(b) != sha256.Size || name == "" {
			return nil, fmt.Errorf("line %d: want a hex SHA-256 digest and a service name", i+1)
		}
		s[[sha256.Size]byte(b)] = name
	}
	return s, nil
}

// verify returns the service of the request's bearer token.
func (s services) verify(r *http.Request) (string, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", false
	}
	name, ok := s[sha256.Sum256([]byte(token))]
	return name, ok
}

type serviceKey struct{}

// authenticate verifies the token, puts the service's name (not the
// token) in the request's context, and removes the token from the request:
// nothing after it can key, log or forward it.
func authenticate(s services, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := s.verify(r)
		if !ok {
			http.Error(w, "unknown service token", http.StatusUnauthorized)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), serviceKey{}, name))
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// serviceOf is the limit's key: the verified service's name.
func serviceOf(r *http.Request) string {
	name, _ := r.Context().Value(serviceKey{}).(string)
	return name
}

// newHandler is the service: a per-IP limit, then authentication, then
// the per-service limit, then app. obs sees every decision of both limits.
func newHandler(s services, st store.Store, obs floodgate.Observer, app http.Handler) (http.Handler, error) {
	perIP, err := bucket.NewKeyed(st, bucket.Config{Name: "per-ip", Rate: floodgate.PerSecond(20), Burst: 40})
	if err != nil {
		return nil, err
	}
	perService, err := bucket.NewKeyed(st, bucket.Config{Name: "per-service", Rate: floodgate.PerMinute(60), Burst: 5})
	if err != nil {
		return nil, err
	}
	ipLimit, err := httplimit.Middleware(perIP, httplimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	serviceLimit, err := httplimit.Middleware(perService, httplimit.WithKeyFunc(serviceOf),
		httplimit.WithKeyPrefix("service"), httplimit.WithObserver(obs))
	if err != nil {
		return nil, err
	}
	return ipLimit(authenticate(s, serviceLimit(app))), nil
}

// newToken returns a random token and the line that registers its digest.
func newToken(service string) (token, line string) {
	token = "svc_" + rand.Text()
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:]) + " " + service
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("servicetokens", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	demo := fs.Bool("demo", false, "run a scripted demo and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// In production the digests come from your secret store; here, fresh
	// tokens: billing has two (a rotation in progress), search one.
	tokens := map[string][]string{}
	var lines []string
	for _, svc := range []string{"billing", "billing", "search"} {
		tok, line := newToken(svc)
		tokens[svc] = append(tokens[svc], tok)
		lines = append(lines, line)
	}
	reg, err := parseServices(strings.Join(lines, "\n"))
	if err != nil {
		return err
	}
	st, err := memstore.New()
	if err != nil {
		return err
	}
	defer st.Close()
	obs, err := slogobserver.New(slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	h, err := newHandler(reg, st, obs, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", serviceOf(r))
	}))
	if err != nil {
		return err
	}
	listen := *addr
	if *demo {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	if !*demo {
		fmt.Fprintf(out, "serving on %s; try: curl -H 'Authorization: Bearer %s' %s/\n", base, tokens["billing"][0], base)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		<-ctx.Done()
		return nil
	}
	return runDemo(out, base, tokens)
}

// runDemo calls as billing with each of its two tokens, as search, and
// with a forged token, and prints what each got.
func runDemo(out io.Writer, base string, tokens map[string][]string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	call := func(label, token string, n int) error {
		codes := map[int]int{}
		for range n {
			req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[resp.StatusCode]++
		}
		fmt.Fprintf(out, "%-30s %d calls: %d admitted, %d refused (429), %d unauthenticated (401)\n",
			label, n, codes[http.StatusOK], codes[http.StatusTooManyRequests], codes[http.StatusUnauthorized])
		return nil
	}
	fmt.Fprintln(out, "billing's budget is 5 at once, 60 a minute, whichever token it uses:")
	for _, step := range []struct {
		label, token string
		n            int
	}{
		{"billing, old token:", tokens["billing"][0], 4},
		{"billing, new token:", tokens["billing"][1], 4},
		{"search:", tokens["search"][0], 4},
		{"a forged token:", "svc_" + strings.Repeat("A", 26), 3},
	} {
		if err := call(step.label, step.token, step.n); err != nil {
			return err
		}
	}
	return nil
}
