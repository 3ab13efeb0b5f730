package rls_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/memstore"
)

var updateHeaders = flag.Bool("update-headers", false, "rewrite testdata/headers.golden from the current header writer")

// goldenYAML has a limit of every kind the header writer tells apart:
// fixed windows (named and not), a token bucket, a leaky bucket, two
// limits on one descriptor, shadow, quota and blocked ones, an unlimited one.
const goldenYAML = `domain: g
descriptors:
  - key: win
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: named
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-named}
  - key: tb
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 2, burst: 4}
  - key: both
    rate_limit: {unit: minute, requests_per_unit: 3}
    rate_limits:
      - {unit: hour, requests_per_unit: 4, algorithm: sliding-log}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: leaky
    rate_limit: {algorithm: leaky-bucket, unit: second, requests_per_unit: 1, burst: 1}
  - key: free
    rate_limit: {unlimited: true}
`

// TestHeadersGolden pins the bytes of response_headers_to_add: every header
// group, with names and by position, over a sequence of calls that runs
// limits of every kind out (a frozen clock stepping 300 ms a call), against
// testdata/headers.golden, written by the header writer before it was
// rewritten for speed (issue 25). A change of these bytes is a change of
// the contract: regenerate with -update-headers only on purpose.
func TestHeadersGolden(t *testing.T) {
	d, err := rls.ParseDomain("golden.yaml", []byte(goldenYAML))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 4, 12, 34, 56, 789_000_000, time.UTC)
	var out strings.Builder
	for _, set := range []middleware.HeaderSet{middleware.HeadersIETF | middleware.HeadersLegacy | middleware.HeadersReference, middleware.HeadersIETF, middleware.HeadersLegacy, middleware.HeadersReference} {
		for _, names := range []bool{true, false} {
			var step atomic.Int64
			clock := floodgate.ClockFunc(func() time.Time { return start.Add(time.Duration(step.Load()) * 300 * time.Millisecond) })
			s, err := memstore.New(memstore.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			svc, err := rls.New(s, rls.Config{Domains: []rls.Domain{d}}, rls.WithHeaders(set), rls.WithHeaderPolicyNames(names), rls.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "# headers %d, names %v\n", set, names)
			for i, c := range goldenCalls() {
				resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "g", Descriptors: c.ds, HitsAddend: c.hits})
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				fmt.Fprintf(&out, "%d %s %s\n", i, c.name, resp.OverallCode)
				for _, hv := range resp.ResponseHeadersToAdd {
					fmt.Fprintf(&out, "\t%s: %s\n", hv.Key, hv.Value)
				}
				step.Add(1)
			}
			_ = s.Close()
		}
	}
	const file = "testdata/headers.golden"
	if *updateHeaders {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("line %d: got %q, want %q", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("got %d lines, want %d", len(gl), len(wl))
	}
}

type goldenCall struct {
	name string
	hits uint32
	ds   []*ratelimitpb.RateLimitDescriptor
}

// goldenCalls is the sequence: each combination several times in a row,
// so that every limit is admitted, then refused.
func goldenCalls() []goldenCall {
	combos := []goldenCall{
		{"win", 0, []*ratelimitpb.RateLimitDescriptor{desc("win", "a")}},
		{"win+named", 0, []*ratelimitpb.RateLimitDescriptor{desc("win", "b"), desc("named", "x")}},
		{"tb hits 2", 2, []*ratelimitpb.RateLimitDescriptor{desc("tb", "a")}},
		{"both+tb", 0, []*ratelimitpb.RateLimitDescriptor{desc("both", "a"), desc("tb", "b")}},
		{"shadow+win", 0, []*ratelimitpb.RateLimitDescriptor{desc("shadow", "a"), desc("win", "c")}},
		{"quota+named", 0, []*ratelimitpb.RateLimitDescriptor{desc("quota", "a"), desc("named", "y")}},
		{"blocked+win", 0, []*ratelimitpb.RateLimitDescriptor{desc("blocked", "a"), desc("win", "d")}},
		{"leaky", 0, []*ratelimitpb.RateLimitDescriptor{desc("leaky", "a")}},
		{"free+unknown", 0, []*ratelimitpb.RateLimitDescriptor{desc("free", "a"), desc("nothing", "a")}},
		{"win twice", 0, []*ratelimitpb.RateLimitDescriptor{desc("win", "e"), desc("win", "e")}},
		{"hits 5 all", 5, []*ratelimitpb.RateLimitDescriptor{desc("win", "f"), desc("named", "z"), desc("tb", "c"), desc("both", "b"), desc("quota", "b")}},
	}
	var calls []goldenCall
	for _, c := range combos {
		for range 4 {
			calls = append(calls, c)
		}
	}
	return calls
}

// TestHeadersManyLimits: a request naming more limits than the writer
// tracks by linear search (32) still advertises each limit once, in the
// order of its first descriptor, and the limits it names twice once.
func TestHeadersManyLimits(t *testing.T) {
	const n = 40
	var y strings.Builder
	y.WriteString("domain: many\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&y, "  - key: k%d\n    rate_limit: {unit: second, requests_per_unit: %d}\n", i, i+1)
	}
	d, err := rls.ParseDomain("many.yaml", []byte(y.String()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	svc, err := rls.New(s, rls.Config{Domains: []rls.Domain{d}}, rls.WithHeaders(middleware.HeadersIETF), rls.WithHeaderPolicyNames(false))
	if err != nil {
		t.Fatal(err)
	}
	var ds []*ratelimitpb.RateLimitDescriptor
	var want []string
	for round := range 2 { // every limit twice: the second time, each is known
		for i := range n {
			ds = append(ds, desc(fmt.Sprintf("k%d", i), "v"))
			if round == 0 {
				name := "default"
				if i > 0 {
					name = fmt.Sprintf("limit-%d", i+1)
				}
				want = append(want, fmt.Sprintf("%q;q=%d;w=1", name, i+1))
			}
		}
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "many", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	for _, hv := range resp.ResponseHeadersToAdd {
		if hv.Key == "RateLimit-Policy" {
			if got := strings.Join(want, ", "); hv.Value != got {
				t.Fatalf("RateLimit-Policy\n %s\nwant\n %s", hv.Value, got)
			}
			return
		}
	}
	t.Fatalf("no RateLimit-Policy in %v", resp.ResponseHeadersToAdd)
}
