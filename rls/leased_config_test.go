package rls_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/rls"
)

// leased and lease_refresh: errors at the line of the field, in rate_limit
// and in the entries of rate_limits.
func TestLeasedConfigErrors(t *testing.T) {
	const head = "domain: a\ndescriptors:\n  - key: k\n"
	for _, tc := range []struct{ yaml, want string }{
		{head + "    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      leased: true\n",
			"x.yaml:7: leased needs algorithm: token-bucket (a lease holds a token bucket's tokens); this limit is a fixed-window, the default without algorithm"},
		{head + "    rate_limit:\n      algorithm: fixed-window\n      unit: second\n      requests_per_unit: 5\n      leased: true\n",
			"x.yaml:8: leased needs algorithm: token-bucket (a lease holds a token bucket's tokens); this limit is a fixed-window, the default without algorithm"},
		{head + "    rate_limit:\n      algorithm: sliding-log\n      unit: minute\n      requests_per_unit: 5\n      leased: true\n",
			"x.yaml:8: leased needs algorithm: token-bucket (a lease holds a token bucket's tokens), not sliding-log"},
		{head + "    rate_limit:\n      algorithm: leaky-bucket\n      unit: second\n      requests_per_unit: 5\n      leased: true\n",
			"x.yaml:8: leased needs algorithm: token-bucket (a lease holds a token bucket's tokens), not leaky-bucket"},
		{head + "    rate_limit:\n      algorithm: token-bucket\n      unit: second\n      requests_per_unit: 5\n      lease_refresh: 100ms\n",
			"x.yaml:8: lease_refresh needs leased: true"},
		{head + "    rate_limit:\n      algorithm: token-bucket\n      unit: second\n      requests_per_unit: 5\n      leased: true\n      lease_refresh: 1m\n",
			"x.yaml:9: lease_refresh 1m0s outside 1ms..10s"},
		{head + "    rate_limit:\n      algorithm: token-bucket\n      unit: second\n      requests_per_unit: 5\n      leased: true\n      lease_refresh: 500us\n",
			"x.yaml:9: lease_refresh 500µs outside 1ms..10s"},
		{head + "    rate_limit:\n      algorithm: token-bucket\n      unit: second\n      requests_per_unit: 5\n      leased: true\n      lease_refresh: soon\n",
			"x.yaml:9: lease_refresh \"soon\": want a duration from 1ms to 10s, such as 100ms"},
		{head + "    rate_limit:\n      algorithm: token-bucket\n      unit: second\n      requests_per_unit: 5\n      leased: sure\n",
			"x.yaml:8: config error, expected true or false, not \"sure\""},
		{head + "    rate_limit: {unlimited: true, leased: true}\n",
			"x.yaml:4: an unlimited limit cannot be leased (leased and lease_refresh belong to a token bucket)"},
		// In rate_limits: the entry's own line.
		{head + "    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 5, leased: true}\n    rate_limits:\n      - unit: hour\n        requests_per_unit: 100\n        leased: true\n",
			"x.yaml:8: leased needs algorithm: token-bucket (a lease holds a token bucket's tokens); this limit is a fixed-window, the default without algorithm"},
	} {
		_, err := rls.ParseDomain("x.yaml", []byte(tc.yaml))
		var ce *policy.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%q: %v, want a *policy.ConfigError", tc.yaml, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.yaml, err, tc.want)
		}
	}
	d, err := rls.ParseDomain("x.yaml", []byte(head+"    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 5, leased: true, lease_refresh: 20ms}\n"+
		"    rate_limits:\n      - {algorithm: token-bucket, unit: hour, requests_per_unit: 100, leased: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := d.Descriptors[0].RateLimit; !r.Leased || r.LeaseRefresh != 20*time.Millisecond {
		t.Errorf("rate_limit %+v, want leased every 20ms", r)
	}
	if r := d.Descriptors[0].RateLimits[0]; !r.Leased || r.LeaseRefresh != 0 {
		t.Errorf("rate_limits[0] %+v, want leased at the default refresh", r)
	}
	// A config built in code is checked alike when the service compiles it.
	s := stores[1].make(t, nil)
	_, err = rls.New(s, rls.Config{Domains: []rls.Domain{{Name: "a", File: "code", Descriptors: []rls.Descriptor{{Key: "k", Line: 3,
		RateLimit: &rls.RateLimit{Unit: "second", RequestsPerUnit: 5, Leased: true, Line: 4}}}}}})
	if !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.HasPrefix(fmtErr(err), "code:4: leased needs algorithm: token-bucket") {
		t.Errorf("built in code: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// The memory store grants no leases: a leased limit is refused at New and
// at a reload, with the file and line of its leased field; the running
// config stays.
func TestLeasedRefusedOnMemstore(t *testing.T) {
	const leasedYAML = "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: token-bucket\n      unit: second\n      requests_per_unit: 5\n      leased: true\n"
	const refused = "leased needs a store shared by the fleet that grants leases (redisstore: floodgate-rls -redis or -redis-cluster), not *memstore.Store"
	mem := stores[0].make(t, nil)
	dir := writeDir(t, map[string]string{"a.yaml": leasedYAML})
	cfg, err := rls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rls.New(mem, cfg)
	var ce *policy.ConfigError
	if !errors.As(err, &ce) || ce.Line != 8 || !strings.HasSuffix(ce.File, "a.yaml") || ce.Msg != refused {
		t.Fatalf("New: %v, want a.yaml:8: %s", err, refused)
	}
	srv := serve(t, mem, map[string]string{"a.yaml": strings.Replace(leasedYAML, "      leased: true\n", "", 1)})
	want(t, srv.call(t, "a", 1, desc("k", "v")), ok, "OK 4")
	err = srv.svc.ReloadDir(dir)
	if !errors.As(err, &ce) || ce.Line != 8 || ce.Msg != refused {
		t.Fatalf("reload: %v, want a.yaml:8: %s", err, refused)
	}
	if srv.svc.Version() != 1 {
		t.Errorf("version %d after the refused reload, want 1", srv.svc.Version())
	}
	want(t, srv.call(t, "a", 1, desc("k", "v")), ok, "OK 3")
}

// The README's leased example is testdata/leased/edge.yaml, verbatim: it
// runs on Redis and is refused on the memory store at its leased line.
func TestReadmeLeasedConfig(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("testdata/leased/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(file)+"```") {
		t.Fatal("README.md does not show testdata/leased/edge.yaml verbatim")
	}
	cfg, err := rls.LoadDir("testdata/leased")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rls.New(stores[0].make(t, nil), cfg); err == nil || !strings.HasPrefix(err.Error(), "testdata/leased/edge.yaml:12: leased needs a store") {
		t.Errorf("on the memory store: %v, want testdata/leased/edge.yaml:12: leased needs a store ...", err)
	}
	svc, err := rls.New(stores[1].make(t, nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(t.Context())
	srv := serveService(t, svc, "testdata/leased")
	want(t, srv.call(t, "edge", 0, desc("destination_cluster", "image-origin.prod")), ok, "OK 14999")
}
