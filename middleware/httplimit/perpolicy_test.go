package httplimit

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/promtest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/observer/promobserver"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// TestPoliciesCountedPerPolicyInPrometheus: a request matching several
// policies, a dry-run one among them, is counted under each of them in a
// real Prometheus registry, and the diagnostic headers name the policy that
// decided.
func TestPoliciesCountedPerPolicyInPrometheus(t *testing.T) {
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	_, h, _ := newPolicies(t, s, servicesYAML, WithObserver(obs), WithHeaders(middleware.HeadersIETF|middleware.HeadersDiagnostic))
	srv := serve(t, h)
	c := clientFrom(t, "127.0.0.1")
	// purge-orchestrator's DELETE matches purge (3/m), per-route (100/m)
	// and the dry-run policy shadow (1/m).
	hdr := map[string]string{"X-Service": "purge-orchestrator"}
	var scopes []string
	for range 4 {
		res := do(t, c, "DELETE", srv.URL+"/img/a.png", hdr)
		scopes = append(scopes, res.header.Get("X-RateLimit-Scope")+" "+res.header.Get("X-RateLimit-Reason"))
	}
	if want := []string{"purge ", "purge ", "purge ", "purge rate_limited"}; !slices.Equal(scopes, want) {
		t.Fatalf("X-RateLimit-Scope and Reason %q, want %q", scopes, want)
	}
	// A request matching one policy names it.
	if res := do(t, c, "GET", srv.URL+"/img/b.png", map[string]string{"X-API-Key": "key-pro-1"}); res.header.Get("X-RateLimit-Scope") != "pro" {
		t.Fatalf("scope %q, want pro", res.header.Get("X-RateLimit-Scope"))
	}

	got := promtest.Decisions(t, reg)
	want := map[string]float64{
		"request purge allowed":     3,
		"request purge denied":      1,
		"request per-route allowed": 4, // the 4th request: purge refused, per-route would have admitted
		"shadow shadow allowed":     1,
		"shadow shadow would_deny":  2, // the refused request charges no dry-run policy
		"request pro allowed":       1,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("floodgate_decisions_total by source, policy and outcome:\n got %v\nwant %v", got, want)
	}
}
