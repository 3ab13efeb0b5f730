package rls_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

var extensions = map[string]string{"ext.yaml": `
domain: ext
descriptors:
  # A token bucket: 10 per minute, bursts of 3.
  - key: bucket
    rate_limit:
      algorithm: token-bucket
      unit: minute
      requests_per_unit: 10
      burst: 3
  # Any multiple of a unit: 2 per 30 seconds.
  - key: thirty
    rate_limit:
      unit: 30s
      requests_per_unit: 2
  # Several limits on one descriptor, all or nothing: 3 per minute and 4 per hour.
  - key: both
    rate_limit:
      unit: minute
      requests_per_unit: 3
    rate_limits:
      - unit: hour
        requests_per_unit: 4
        algorithm: sliding-log
  - key: leaky
    rate_limit:
      algorithm: leaky-bucket
      unit: second
      requests_per_unit: 1
      burst: 1
  - key: counter
    rate_limit:
      algorithm: sliding-counter
      unit: minute
      unit_multiplier: 5
      requests_per_unit: 2
`}

func TestExtensions(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			clock := &fakeClock{}
			clock.ns.Store(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).UnixNano())
			var opts []rls.Option
			if st.name == "memstore" {
				opts = append(opts, rls.WithClock(clock))
			}
			srv := serve(t, st.make(t, clock), extensions, opts...)
			// Token bucket: the burst, then refused with the wait for a token.
			for _, w := range []string{"OK 2", "OK 1", "OK 0", "OVER"} {
				code := ok
				if w == "OVER" {
					code = over
				}
				want(t, srv.call(t, "ext", 0, desc("bucket", "a")), code, w)
			}
			r := srv.call(t, "ext", 0, desc("bucket", "a"))
			if d := r.Statuses[0].DurationUntilReset.AsDuration(); d < 5*time.Second || d > 6*time.Second {
				t.Errorf("token bucket: duration_until_reset %v, want the 6s to the next token", d)
			}
			if cl := r.Statuses[0].CurrentLimit; cl.RequestsPerUnit != 10 || cl.Unit != rlspb.RateLimitResponse_RateLimit_MINUTE {
				t.Errorf("current_limit %v", cl)
			}
			// 30 s: told as 30 x SECOND.
			want(t, srv.call(t, "ext", 0, desc("thirty", "a")), ok, "OK 1")
			r = srv.call(t, "ext", 0, desc("thirty", "a"))
			want(t, r, ok, "OK 0")
			if cl := r.Statuses[0].CurrentLimit; cl.Unit != rlspb.RateLimitResponse_RateLimit_SECOND || cl.UnitMultiplier.GetValue() != 30 {
				t.Errorf("current_limit %v, want 2 per 30 x SECOND", cl)
			}
			want(t, srv.call(t, "ext", 0, desc("thirty", "a")), over, "OVER")
			// Two limits: hits 3 fit the minute's 3 and the hour's 4.
			want(t, srv.call(t, "ext", 3, desc("both", "a")), ok, "OK 0")
			// The minute is spent: refused, and the hour is not charged.
			want(t, srv.call(t, "ext", 1, desc("both", "a")), over, "OVER")
			want(t, srv.call(t, "ext", 0, withHits(desc("both", "a"), 0)), over, "OVER")
			// 5 minutes of a sliding counter.
			want(t, srv.call(t, "ext", 2, desc("counter", "a")), ok, "OK 0")
			r = srv.call(t, "ext", 1, desc("counter", "a"))
			want(t, r, over, "OVER")
			if cl := r.Statuses[0].CurrentLimit; cl.Unit != rlspb.RateLimitResponse_RateLimit_MINUTE || cl.UnitMultiplier.GetValue() != 5 {
				t.Errorf("current_limit %v, want 2 per 5 x MINUTE", cl)
			}
			// Leaky bucket, no delay (Envoy cannot delay): burst+1 at once.
			want(t, srv.call(t, "ext", 1, desc("leaky", "a")), ok, "OK 1")
			want(t, srv.call(t, "ext", 1, desc("leaky", "a")), ok, "OK 0")
			want(t, srv.call(t, "ext", 1, desc("leaky", "a")), over, "OVER")
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", "x.yaml:5: invalid rate limit unit 'fortnight'"},
		{"domain: a\ndescriptors:\n  - key: k\n    ratelimit: {}\n", "x.yaml:4: config error, unknown key 'ratelimit'"},
		{"domain: a\ndescriptors:\n  - value: v\n", "x.yaml:3: descriptor has empty key"},
		{"descriptors: []\n", "x.yaml:1: config file cannot have empty domain"},
		{"domain: a\ndescriptors:\n  - key: k\n  - key: k\n", "x.yaml:4: duplicate descriptor composite key 'a.k'"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "x.yaml:4: should not specify rate limit unit when unlimited"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", "x.yaml:4: replaces should not contain name of same descriptor"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "x.yaml:4: should not have an empty replaces entry"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "x.yaml:4: config error, \"-1\" is not a whole number"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra}\n", "x.yaml:4: unknown algorithm \"gcra\""},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, burst: 2}\n", "x.yaml:4: burst belongs to token-bucket and leaky-bucket"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limits: [{unit: second, requests_per_unit: 5}]\n", "x.yaml:4: rate_limits needs a rate_limit beside it"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second\n", "x.yaml:4: error loading config file"},
	} {
		_, err := rls.ParseDomain("x.yaml", []byte(tc.body))
		var ce *policy.ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%q: error %v, want %q...", tc.body, err, tc.want)
		}
	}
	dir := writeDir(t, map[string]string{"a.yaml": "domain: a\n", "b.yml": "domain: a\n", "notes.txt": "ignored"})
	if _, err := rls.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "b.yml:1: duplicate domain 'a'") {
		t.Errorf("two files of one domain: %v", err)
	}
}

