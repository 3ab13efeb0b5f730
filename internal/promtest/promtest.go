// Package promtest reads what promobserver counted in a real Prometheus
// registry, for the per-policy tests of the transports (httplimit,
// grpclimit and the Envoy service). Only tests import it.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Decisions sums floodgate_decisions_total of reg by "source policy
// outcome" (for example "shadow per-ip would_deny").
func Decisions(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["source"]+" "+l["policy"]+" "+l["outcome"]] += m.GetCounter().GetValue()
		}
	}
	return got
}
