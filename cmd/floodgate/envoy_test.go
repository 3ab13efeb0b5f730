package main

import (
	"context"
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/rls"
)

// TestReplayEnvoyConfigEqualsService replays CSV lines through the rls
// module's example config, each line's key as the tenant descriptor and
// its cost as hits_addend, and decides the same requests through an
// rls.Service directly.
func TestReplayEnvoyConfigEqualsService(t *testing.T) {
	res, got := replayVerdicts(t, "-config", edgeYAML, "-format", "csv", "-descriptor", "tenant=$key", "-min-observation", "1s", "testdata/requests.csv")
	cfg, err := rls.LoadDir(strings.TrimSuffix(edgeYAML, "/edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mem, clk := testStore(t)
	svc, err := rls.New(mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for _, e := range readCSV(t) {
		clk.ns.Store(e.t.UnixNano())
		resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{
			Domain:     "edge",
			HitsAddend: uint32(e.cost),
			Descriptors: []*ratelimitpb.RateLimitDescriptor{{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{
				{Key: "tenant", Value: e.key}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		want[e.line] = "allowed "
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			want[e.line] = "refused tenant=" + e.key
		}
	}
	compareVerdicts(t, want, got)
	names := map[string]bool{}
	for _, r := range res.Reports {
		names[r.Policy] = true
	}
	if res.Mode != "descriptors, domain edge" || !names["edge.tenant"] || !names["edge.tenant#1"] {
		t.Errorf("mode %q, reports of %v", res.Mode, names)
	}
	// A policy name, or no descriptor: refused.
	for _, args := range [][]string{
		{"-config", edgeYAML, "-policy", "x", "testdata/access.log"},
		{"-config", edgeYAML, "testdata/access.log"},
	} {
		if _, errs, code := runCmd(t, append([]string{"replay"}, args...)...); code != exitUsage || !strings.Contains(errs, "give -descriptor, not -policy") {
			t.Errorf("replay %v: code %d, %q", args, code, errs)
		}
	}
	// A leased limit is replayed on its bucket.
	if _, errs, code := runCmd(t, "replay", "-config", leasedYAML, "-format", "csv", "-descriptor", "destination_cluster=image-origin.prod", "testdata/requests.csv"); code != exitOK {
		t.Errorf("leased config: code %d, %s", code, errs)
	}
}
