package policy_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/livetest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/observer/promobserver"
	"github.com/floodgate-go/floodgate/observer/slogobserver"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

const plansYAML = `domain: api
default_plan: free
policies:
  - name: free
    rate: 10/s
  - name: pro
    rate: 100/s
  - name: enterprise-acme
    rate: 1000/s
overrides:
  key_pro_1: pro
  key_acme: enterprise-acme
rules:
  - key: api_key
    plan: true
`

func clocked(t *testing.T) (*memstore.Store, *storetest.Clock) {
	t.Helper()
	clk := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, clk
}

// Each key gets exactly its plan's admissions over 2 s: the burst (one
// second's worth) plus two seconds of the rate (Redis runs the same in
// redisstore's tests).
func TestPlansOnMemstore(t *testing.T) {
	s, clk := clocked(t)
	livetest.Plans(t, livetest.Env{Store: s, Advance: clk.Advance})
}

func TestPlanResolution(t *testing.T) {
	cfg, err := policy.Parse("plans.yaml", []byte(plansYAML))
	require.NoError(t, err)
	s, _ := clocked(t)
	var calls atomic.Int64
	live, err := policy.NewLive(cfg, s, policy.WithResolver(func(_ context.Context, key string) (string, error) {
		calls.Add(1)
		if strings.HasPrefix(key, "key_pro_") {
			return "pro", nil
		}
		return "", nil
	}, time.Minute, 1000))
	require.NoError(t, err)
	ctx := context.Background()
	set := live.Set()
	for _, tc := range []struct{ key, want string }{
		{"key_acme", "enterprise-acme"}, {"key_pro_7", "pro"}, {"key_pro_7", "pro"}, {"someone", "free"},
	} {
		l, err := set.Plan(ctx, tc.key)
		require.NoError(t, err)
		assert.Equal(t, tc.want, l.Name(), tc.key)
	}
	assert.Equal(t, int64(2), calls.Load(), "the override skips the resolver; a resolved key is cached")
	boom := errors.New("db down")
	live2, err := policy.NewLive(cfg, s, policy.WithResolver(func(context.Context, string) (string, error) { return "", boom }, time.Second, 10))
	require.NoError(t, err)
	d, err := live2.Take(ctx, "someone", 1)
	require.NoError(t, err, "a failing resolver puts an unknown key on the default plan")
	assert.Equal(t, int64(10), d.Limit)
	noDefault := cfg
	noDefault.DefaultPlan = ""
	live3, err := policy.NewLive(noDefault, s, policy.WithResolver(func(context.Context, string) (string, error) { return "", boom }, time.Second, 10))
	require.NoError(t, err)
	_, err = live3.Take(ctx, "someone", 1)
	assert.ErrorIs(t, err, boom, "without a default plan, a resolver failure is an error of the limiter: the fail mode decides")

	// An answer naming no policy (a typo) is an error, not another plan.
	live4, err := policy.NewLive(cfg, s, policy.WithResolver(func(context.Context, string) (string, error) { return "Pro", nil }, time.Second, 10))
	require.NoError(t, err)
	_, err = live4.Take(ctx, "someone", 1)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	assert.ErrorContains(t, err, `"Pro"`)
}

