package floodgate_test

import (
	"context"
	"crypto/sha256"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/observer/promobserver"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/priority"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/shadow/shadowprom"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The functions below hold every Go code block of README.md, verbatim (one
// tab of indentation removed): TestReadmeSnippets fails when a README block
// is not found here, so every block in the README compiles.

func readmeQuickstart(ctx context.Context, w http.ResponseWriter, clientIP string) error {
	s, err := memstore.New()
	if err != nil {
		return err
	}
	defer s.Close()

	perClient, err := bucket.NewKeyed(s, bucket.Config{Name: "per-client", Rate: floodgate.PerSecond(10), Burst: 3})
	if err != nil {
		return err
	}

	d, err := perClient.Take(ctx, clientIP, 1)
	switch {
	case err != nil:
		// The limiter could not decide (store down, context done): your fail mode.
	case !d.Allowed:
		// Denied: tell the caller when to come back.
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.RetryAfter.Seconds()))))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
	default:
		// Admitted: d.Remaining of d.Limit left, full again in d.ResetAfter.
	}
	return nil
}

func readmeRedis(ctx context.Context, local *memstore.Store) error {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}, // one node, or Cluster seeds
		DisableCache: true,
	})
	if err != nil {
		return err
	}
	s, err := redisstore.New(client, redisstore.WithFailurePolicy(redisstore.Fallback(local, 8)))
	if err != nil {
		return err
	}
	perClient, err := bucket.NewKeyed(s, bucket.Config{Name: "per-client", Rate: floodgate.PerSecond(10), Burst: 3})
	if err != nil {
		return err
	}
	_ = perClient
	return nil
}

func readmeDial(local *memstore.Store) error {
	s, err := redisstore.Dial(rueidis.ClientOption{InitAddress: []string{"10.0.0.1:6379"}, DisableCache: true},
		redisstore.WithFailurePolicy(redisstore.Fallback(local, 8)))
	if err != nil {
		return err // invalid options only: a Redis that is down is no error
	}
	defer s.Close() // closes the client that Dial made
	return nil
}

func readmeMulti(ctx context.Context, s *redisstore.Store, clientIP, apiKey string) (floodgate.Decision, error) {
	perSecond, err := bucket.NewKeyed(s, bucket.Config{Name: "api-per-second", Rate: floodgate.PerSecond(10), Burst: 10})
	if err != nil {
		return floodgate.Decision{}, err
	}
	perHour, err := bucket.NewKeyed(s, bucket.Config{Name: "api-per-hour", Rate: floodgate.PerHour(1000), Burst: 1000})
	if err != nil {
		return floodgate.Decision{}, err
	}
	both, err := floodgate.All(perSecond, perHour) // one key, both limits
	if err != nil {
		return floodgate.Decision{}, err
	}
	_, _ = both.Take(ctx, clientIP, 1)

	// Different keys: per client IP AND per API key; checks[i].Decision says which refused.
	checks := []floodgate.Check{{Limiter: perSecond, Key: clientIP, N: 1}, {Limiter: perHour, Key: apiKey, N: 1}}
	d, err := floodgate.TakeAll(ctx, checks)
	return d, err
}

func readmeMiddleware(perClient floodgate.Limiter, apiHandler http.Handler) error {
	mw, err := httplimit.Middleware(perClient, // advertises "per-client";q=10;w=1, from the limiter
		httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")),
	)
	if err != nil {
		return err
	}
	http.Handle("/api/", mw(apiHandler))
	return nil
}

func readmePolicies(ctx context.Context, s store.Store, secret []byte, audit func(policy.Change), metrics floodgate.Observer, mux http.Handler, serviceOf func(*http.Request) string) error {
	cfg, err := policy.LoadFile("limits.yaml")
	if err != nil {
		return err // file:line: what is wrong
	}
	live, err := policy.NewLive(cfg, s, policy.WithKeySecret(secret), policy.WithOnChange(audit), policy.WithObserver(metrics))
	if err != nil {
		return err
	}
	if err := live.WatchFile(ctx, "limits.yaml"); err != nil { // or live.ReloadFile from a SIGHUP handler
		return err
	}
	origin := httplimit.ValueEntry("destination", false, func(*http.Request) string { return "image-origin" })
	limit, err := httplimit.Policies(live,
		httplimit.WithDescriptor(httplimit.HeaderEntry("X-API-Key", "api_key")),
		httplimit.WithDescriptor(origin), // the origin's own budget, every caller
		// Per service: the name its verified token maps to, never the token.
		httplimit.WithDescriptor(origin, httplimit.ValueEntry("service", false, serviceOf)),
		httplimit.WithDescriptor(httplimit.ClientIPEntry("remote_address")),
	)
	if err != nil {
		return err
	}
	http.Handle("/", limit(mux))
	return nil
}