func TestHotReload(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			var mu sync.Mutex
			var reloads []rls.Reload
			reg := prometheus.NewRegistry()
			m, err := rls.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			v1 := "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"
			srv := serve(t, st.make(t, nil), map[string]string{"r.yaml": v1}, rls.WithMetrics(m), rls.WithOnReload(func(r rls.Reload) {
				mu.Lock()
				reloads = append(reloads, r)
				mu.Unlock()
			}))
			if err := srv.svc.WatchDir(t.Context(), srv.dir); err != nil {
				t.Fatal(err)
			}
			want(t, srv.call(t, "r", 2, desc("k", "a")), ok, "OK 1")
			last := func() (rls.Reload, int) {
				mu.Lock()
				defer mu.Unlock()
				if len(reloads) == 0 {
					return rls.Reload{}, 0
				}
				return reloads[len(reloads)-1], len(reloads)
			}
			waitReload := func(n int) rls.Reload {
				t.Helper()
				deadline := time.Now().Add(time.Second)
				for time.Now().Before(deadline) {
					if r, got := last(); got >= n {
						return r
					}
					time.Sleep(5 * time.Millisecond)
				}
				t.Fatalf("no reload %d within 1s", n)
				return rls.Reload{}
			}
			// Raise 3 -> 5: the key keeps the 1 it has left (floodgate's
			// live-change rule: raising never grants a burst).
			write := func(body string) {
				tmp := filepath.Join(srv.dir, ".r.yaml.tmp")
				if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, filepath.Join(srv.dir, "r.yaml")); err != nil {
					t.Fatal(err)
				}
			}
			write(strings.Replace(v1, "requests_per_unit: 3", "requests_per_unit: 5", 1))
			if r := waitReload(1); r.Err != nil || r.Version != 2 {
				t.Fatalf("reload: %+v", r)
			}
			want(t, srv.call(t, "r", 1, desc("k", "a")), ok, "OK 0")
			want(t, srv.call(t, "r", 1, desc("k", "b")), ok, "OK 4") // a fresh key has the new 5
			// A bad file is refused with file:line; the running config stays.
			write("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: five}\n")
			r := waitReload(2)
			if r.Err == nil || !strings.Contains(r.Err.Error(), "r.yaml:4:") {
				t.Fatalf("bad file: %+v, want a file:line error", r)
			}
			if srv.svc.Version() != 2 {
				t.Errorf("version %d after a refused config, want 2", srv.svc.Version())
			}
			resp := srv.call(t, "r", 1, desc("k", "b"))
			want(t, resp, ok, "OK 3")
			if rpu := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); rpu != 5 {
				t.Errorf("requests_per_unit %d after a refused config, want the running 5", rpu)
			}
			if got := testutil.ToFloat64(metric(t, reg, "ratelimit_service_config_load_error")); got != 1 {
				t.Errorf("config_load_error %v, want 1", got)
			}
			// A new file, a new domain.
			if err := os.WriteFile(filepath.Join(srv.dir, "z.yaml"), []byte("domain: z\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			write(v1) // and r.yaml at 3 per hour: key b, 2 used, keeps its 3 left capped at 3
			deadline := time.Now().Add(time.Second)
			for srv.svc.Version() < 3 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			want(t, srv.call(t, "z", 0, desc("k", "a")), ok, "OK 0")
			want(t, srv.call(t, "r", 0, desc("k", "a")), over, "OVER")
			want(t, srv.call(t, "r", 0, desc("k", "b")), ok, "OK 2")
		})
	}
}