func TestDescriptorRules(t *testing.T) {
	cfg, err := policy.Parse("rules.yaml", []byte(`domain: edge
policies:
  - {name: origin, rate: 15000/s}
  - {name: purge, rate: 500/s}
  - {name: shipper, rate: 50/s}
  - {name: per-token, rate: 100/s}
rules:
  - key: destination_cluster
    value: image-origin.prod
    policy: origin
    rules:
      - key: source_service
        value: purge-orchestrator
        policy: purge
      - key: source_service
        value: log-shipper
        policy: shipper
      - key: source_service
        policy: per-token
`))
	require.NoError(t, err)
	s, _ := clocked(t)
	live, err := policy.NewLive(cfg, s)
	require.NoError(t, err)
	set := live.Set()
	ctx := context.Background()
	checks, enforcing, err := set.Match(ctx, []middleware.Descriptor{
		{{Key: "destination_cluster", Value: "image-origin.prod"}},
		{{Key: "destination_cluster", Value: "image-origin.prod"}, {Key: "source_service", Value: "purge-orchestrator"}},
		{{Key: "destination_cluster", Value: "image-origin.prod"}, {Key: "source_service", Value: "unknown-svc"}},
		{{Key: "destination_cluster", Value: "other"}},
		{{Key: "remote_address", Value: "10.0.0.1"}},
	}, 1, nil)
	require.NoError(t, err)
	require.Len(t, checks, 3, "unmatched descriptors are not limited")
	assert.Equal(t, 3, enforcing)
	names := []string{}
	for _, c := range checks {
		names = append(names, c.Limiter.(*store.Limiter).Name())
	}
	assert.Equal(t, []string{"origin", "purge", "per-token"}, names, "a value rule wins over the wildcard")
	assert.NotEqual(t, checks[1].Key, checks[2].Key)
	d, err := floodgate.TakeAll(ctx, checks)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

func TestConfigErrorsHaveFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		{"bad yaml", "policies:\n  - {name: a, rate: 1/s}\n\tdomain: x\n", 3, "cannot start any token"},
		{"unknown algorithm", "policies:\n  - name: a\n    algorithm: token-buckets\n    rate: 1/s\n", 3, "unknown algorithm"},
		{"negative rate", "policies:\n  - name: a\n    rate: -5/s\n", 3, "negative"},
		{"duplicate", "policies:\n  - {name: a, rate: 1/s}\n  - {name: a, rate: 2/s}\n", 3, `two policies are named "a"`},
		{"unknown plan in override", "policies:\n  - {name: a, rate: 1/s}\noverrides:\n  k1: a\n  k2: gold\n", 5, `unknown policy "gold"`},
		{"unknown field", "policies:\n  - {name: a, rate: 1/s, brust: 3}\n", 2, `unknown field "brust"`},
		{"unknown default plan", "default_plan: gold\npolicies:\n  - {name: a, rate: 1/s}\n", 1, `unknown policy "gold"`},
		{"rule to unknown policy", "policies:\n  - {name: a, rate: 1/s}\nrules:\n  - key: k\n    rules:\n      - key: r\n        policy: b\n", 6, `unknown policy "b"`},
		{"rule limiting nothing", "policies:\n  - {name: a, rate: 1/s}\nrules:\n  - key: api_key\n", 4, "rule api_key limits nothing"},
		{"nested rule limiting nothing", "policies:\n  - {name: a, rate: 1/s}\nrules:\n  - key: d\n    policy: a\n    rules:\n      - key: s\n        value: x\n", 7, "rule d > s=x limits nothing"},
		{"zero rate", "policies:\n  - {name: a, rate: 0/s}\n", 2, "N must be at least 1"},
		{"zero period", "policies:\n  - {name: a, rate: 10/0s}\n", 2, "must be longer than zero"},
		{"unknown unit", "policies:\n  - {name: a, rate: 10/fortnight}\n", 2, "want ms, s, m, h, d"},
		{"no rate", "policies:\n  - {name: a, burst: 5}\n", 2, "a token-bucket needs a rate"},
		{"window without limit", "policies:\n  - {name: a, algorithm: fixed-window, rate: 10/s}\n", 2, "needs a limit and a window (limit: 100, window: 1m); rate and burst belong to the buckets"},
		{"empty", "", 1, "empty config"},
		{"burst too small", "policies:\n  - name: a\n    algorithm: fixed-window\n    limit: 0\n    window: 1s\n", 4, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse("limits.yaml", []byte(tc.yaml))
			var ce *policy.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
			assert.Equal(t, "limits.yaml", ce.File)
			assert.Equal(t, tc.line, ce.Line, "%v", err)
			assert.Contains(t, err.Error(), tc.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "limits.yaml:"), err.Error())
		})
	}
}

func TestJSONConfig(t *testing.T) {
	cfg, err := policy.Parse("limits.json", []byte(`{"default_plan": "free", "policies": [{"name": "free", "rate": "10/s", "burst": 20}]}`))
	require.NoError(t, err)
	assert.Equal(t, int64(20), cfg.Policies[0].Burst)
	_, err = policy.Parse("limits.json", []byte("{\"policies\": [\n{\"name\": \"free\", \"rate\": \"ten/s\"}]}"))
	var ce *policy.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 2, ce.Line)
}

