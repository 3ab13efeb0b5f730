package rls_test

import (
	"testing"
)

// (another one was over) is charged nothing, and counts nothing there.
func TestWithinLimitCountsAdmittedHitsOnly(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			srv, val := serveCounted(t, st.make(t, nil), "w", map[string]string{"w.yaml": `
domain: w
descriptors:
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: narrow
    rate_limit: {unit: hour, requests_per_unit: 1}
`})
			wide, narrow := desc("wide", t.Name()), desc("narrow", t.Name())
			want(t, srv.call(t, "w", 0, wide, narrow), ok, "OK 99", "OK 0")
			want(t, srv.call(t, "w", 0, wide, narrow), over, "OK 99", "OVER")
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
