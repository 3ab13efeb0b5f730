package promobserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/observer/promobserver"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/shadow/shadowprom"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// The files of deploy/: the alert and recording rules, their promtool
// tests, and the Grafana dashboard.
const (
	rulesFile     = "../../deploy/prometheus/floodgate-rules.yml"
	ruleTestsFile = "../../deploy/prometheus/floodgate-rules_test.yml"
	dashboardFile = "../../deploy/grafana/floodgate-dashboard.json"
)

// exportedNames registers the real collectors (promobserver's observer
// and memory store metrics, shadowprom's recorder metrics) on a real
// registry, makes them produce samples, and returns every series name a
// query can select: histograms by their _bucket, _sum and _count series.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := memstore.New(memstore.WithMaxKeys(1000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := promobserver.RegisterMemStore(reg, "local", s); err != nil {
		t.Fatal(err)
	}

	// Requests through a real HTTP server and client: allowed, then denied.
	lim, err := bucket.NewKeyed(s, bucket.Config{Name: "api", Rate: floodgate.PerSecond(1), Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(lim, httplimit.WithObserver(obs), httplimit.WithTier("edge"), httplimit.WithHeaderKey("X-Service"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	codes := map[int]int{}
	for range 4 {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Service", "billing")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[http.StatusOK] != 2 || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("status codes %v, want 2 OK and 2 refused", codes)
	}
	// The outcomes a healthy loopback server cannot produce, and a
	// config change refused, reported as the transports and a policy set
	// report them.
	for _, o := range []floodgate.Outcome{floodgate.OutcomeErrorOpen, floodgate.OutcomeErrorClosed, floodgate.OutcomeShed, floodgate.OutcomeWouldDeny} {
		obs.Observe(floodgate.Event{Policy: "api", Tier: "edge", Outcome: o, Err: errors.New("store down")})
	}
	obs.Observe(floodgate.Event{Source: floodgate.SourceStore, Policy: "api", Outcome: floodgate.OutcomeFallback})
	obs.Observe(floodgate.Event{Source: floodgate.SourceConfig, Outcome: floodgate.OutcomeConfigRefused, Err: errors.New("policies.yaml:3: bad")})

	// A recorder that has observed long enough to recommend, with a
	// refused heavy key.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	rec, err := shadow.New(shadow.Config{Clock: floodgate.ClockFunc(func() time.Time { return time.Unix(0, now.Load()) }), MinObservation: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	d, err := rec.Track("api", time.Second, 50)
	if err != nil {
		t.Fatal(err)
	}
	for w := range 3 {
		now.Store(t0.Add(time.Duration(w) * time.Second).UnixNano())
		for k := range 10 {
			d.Observe(fmt.Sprint("key", k), int64(10*(k+1)), k >= 7)
		}
	}
	now.Store(t0.Add(3 * time.Second).UnixNano())
	if err := shadowprom.Register(reg, rec); err != nil {
		t.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		n := mf.GetName()
		if mf.GetMetric()[0].GetHistogram() != nil {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
			continue
		}
		names[n] = true
	}
	return names
}

// The rules file, as promtool reads it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dashboardExprs returns every PromQL expression of the dashboard (its
// panels' targets and its template variables' queries), by where it is.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			out[fmt.Sprintf("variable %q", v.Name)] = v.Definition
		}
	}
	return out
}

var (
	metricName   = regexp.MustCompile(`\bfloodgate_[a-zA-Z0-9_]+`)
	recordedName = regexp.MustCompile(`\bfloodgate:[a-zA-Z0-9_:]+`)
)

// Every metric name the dashboard's queries, the rules' expressions and
// the rule tests' input series use is one the library exports; every
// recorded name they use is recorded by the rules; every query names at
// least one.
func TestDeployNamesExportedMetrics(t *testing.T) {
	exported := exportedNames(t)
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	recorded := map[string]bool{}
	exprs := map[string]string{}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
				exprs["rule "+r.Record] = r.Expr
			} else {
				alerts = append(alerts, r.Alert)
				exprs["alert "+r.Alert] = r.Expr
			}
		}
	}
	var tests ruleTests
	readYAML(t, ruleTestsFile, &tests)
	for i, tc := range tests.Tests {
		for j, s := range tc.InputSeries {
			exprs[fmt.Sprintf("rule test %d series %d", i, j)] = s.Series
		}
	}
	for where, e := range dashboardExprs(t) {
		exprs["dashboard "+where] = e
	}
	if len(alerts) < 6 || len(exprs) < 30 {
		t.Fatalf("%d alerts, %d expressions: the files were not read as expected", len(alerts), len(exprs))
	}

	used := map[string]bool{}
	for where, e := range exprs {
		names := metricName.FindAllString(e, -1)
		recs := recordedName.FindAllString(e, -1)
		if len(names)+len(recs) == 0 {
			t.Errorf("%s names no floodgate metric: %s", where, e)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s uses %s, which the library does not export", where, n)
			}
		}
		for _, n := range recs {
			if !recorded[n] {
				t.Errorf("%s uses %s, which no rule records", where, n)
			}
		}
	}
	var unused []string
	for n := range exported {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	slices.Sort(unused)
	t.Logf("exported, used nowhere in deploy/: %v", unused)
}

// Every alert of the rules has a promtool test in which it fires and one
// in which it does not.
func TestEveryAlertTestedBothWays(t *testing.T) {
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	var tests ruleTests
	readYAML(t, ruleTestsFile, &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && (!fires[r.Alert] || !silent[r.Alert]) {
				t.Errorf("alert %s: tested firing %v, not firing %v; want both", r.Alert, fires[r.Alert], silent[r.Alert])
			}
		}
	}
}

// The dashboard's queries are valid PromQL: promtool checks them as the
// expressions of recording rules (Grafana's $__rate_interval and $policy
// replaced by values). scripts/test.sh installs promtool and sets
// FLOODGATE_REQUIRE_PROMTOOL=1, so that CI fails without it; elsewhere
// the test is skipped when promtool is missing.
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FLOODGATE_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool not found and FLOODGATE_REQUIRE_PROMTOOL is set")
		}
		t.Skip("promtool not found (Debian: apt-get install prometheus)")
	}
	exprs := dashboardExprs(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	r := strings.NewReplacer("$__rate_interval", "5m", "$policy", ".*")
	for i, k := range keys {
		e := exprs[k]
		if strings.HasPrefix(e, "label_values(") {
			continue // a Grafana function, not PromQL
		}
		q, _ := json.Marshal(r.Replace(e))
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
