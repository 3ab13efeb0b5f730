package rls_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/rls"
)

// The README's reload example: raising 10 to 20 an hour on a key with 8
// left, the next request gets 7 remaining (the units left stay; the
// reference, keeping the count, says 17).
func TestReloadKeepsUnitsLeft(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			srv := serve(t, st.make(t, nil), map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"})
			d := desc("k", t.Name())
			want(t, srv.call(t, "r", 2, d), ok, "OK 8")
			cfg, err := rls.ParseDomain("r.yaml", []byte("domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20}\n"))
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.svc.Update(rls.Config{Domains: []rls.Domain{cfg}}, "test"); err != nil {
				t.Fatal(err)
			}
			want(t, srv.call(t, "r", 0, d), ok, "OK 7")
			want(t, srv.call(t, "r", 0, desc("k", t.Name()+"-fresh")), ok, "OK 19")
		})
	}
}
