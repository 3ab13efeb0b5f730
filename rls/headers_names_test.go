package rls_test

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
)

// RateLimit-Policy and RateLimit, which end clients see, never hold the
// config's paths: a limit is named by its rate_limit name, else by a short
// hash; WithHeaderPolicyNames(false) names the members by position.
func TestHeaderNamesDoNotRevealConfig(t *testing.T) {
	files := map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {unit: second, requests_per_unit: 15000}
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit: {unit: second, requests_per_unit: 500}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10, name: per-tenant}
`}
	call := func(srv *server) map[string]string {
		r := srv.call(t, "edge", 0, desc("destination_cluster", "image-origin.prod", "source_service", "purge-orchestrator"), desc("tenant", "t"))
		h := map[string]string{}
		for _, hv := range r.ResponseHeadersToAdd {
			h[hv.Key] = hv.Value
		}
		return h
	}
	h := call(serve(t, stores[0].make(t, nil), files, rls.WithHeaders(middleware.HeadersIETF)))
	for _, k := range []string{"RateLimit-Policy", "RateLimit"} {
		v := h[k]
		if strings.Contains(v, "purge") || strings.Contains(v, "image-origin") || strings.Contains(v, "destination_cluster") {
			t.Errorf("%s %q reveals the config path", k, v)
		}
		if !strings.Contains(v, `"per-tenant";`) || !strings.Contains(v, `"rl-`) {
			t.Errorf("%s %q, want the rate_limit name and a hashed name", k, v)
		}
	}
	h = call(serve(t, stores[0].make(t, nil), files, rls.WithHeaders(middleware.HeadersIETF), rls.WithHeaderPolicyNames(false)))
	if p := h["RateLimit-Policy"]; p != `"default";q=500;w=1, "limit-2";q=10;w=3600` {
		t.Errorf("RateLimit-Policy %q, want members named by position", p)
	}
}
