package rls_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate/rls"
)

// (another one was over) is charged nothing, and counts nothing there.
func TestWithinLimitCountsAdmittedHitsOnly(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := rls.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, st.make(t, nil), map[string]string{"w.yaml": `
domain: w
descriptors:
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: narrow
    rate_limit: {unit: hour, requests_per_unit: 1}
`}, rls.WithMetrics(m))
			wide, narrow := desc("wide", t.Name()), desc("narrow", t.Name())
			want(t, srv.call(t, "w", 0, wide, narrow), ok, "OK 99", "OK 0")
			want(t, srv.call(t, "w", 0, wide, narrow), over, "OK 99", "OVER")
			val := func(name, key string) float64 {
				return testutil.ToFloat64(metric(t, reg, "ratelimit_service_rate_limit_"+name, "domain", "w", "key", key))
			}
			if got := val("within_limit", "wide"); got != 1 {
				t.Errorf("within_limit of wide %v, want 1 (the refused request charged nothing)", got)
			}
			if got := val("total_hits", "wide"); got != 2 {
				t.Errorf("total_hits of wide %v, want 2", got)
			}
			if got := val("over_limit", "narrow"); got != 1 {
				t.Errorf("over_limit of narrow %v, want 1", got)
			}
		})
	}
}
