package rls_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
)

// A token bucket's headers follow floodgate's middleware: X-RateLimit-Limit
// is the capacity (the burst), so that Remaining never exceeds it, and
// RateLimit-Policy's q per w the rate, scaled so that q is the burst.
func TestTokenBucketHeaders(t *testing.T) {
	srv := serve(t, stores[0].make(t, nil), map[string]string{"tb.yaml": `
domain: tb
descriptors:
  - key: k
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 100, burst: 200}
`}, rls.WithHeaders(middleware.HeadersLegacy|middleware.HeadersIETF))
	r := srv.call(t, "tb", 0, desc("k", "v"))
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if h["X-RateLimit-Limit"] != "200" || h["X-RateLimit-Remaining"] != "199" {
		t.Errorf("X-RateLimit-Limit %q Remaining %q, want 200 and 199 (the burst)", h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"])
	}
	if p := h["RateLimit-Policy"]; len(p) == 0 || p[len(p)-len(";q=200;w=2"):] != ";q=200;w=2" {
		t.Errorf("RateLimit-Policy %q, want q=200;w=2 (the rate, scaled to the burst, as the middleware)", p)
	}
}