func readmeShadow(mem *memstore.Store, cfg policy.Config, mux *http.ServeMux) error {
	rec, err := shadow.New(shadow.Config{MinObservation: 24 * time.Hour}) // p95 + 40% by default
	if err != nil {
		return err
	}
	recorded, err := rec.Store(mem) // any store.Store: memstore, redisstore
	if err != nil {
		return err
	}
	live, err := policy.NewLive(cfg, recorded) // e.g. the new limit with dry_run: true
	if err != nil {
		return err
	}
	// Reports show the running limits and which policies run in dry run.
	rec.Follow(live)
	mux.Handle("/debug/floodgate/demand", rec.Handler()) // a page with the chart; ?format=json
	for _, r := range rec.Reports() {                    // or one policy: rec.Demand("pro")
		log.Printf("%s: %s", r.Policy, r.Recommendation) // "api: no recommendation: observed 2h0m0s of the 24h0m0s required"
	}
	_ = live
	return nil
}

func readmeTuner(ctx context.Context, live *policy.Live, rec *shadow.Recorder, originHealthy func(context.Context) bool) error {
	tuner, err := shadow.NewTuner(live, rec, shadow.TuneConfig{
		Policy: "pro", Interval: 10 * time.Minute, Floor: 50, Ceiling: 1000,
		Health:  originHealthy, // e.g. the origin's 5xx rate under 1%
		OnEvent: func(e shadow.TuneEvent) { log.Print(e) },
		DryRun:  false, // true: only propose
	})
	if err != nil {
		return err
	}
	go tuner.Run(ctx)
	return nil
}

func readmeCaller(ctx context.Context) error {
	// 50 calls per second, bursts of 10; Wait fails fast before the deadline.
	lim := bucket.NewLimiter(bucket.Limit(50), 10)
	if err := lim.Wait(ctx); err != nil {
		return err
	}
	return nil
}

func readmeShedding(apiHandler, batchHandler http.Handler) error {
	alg, err := adaptive.NewGradient2(adaptive.Gradient2Config{}) // the reference defaults
	if err != nil {
		return err
	}
	lim, err := adaptive.NewGate(alg)
	if err != nil {
		return err
	}
	shed, err := httplimit.Shed(middleware.AcquirerFunc(lim.Slot)) // 503 + Retry-After when over the limit
	if err != nil {
		return err
	}
	http.Handle("/api/", shed(apiHandler))

	// Classes sharing one capacity: best-effort work is shed first.
	classes, err := priority.NewShedder(lim) // best-effort, standard, critical
	if err != nil {
		return err
	}
	shedBatch, err := httplimit.Shed(middleware.AcquirerFunc(adaptive.SlotFunc(
		func(ctx context.Context) (*adaptive.Token, error) {
			return classes.Acquire(ctx, priority.BestEffort)
		})))
	if err != nil {
		return err
	}
	http.Handle("/batch/", shedBatch(batchHandler))
	return nil
}

func readmeMetrics(s *memstore.Store, rec *shadow.Recorder) (*promobserver.Observer, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	// floodgate_decisions_total, floodgate_decision_duration_seconds,
	// floodgate_config_reloads_total, floodgate_config_last_reload_successful:
	// hand obs to your middleware (WithObserver) and to your policy set.
	obs, err := promobserver.New(reg)
	if err != nil {
		return nil, nil, err
	}
	// floodgate_memstore_keys, _max_keys, _evictions_total{store="local"}.
	if err := promobserver.RegisterMemStore(reg, "local", s); err != nil {
		return nil, nil, err
	}
	// floodgate_shadow_*: demand, limit, recommendation, heavy callers refused.
	if err := shadowprom.Register(reg, rec); err != nil {
		return nil, nil, err
	}
	return obs, reg, nil
}