// A reload through a file: atomic, reported with its version and what
// changed; a bad file leaves the running config serving.
func TestWatchFileReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write := func(s string) {
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o644))
		require.NoError(t, os.Rename(tmp, path)) // as deployment tools do
	}
	write("default_plan: free\npolicies:\n  - {name: free, rate: 10/s}\n")
	cfg, err := policy.LoadFile(path)
	require.NoError(t, err)
	s, _ := clocked(t)
	var mu sync.Mutex
	var changes []policy.Change
	reg := prometheus.NewRegistry()
	metrics, err := promobserver.New(reg)
	require.NoError(t, err)
	live, err := policy.NewLive(cfg, s, policy.WithOnChange(func(c policy.Change) {
		mu.Lock()
		changes = append(changes, c)
		mu.Unlock()
	}), policy.WithObserver(metrics))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, live.WatchFile(ctx, path))
	last := func() policy.Change {
		mu.Lock()
		defer mu.Unlock()
		return changes[len(changes)-1]
	}
	waitFor := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := len(changes)
			mu.Unlock()
			if got >= n {
				return
			}
			require.True(t, time.Now().Before(deadline), "no change reported within 5 s")
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(1)
	start := time.Now()
	write("default_plan: free\npolicies:\n  - {name: free, rate: 20/s}\n  - {name: pro, rate: 100/s}\n")
	waitFor(2)
	assert.Less(t, time.Since(start), time.Second, "applied within 1 s")
	c := last()
	require.NoError(t, c.Err)
	assert.Equal(t, uint64(2), c.Version)
	assert.Equal(t, []string{"pro"}, c.Added)
	assert.Equal(t, []string{"free"}, c.Changed)
	assert.Equal(t, []string{"free: token-bucket 10/s burst 10 -> token-bucket 20/s burst 20"}, c.Details)
	p, _ := live.Set().Policy("free")
	assert.Equal(t, int64(20), p.Rate.N)

	write("default_plan: free\npolicies:\n  - {name: free, rate: -1/s}\n")
	waitFor(3)
	c = last()
	var ce *policy.ConfigError
	require.ErrorAs(t, c.Err, &ce)
	assert.Equal(t, 3, ce.Line)
	assert.Equal(t, uint64(2), live.Version(), "the bad file changed nothing")
	p, _ = live.Set().Policy("free")
	assert.Equal(t, int64(20), p.Rate.N, "the running config still serves")

	// The refusal is in the metrics too (the initial config and the first
	// reload were applied).
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP floodgate_config_last_reload_successful Whether the last config change of a policy set was applied (1) or refused (0).
# TYPE floodgate_config_last_reload_successful gauge
floodgate_config_last_reload_successful 0
# HELP floodgate_config_reloads_total Config changes of policy sets, by outcome (config_applied, config_refused).
# TYPE floodgate_config_reloads_total counter
floodgate_config_reloads_total{outcome="config_applied"} 2
floodgate_config_reloads_total{outcome="config_refused"} 1
`), "floodgate_config_reloads_total", "floodgate_config_last_reload_successful"))

	// And a good file again sets the gauge back.
	write("default_plan: free\npolicies:\n  - {name: free, rate: 30/s}\n")
	waitFor(4)
	require.NoError(t, last().Err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP floodgate_config_last_reload_successful Whether the last config change of a policy set was applied (1) or refused (0).
# TYPE floodgate_config_last_reload_successful gauge
floodgate_config_last_reload_successful 1
`), "floodgate_config_last_reload_successful"))
}