// metric finds a collector's value by name in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
							found = true
						}
					}
					if !found {
						continue next
					}
				}
				return m.GetCounter().GetValue()
			}
		}
		return 0
	})
}

type collectorFunc func() float64

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"}).Describe(ch)
}

func (f collectorFunc) Collect(ch chan<- prometheus.Metric) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	g.Set(f())
	g.Collect(ch)
}

func TestMetricsAndHeaders(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, stores[0].make(t, nil), fixtures, rls.WithMetrics(m), rls.WithHeaders(middleware.HeadersIETF|middleware.HeadersLegacy))
	// 10 per hour: 7, then 2 (near the limit from 8), then 3 (over by 2).
	srv.call(t, "edge", 7, desc("tenant", "m"))
	srv.call(t, "edge", 2, desc("tenant", "m"))
	r := srv.call(t, "edge", 3, desc("tenant", "m"))
	val := func(name string) float64 {
		return testutil.ToFloat64(metric(t, reg, "ratelimit_service_rate_limit_"+name, "domain", "edge", "key", "tenant"))
	}
	for name, w := range map[string]float64{"total_hits": 12, "within_limit": 9, "near_limit": 2, "over_limit": 2} {
		if got := val(name); got != w {
			t.Errorf("%s %v, want %v", name, got, w)
		}
	}
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if h["X-RateLimit-Limit"] != "10" || h["X-RateLimit-Remaining"] != "0" || h["RateLimit-Policy"] != `"rl-1b87f654";q=10;w=3600` ||
		!strings.HasPrefix(h["RateLimit"], `"rl-1b87f654";r=0;t=`) || h["X-RateLimit-Reset"] == "" {
		t.Errorf("headers %v", h)
	}
	// Shadow mode: over_limit and shadow_mode both count.
	srv.call(t, "edge_proxy_per_ip", 3, desc("client", "trial"))
	if got := testutil.ToFloat64(metric(t, reg, "ratelimit_service_rate_limit_shadow_mode", "key", "client_trial")); got != 2 {
		t.Errorf("shadow_mode %v, want 2 (3 hits, 1 within the limit)", got)
	}
}