// TestReadmeMetricsRuns: the metrics snippet registers every collector.
func TestReadmeMetricsRuns(t *testing.T) {
	s, err := memstore.New()
	require.NoError(t, err)
	defer s.Close()
	rec, err := shadow.New(shadow.Config{})
	require.NoError(t, err)
	defer rec.Close()
	obs, reg, err := readmeMetrics(s, rec)
	require.NoError(t, err)
	obs.Observe(floodgate.Event{Policy: "api", Outcome: floodgate.OutcomeAllowed})
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	assert.Contains(t, names, "floodgate_decisions_total")
	assert.Contains(t, names, "floodgate_memstore_max_keys")
}

// serviceKey is the context key of the verified service's name.
type serviceKey struct{}

func readmeServiceTokens(s store.Store, tokens map[[sha256.Size]byte]string, mux *http.ServeMux, internalAPI http.Handler) error {
	// tokens: the SHA-256 digest of each accepted token -> its service's name,
	// from your secret store. The process keeps no token.
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			service, ok := tokens[sha256.Sum256([]byte(token))]
			if token == "" || !ok {
				http.Error(w, "unknown service token", http.StatusUnauthorized)
				return
			}
			r.Header.Del("Authorization") // the token goes no further
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serviceKey{}, service)))
		})
	}
	serviceName := func(r *http.Request) string {
		name, _ := r.Context().Value(serviceKey{}).(string) // "billing", never a token
		return name
	}
	perService, err := bucket.NewKeyed(s, bucket.Config{Name: "per-service", Rate: floodgate.PerMinute(600), Burst: 50})
	if err != nil {
		return err
	}
	limit, err := httplimit.Middleware(perService, httplimit.WithKeyFunc(serviceName), httplimit.WithKeyPrefix("service"))
	if err != nil {
		return err
	}
	mux.Handle("/internal/", authenticate(limit(internalAPI)))
	return nil
}

// TestReadmeServiceTokensRuns: through a real server, the two tokens of
// one service spend one budget; an unknown token is refused.
func TestReadmeServiceTokensRuns(t *testing.T) {
	s, err := memstore.New()
	require.NoError(t, err)
	defer s.Close()
	tokens := map[[sha256.Size]byte]string{
		sha256.Sum256([]byte("svc_old_4KZ2XQ7ME6PLA3WJ")): "billing",
		sha256.Sum256([]byte("svc_new_H5TNYC2RVB8DQ6SF")): "billing",
	}
	mux := http.NewServeMux()
	require.NoError(t, readmeServiceTokens(s, tokens, mux, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Empty(t, r.Header.Get("Authorization"), "the token reached the application")
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	codes := map[int]int{}
	start := time.Now()
	for i := range 120 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/internal/x", nil)
		req.Header.Set("Authorization", "Bearer "+[]string{"svc_old_4KZ2XQ7ME6PLA3WJ", "svc_new_H5TNYC2RVB8DQ6SF"}[i%2])
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	// One budget: the burst of 50 and what 10/s refilled meanwhile (keyed
	// by token, each token would have had 50 of its 60).
	bound := 50 + int(10*time.Since(start).Seconds()) + 1
	assert.GreaterOrEqual(t, codes[http.StatusOK], 50, "%v", codes)
	assert.LessOrEqual(t, codes[http.StatusOK], bound, "two tokens of billing, one budget: %v", codes)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/internal/x", nil)
	req.Header.Set("Authorization", "Bearer billing")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestReadmeSnippets(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	var dedented strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		dedented.WriteString(strings.TrimPrefix(line, "\t"))
		dedented.WriteByte('\n')
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		assert.Contains(t, dedented.String(), b[1], "README block not found verbatim in readme_test.go")
	}
}

// TestReadmeQuickstartRuns runs the quickstart snippet: the 4th request of a
// client in one burst is refused with a Retry-After.
func TestReadmeQuickstartRuns(t *testing.T) {
	w := httptest.NewRecorder()
	require.NoError(t, readmeQuickstart(context.Background(), w, "198.51.100.1"))
	assert.Equal(t, http.StatusOK, w.Code)
}

// TestReadmePlansFile: the config file the README shows is the one the
// plans example runs, verbatim, and it loads.
func TestReadmePlansFile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	file, err := os.ReadFile("examples/plans/limits.yaml")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "```yaml\n"+string(file)+"```")
	_, err = policy.LoadFile("examples/plans/limits.yaml")
	require.NoError(t, err)
}