// A refused config is an event for every observer: an slog record at
// Error with the file and line.
func TestRefusedConfigIsLogged(t *testing.T) {
	cfg, err := policy.Parse("plans.yaml", []byte(plansYAML))
	require.NoError(t, err)
	s, _ := clocked(t)
	var buf strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	obs, err := slogobserver.New(logger)
	require.NoError(t, err)
	live, err := policy.NewLive(cfg, s, policy.WithObserver(obs))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "limits.yaml")
	require.NoError(t, os.WriteFile(path, []byte("policies:\n  - {name: a, rate: 1/s}\n  - {name: a, rate: 2/s}\n"), 0o644))
	_, err = live.ReloadFile(path)
	require.Error(t, err)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	assert.Contains(t, out, `level=INFO msg="floodgate config change" outcome=config_applied source=config`)
	assert.Contains(t, out, `level=ERROR msg="floodgate config change" outcome=config_refused source=config error=`)
	assert.NotContains(t, out, "latency=", "a config change is not a decision")
	assert.Contains(t, out, "limits.yaml:3: ")
	_, err = policy.NewLive(cfg, s, policy.WithObserver(nil))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	var typedNil *slogobserver.Observer
	_, err = policy.NewLive(cfg, s, policy.WithObserver(typedNil))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]floodgate.Rate{
		"100/s": floodgate.PerSecond(100), "30/m": floodgate.PerMinute(30), "1000/h": floodgate.PerHour(1000),
		"5/30s": {N: 5, Per: 30 * time.Second}, "10r/s": floodgate.PerSecond(10), "2/d": {N: 2, Per: 24 * time.Hour},
	} {
		got, err := policy.ParseRate(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
		back, err := policy.ParseRate(policy.FormatRate(got))
		require.NoError(t, err)
		assert.Equal(t, got, back)
	}
	for _, bad := range []string{"", "10", "0/s", "-1/s", "x/s", "10/fortnight", "10/-1s"} {
		_, err := policy.ParseRate(bad)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, bad)
	}
}

// A Kubernetes ConfigMap volume: path is a link to ..data/limits.yaml and
// an update swaps the ..data link to a new directory by a rename. The swap
// is seen and applied within 1 s; rewriting the same content applies
// nothing; a missing file is refused at once.
func TestWatchFileFollowsConfigMapSwaps(t *testing.T) {
	dir := t.TempDir()
	version := func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "limits.yaml"), []byte(text), 0o644))
	}
	version("..2026_12_02_00_00_01.1", "default_plan: free\npolicies:\n  - {name: free, rate: 10/s}\n")
	require.NoError(t, os.Symlink("..2026_12_02_00_00_01.1", filepath.Join(dir, "..data")))
	path := filepath.Join(dir, "limits.yaml")
	require.NoError(t, os.Symlink(filepath.Join("..data", "limits.yaml"), path))

	cfg, err := policy.LoadFile(path)
	require.NoError(t, err)
	s, _ := clocked(t)
	applied := make(chan policy.Change, 8)
	live, err := policy.NewLive(cfg, s, policy.WithOnChange(func(c policy.Change) { applied <- c }))
	require.NoError(t, err)
	<-applied
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, live.WatchFile(ctx, path))

	// The kubelet's update: a new directory, a new link, renamed over ..data.
	start := time.Now()
	version("..2026_12_02_00_05_00.2", "default_plan: free\npolicies:\n  - {name: free, rate: 20/s}\n")
	require.NoError(t, os.Symlink("..2026_12_02_00_05_00.2", filepath.Join(dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_12_02_00_00_01.1")))
	select {
	case c := <-applied:
		require.NoError(t, c.Err)
		assert.Equal(t, []string{"free"}, c.Changed)
		assert.Less(t, time.Since(start), time.Second, "applied within 1 s")
	case <-time.After(5 * time.Second):
		t.Fatal("the ConfigMap swap was not seen")
	}
	p, _ := live.Set().Policy("free")
	assert.Equal(t, int64(20), p.Rate.N)

	// The same content written again: nothing to apply.
	version("..2026_12_02_00_05_00.2", "default_plan: free\npolicies:\n  - {name: free, rate: 20/s}\n")
	select {
	case c := <-applied:
		t.Fatalf("a rewrite of the same content was applied: %+v", c)
	case <-time.After(400 * time.Millisecond):
	}
	assert.Equal(t, uint64(2), live.Version())

	err = live.WatchFile(ctx, filepath.Join(dir, "missing.yaml"))
	assert.Error(t, err, "a file that is not there cannot be watched")
}