// The README's "Behind Envoy" shows testdata/example/edge.yaml verbatim, and
// the directory loads and serves.
func TestReadmeConfig(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("testdata/example/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "## Behind Envoy") || !strings.Contains(string(readme), "```yaml\n"+string(file)+"```") {
		t.Fatal("README.md does not show testdata/example/edge.yaml verbatim in its Behind Envoy section")
	}
	cfg, err := rls.LoadDir("testdata/example")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(stores[0].make(t, nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveService(t, svc, "testdata/example")
	// The tenant's bucket holds 200; the hour's 1000 stays behind it.
	want(t, srv.call(t, "edge", 150, desc("tenant", "acme")), ok, "OK 50")
	want(t, srv.call(t, "edge", 60, desc("tenant", "acme")), over, "OVER")
}

// A credential's value never reaches the store or the metrics in clear.
func TestCredential(t *testing.T) {
	c := redisClient(t, []string{singleAddr(t)})
	prefix := fmt.Sprintf("rlscred:%d:", time.Now().UnixNano())
	st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second)) // a loaded test machine
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk_live_do_not_leak_9f8e7d"
	files := map[string]string{"cred.yaml": `
domain: cred
descriptors:
  - key: api_key
    credential: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`}
	// Without the fleet's secret, a shared store refuses credentials.
	cfg, err := rls.LoadDir(writeDir(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rls.New(st, cfg); !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithKeySecret") {
		t.Fatalf("credentials on Redis without the secret: %v", err)
	}
	var events []floodgate.Event
	var mu sync.Mutex
	srv := serve(t, st, files, rls.WithMetrics(m), rls.WithKeySecret([]byte("0123456789abcdef0123")),
		rls.WithObserver(floodgate.ObserverFunc(func(e floodgate.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })))
	want(t, srv.call(t, "cred", 0, desc("api_key", secret)), ok, "OK 1")
	want(t, srv.call(t, "cred", 0, desc("api_key", secret)), ok, "OK 0")
	want(t, srv.call(t, "cred", 0, desc("api_key", secret)), over, "OVER")
	want(t, srv.call(t, "cred", 0, desc("api_key", "another")), ok, "OK 1") // each credential its own budget
	keys, err := c.Do(t.Context(), c.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("keys %v, want one per credential", keys)
	}
	for _, k := range keys {
		if strings.Contains(k, secret) || strings.Contains(k, "another") {
			t.Errorf("store key %q holds a credential in clear", k)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				n++
				if strings.Contains(lp.GetValue(), secret) {
					t.Errorf("metric %s label %s=%q holds a credential in clear", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no metric labels")
	}
	for _, e := range events {
		if strings.Contains(e.Policy, secret) {
			t.Errorf("event policy %q holds a credential", e.Policy)
		}
	}
}

// share_threshold: every value matching the wildcard counts in one
// counter; value_to_metric: the metric key holds the request's value.
func TestShareThresholdAndValueToMetric(t *testing.T) {
	files := map[string]string{"s.yaml": `
domain: s
descriptors:
  - key: file
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: doc
    value: docs/*
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: route
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
`}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := rls.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, st.make(t, nil), files, rls.WithMetrics(m))
			want(t, srv.call(t, "s", 0, desc("file", "files/a.pdf")), ok, "OK 2")
			want(t, srv.call(t, "s", 0, desc("file", "files/b.csv")), ok, "OK 1") // one counter
			want(t, srv.call(t, "s", 0, desc("doc", "docs/a")), ok, "OK 2")
			want(t, srv.call(t, "s", 0, desc("doc", "docs/b")), ok, "OK 2") // each its own
			srv.call(t, "s", 0, desc("route", "/img"))
			srv.call(t, "s", 0, desc("route", "/img"))
			srv.call(t, "s", 0, desc("route", "/css"))
			for key, w := range map[string]float64{"file_files/*": 2, "doc_docs/*": 2, "route_/img": 2, "route_/css": 1} {
				if got := testutil.ToFloat64(metric(t, reg, "ratelimit_service_rate_limit_total_hits", "domain", "s", "key", key)); got != w {
					t.Errorf("total_hits{key=%q} %v, want %v", key, got, w)
				}
			}
		})
	}
}

func TestConstructionErrors(t *testing.T) {
	s := stores[0].make(t, nil)
	for name, f := range map[string]func() error{
		"nil store":    func() error { _, err := rls.New(nil, rls.Config{}); return err },
		"short secret": func() error { _, err := rls.New(s, rls.Config{}, rls.WithKeySecret([]byte("short"))); return err },
		"NaN ratio":    func() error { _, err := rls.New(s, rls.Config{}, rls.WithNearLimitRatio(math.NaN())); return err },
		"nil observer": func() error { _, err := rls.New(s, rls.Config{}, rls.WithObserver(nil)); return err },
		"zero option":  func() error { _, err := rls.New(s, rls.Config{}, rls.Option{}); return err },
		"bad header set": func() error {
			_, err := rls.New(s, rls.Config{}, rls.WithHeaders(middleware.HeaderSet(64)))
			return err
		},
		"http's headers": func() error {
			_, err := rls.New(s, rls.Config{}, rls.WithHeaders(middleware.HeadersIETF|middleware.HeadersDiagnostic))
			return err
		},
		"bad fail mode":  func() error { _, err := rls.New(s, rls.Config{}, rls.WithFailMode(middleware.FailMode(9))); return err },
		"nil registerer": func() error { _, err := rls.NewMetrics(nil); return err },
		"empty domain":   func() error { _, err := rls.New(s, rls.Config{Domains: []rls.Domain{{}}}); return err },
		"duplicate domain": func() error {
			_, err := rls.New(s, rls.Config{Domains: []rls.Domain{{Name: "a"}, {Name: "a"}}})
			return err
		},
	} {
		if err := f(); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidConfig", name, err)
		}
	}
}
