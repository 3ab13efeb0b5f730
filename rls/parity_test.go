package rls_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store"
)

// A request refused by a nested descriptor still counts on its parent:
// every hit lands in total_hits and in exactly one of within_limit,
// over_limit and refused_by_other.
func TestParentCountsEveryHit(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			srv, val := serveCounted(t, st.make(t, nil), "edge", map[string]string{"e.yaml": `
domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit: {unit: hour, requests_per_unit: 100}
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit: {unit: hour, requests_per_unit: 2}
`})
			parent := desc("destination_cluster", "image-origin.prod")
			nested := desc("destination_cluster", "image-origin.prod", "source_service", "purge-orchestrator")
			want(t, srv.call(t, "edge", 0, parent, nested), ok, "OK 99", "OK 1")
			want(t, srv.call(t, "edge", 0, parent, nested), ok, "OK 98", "OK 0")
			for range 3 {
				want(t, srv.call(t, "edge", 0, parent, nested), over, "OK 98", "OVER")
			}
			const pk = "destination_cluster_image-origin.prod"
			total, within, over, other := val("total_hits", pk), val("within_limit", pk), val("over_limit", pk), val("refused_by_other", pk)
			if total != 5 || within != 2 || over != 0 || other != 3 {
				t.Errorf("parent: total_hits %v within_limit %v over_limit %v refused_by_other %v, want 5 = 2 + 0 + 3", total, within, over, other)
			}
			const nk = pk + ".source_service_purge-orchestrator"
			if total, within, over := val("total_hits", nk), val("within_limit", nk), val("over_limit", nk); total != 5 || within != 2 || over != 3 {
				t.Errorf("nested: total_hits %v within_limit %v over_limit %v, want 5 = 2 + 3", total, within, over)
			}
		})
	}
}

// serveCounted serves files on st with metrics, and returns the service
// and val, which reads the rate-limit counter name of (domain, key).
func serveCounted(t *testing.T, st store.Store, domain string, files map[string]string, opts ...rls.Option) (*server, func(name, key string) float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, st, files, append(opts, rls.WithMetrics(m))...)
	return srv, func(name, key string) float64 {
		return testutil.ToFloat64(metric(t, reg, "ratelimit_service_rate_limit_"+name, "domain", domain, "key", key))
	}
}

// header returns the value of header k in r's response_headers_to_add.
func header(r *rlspb.RateLimitResponse, k string) string {
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == k {
			return h.Value
		}
	}
	return ""
}

// A token bucket and a 30 s window on one descriptor are advertised as two
// limits, each under its own name, on every response: RateLimit-Policy
// does not switch from one to the other as the one closest to its limit
// changes.
func TestDistinctLimitsDistinctNames(t *testing.T) {
	srv := serve(t, stores[0].make(t, nil), map[string]string{"e.yaml": `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {name: burst, algorithm: token-bucket, unit: second, requests_per_unit: 500}
    rate_limits:
      - {unit: 30s, requests_per_unit: 3}
  - key: plan
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 500}
    rate_limits:
      - {unit: 30s, requests_per_unit: 6000}
`}, rls.WithHeaders(middleware.HeadersIETF))
	var policies []string
	for i := range 4 {
		r := srv.call(t, "edge", 0, desc("tenant", "a"))
		pol := header(r, "RateLimit-Policy")
		policies = append(policies, pol)
		members := strings.Split(pol, ", ")
		if len(members) != 2 || !strings.HasPrefix(members[0], `"burst";q=500;w=1`) || strings.HasPrefix(members[1], `"burst"`) ||
			!strings.HasSuffix(members[1], ";q=3;w=30") {
			t.Fatalf("call %d: RateLimit-Policy %q, want the bucket as \"burst\" and the window under a name of its own", i, pol)
		}
		if i > 0 && pol != policies[0] {
			t.Errorf("call %d: RateLimit-Policy %q changed from %q", i, pol, policies[0])
		}
		if i == 3 {
			// Refused by the window: only its member is in RateLimit.
			if rl := header(r, "RateLimit"); strings.Contains(rl, `"burst"`) || !strings.Contains(rl, ";r=0;") {
				t.Errorf("refused: RateLimit %q, want the window's member alone with r=0", rl)
			}
		}
	}
	// Unnamed limits: two names, both hashes.
	pol := header(srv.call(t, "edge", 0, desc("plan", "p")), "RateLimit-Policy")
	if m := strings.Split(pol, ", "); len(m) != 2 || m[0][:12] == m[1][:12] {
		t.Errorf("RateLimit-Policy %q, want two members with distinct names", pol)
	}

}

func mustParse(t *testing.T, name, body string) rls.Domain {
	t.Helper()
	d, err := rls.ParseDomain(name, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The global quota mode, the dynamic metadata and the reference's headers,
// as envoyproxy/ratelimit answers with QUOTA_MODE,
// RESPONSE_DYNAMIC_METADATA and LIMIT_RESPONSE_HEADERS_ENABLED.
func TestGlobalQuotaModeMetadataReferenceHeaders(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			srv := serve(t, st.make(t, nil), map[string]string{"q.yaml": `
domain: q
descriptors:
  - key: model
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: user
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
`}, rls.WithGlobalQuotaMode(true), rls.WithDynamicMetadata(true), rls.WithHeaders(middleware.HeadersReference))
			model := desc("model", "gpt")
			var r *rlspb.RateLimitResponse
			for i, w := range []string{"OK 1", "OK 0", "OK 0", "OK 0"} {
				r = srv.call(t, "q", 0, model)
				want(t, r, ok, w)
				if got := header(r, "RateLimit-Remaining"); got != w[3:] {
					t.Errorf("call %d: RateLimit-Remaining %q, want %s", i, got, w[3:])
				}
			}
			st0 := r.Statuses[0]
			if st0.CurrentLimit.GetRequestsPerUnit() != 2 || st0.DurationUntilReset != nil {
				t.Errorf("over its quota: %v, want OK with current_limit 2 and no duration_until_reset", st0)
			}
			if got := header(r, "RateLimit-Limit"); got != "2" {
				t.Errorf("RateLimit-Limit %q, want 2", got)
			}
			if reset := header(r, "RateLimit-Reset"); reset == "" || reset == "0" || len(reset) > 4 {
				t.Errorf("RateLimit-Reset %q, want the seconds to the hour's end", reset)
			}
			md := r.DynamicMetadata.AsMap()
			if md["domain"] != "q" || md["quotaModeEnabled"] != false {
				t.Errorf("metadata %v, want domain q, quotaModeEnabled false (the global mode does not count)", md)
			}
			if v, _ := md["quotaModeViolations"].([]any); len(v) != 1 || v[0] != 0.0 {
				t.Errorf("quotaModeViolations %v, want [0]", md["quotaModeViolations"])
			}
			ds, _ := md["descriptors"].([]any)
			if len(ds) != 1 || ds[0].(map[string]any)["entries"].([]any)[0] != "model=gpt" {
				t.Errorf("descriptors %v, want one with entries [model=gpt]", md["descriptors"])
			}
			// A quota_mode limit in the config sets quotaModeEnabled; the
			// request's hits_addend is in the metadata.
			r = srv.call(t, "q", 3, desc("user", "u"), model)
			want(t, r, ok, "OK 2", "OK 0")
			md = r.DynamicMetadata.AsMap()
			if md["quotaModeEnabled"] != true || md["hitsAddend"] != 3.0 {
				t.Errorf("metadata %v, want quotaModeEnabled true and hitsAddend 3", md)
			}
			if v, _ := md["quotaModeViolations"].([]any); len(v) != 1 || v[0] != 1.0 {
				t.Errorf("quotaModeViolations %v, want [1]", md["quotaModeViolations"])
			}
		})
	}
	// Without the global mode a descriptor over its limit refuses, and
	// RateLimit-Remaining says 0 of it.
	srv := serve(t, stores[0].make(t, nil), map[string]string{"q.yaml": `
domain: q
descriptors:
  - key: model
    rate_limit: {unit: hour, requests_per_unit: 1}
`}, rls.WithHeaders(middleware.HeadersReference))
	srv.call(t, "q", 0, desc("model", "m"))
	r := srv.call(t, "q", 0, desc("model", "m"))
	want(t, r, over, "OVER")
	if r.DynamicMetadata != nil || header(r, "RateLimit-Remaining") != "0" || header(r, "RateLimit-Limit") != "1" {
		t.Errorf("%v: want no metadata, RateLimit-Limit 1, RateLimit-Remaining 0", r)
	}
}

// commandCalls is the number of scripts Redis has run (INFO commandstats:
// fcall, fcall_ro, evalsha, eval).
func commandCalls(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_fcall:", "cmdstat_fcall_ro:", "cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd+"calls="); ok {
				var k int64
				for _, ch := range rest {
					if ch < '0' || ch > '9' {
						break
					}
					k = k*10 + int64(ch-'0')
				}
				n += k
			}
		}
	}
	return n
}

// The over-limit cache answers what the store would, without asking it:
// a key refused with nothing left is refused locally until its window
// ends, the answers identical to those of a service without the cache.
func TestOverLimitCacheSparesRedis(t *testing.T) {
	c := redisClient(t, []string{singleAddr(t)})
	files := map[string]string{"c.yaml": `
domain: c
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100}
`}
	cached, val := serveCounted(t, redisStore(t, c), "c", files, rls.WithOverLimitCache(100))
	plain := serve(t, redisStore(t, c), files)
	for i := range 3 {
		a, b := cached.call(t, "c", 0, desc("client", "x")), plain.call(t, "c", 0, desc("client", "x"))
		if d := sameAnswer(a, b); d != "" {
			t.Fatalf("call %d: %s", i, d)
		}
	}
	// x is over its limit and known so: its calls reach no Redis script.
	before := commandCalls(t, c)
	for i := range 10 {
		a := cached.call(t, "c", 0, desc("client", "x"))
		want(t, a, over, "OVER")
		if d := sameAnswer(a, plain.call(t, "c", 0, desc("client", "x"))); d != "" {
			t.Fatalf("known over, call %d: %s", i, d)
		}
	}
	if got := commandCalls(t, c) - before; got != 10 {
		t.Errorf("%d scripts run for 10 calls to each service, want 10 (the plain service's alone)", got)
	}
	if got := val("over_limit_with_local_cache", "client"); got != 10 {
		t.Errorf("over_limit_with_local_cache %v, want 10", got)
	}
	// With another descriptor: refused as a whole, the other one read and
	// not charged, as without the cache.
	for range 2 {
		a, b := cached.call(t, "c", 0, desc("route", "r"), desc("client", "x")), plain.call(t, "c", 0, desc("route", "r"), desc("client", "x"))
		want(t, a, over, "OK 100", "OVER")
		if d := sameAnswer(a, b); d != "" {
			t.Fatal(d)
		}
	}
	// Hits given back on this process: forgotten, the store decides.
	for _, srv := range []*server{cached, plain} {
		want(t, srv.call(t, "c", 0, negative(desc("client", "x"), 1)), ok, "OK 1")
		want(t, srv.call(t, "c", 0, desc("client", "x")), ok, "OK 0")
	}
}

func negative(d *ratelimitpb.RateLimitDescriptor, n uint64) *ratelimitpb.RateLimitDescriptor {
	d.IsNegativeHits = true
	return withHits(d, n)
}

// sameAnswer tells what differs between two answers (durations within a
// second).
func sameAnswer(a, b *rlspb.RateLimitResponse) string {
	if a.OverallCode != b.OverallCode || len(a.Statuses) != len(b.Statuses) {
		return "answers differ: " + a.String() + " vs " + b.String()
	}
	for i := range a.Statuses {
		x, y := a.Statuses[i], b.Statuses[i]
		dx, dy := x.GetDurationUntilReset().AsDuration(), y.GetDurationUntilReset().AsDuration()
		if x.Code != y.Code || x.LimitRemaining != y.LimitRemaining || x.CurrentLimit.GetRequestsPerUnit() != y.CurrentLimit.GetRequestsPerUnit() ||
			dx-dy > time.Second || dy-dx > time.Second {
			return "status differs: " + x.String() + " vs " + y.String()
		}
	}
	return ""
}

// The cache's entries end when the limit admits again: a fixed window at
// its end, a token bucket refused one unit when the unit is back.
func TestOverLimitCacheExpires(t *testing.T) {
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	srv := serve(t, stores[0].make(t, clock), map[string]string{"c.yaml": `
domain: c
descriptors:
  - key: w
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 1}
`}, rls.WithClock(clock), rls.WithOverLimitCache(10))
	for _, k := range []string{"w", "b"} {
		want(t, srv.call(t, "c", 0, desc(k, "x")), ok, "OK 0")
		want(t, srv.call(t, "c", 0, desc(k, "x")), over, "OVER")
	}
	clock.advance(999 * time.Millisecond)
	want(t, srv.call(t, "c", 0, desc("b", "x")), over, "OVER")
	want(t, srv.call(t, "c", 0, desc("w", "x")), over, "OVER")
	clock.advance(time.Millisecond)
	want(t, srv.call(t, "c", 0, desc("b", "x")), ok, "OK 0")
	want(t, srv.call(t, "c", 0, desc("w", "x")), over, "OVER")
	clock.advance(59 * time.Second)
	want(t, srv.call(t, "c", 0, desc("w", "x")), ok, "OK 0")
}

// Concurrent calls with the over-limit cache: exactly the limit admitted,
// every other call refused, the cache filling and answering meanwhile.
func TestOverLimitCacheConcurrent(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			srv := serve(t, st.make(t, nil), map[string]string{"c.yaml": `
domain: c
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10}
`}, rls.WithOverLimitCache(4))
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 6 {
						// Keys beyond the cache's bound too: those the store
						// decides.
						key := "busy"
						if i%3 == 2 {
							key = "k" + strconv.Itoa(g)
						}
						r := srv.call(t, "c", 1, desc("tenant", key))
						switch {
						case key != "busy":
						case r.OverallCode == ok:
							admitted.Add(1)
						case r.Statuses[0].LimitRemaining == 0 && r.Statuses[0].DurationUntilReset.AsDuration() > 0:
							refused.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if admitted.Load() != 10 || refused.Load() != 22 {
				t.Fatalf("%d admitted and %d refused of 32 calls on one key, want exactly 10 and 22", admitted.Load(), refused.Load())
			}
		})
	}
}

// A request with enforcing, shadow-mode and quota-mode descriptors is one
// Redis call when every one admits, and answers as when each kind is
// decided on its own when one does not.
func TestOneRedisCallPerRequest(t *testing.T) {
	c := redisClient(t, []string{singleAddr(t)})
	srv := serve(t, redisStore(t, c), map[string]string{"m.yaml": `
domain: m
descriptors:
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: tenant
    rate_limit: {algorithm: token-bucket, unit: hour, requests_per_unit: 50}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: model
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`})
	ds := func() []*ratelimitpb.RateLimitDescriptor {
		return []*ratelimitpb.RateLimitDescriptor{desc("route", "r"), desc("tenant", "t"), desc("trial", "x"), desc("model", "m")}
	}
	// The first call loads the store's programs into Redis.
	want(t, srv.call(t, "m", 0, desc("route", "warm"), desc("tenant", "warm"), desc("trial", "warm"), desc("model", "warm")), ok, "OK 99", "OK 49", "OK 1", "OK 2")
	for i, w := range [][]string{{"OK 99", "OK 49", "OK 1", "OK 2"}, {"OK 98", "OK 48", "OK 0", "OK 1"}} {
		before := commandCalls(t, c)
		want(t, srv.call(t, "m", 0, ds()...), ok, w...)
		if got := commandCalls(t, c) - before; got != 1 {
			t.Errorf("call %d: %d Redis scripts for four descriptors of three kinds, want 1", i, got)
		}
	}
	// Two quota-mode descriptors alone: one call too.
	before := commandCalls(t, c)
	want(t, srv.call(t, "m", 0, desc("model", "a"), desc("model", "b")), ok, "OK 2", "OK 2")
	if got := commandCalls(t, c) - before; got != 1 {
		t.Errorf("%d Redis scripts for two quota-mode descriptors, want 1", got)
	}
	// The shadow descriptor is over: the others are charged, it is not.
	want(t, srv.call(t, "m", 0, ds()...), ok, "OK 97", "OK 47", "OK 0", "OK 0")
	// The quota descriptor is over too: answered OK with nothing left, the
	// others charged.
	want(t, srv.call(t, "m", 0, ds()...), ok, "OK 96", "OK 46", "OK 0", "OK 0")
	want(t, srv.call(t, "m", 0, withHits(desc("route", "r"), 0), withHits(desc("model", "m"), 0)), ok, "OK 96", "OK 0")
	// An enforcing descriptor over its limit: the other enforcing one is
	// not charged, the quota one is (each decided on its own).
	want(t, srv.call(t, "m", 0, desc("route", "r2"), desc("model", "m2"), withHits(desc("tenant", "t2"), 51)), over, "OK 100", "OK 2", "OVER")
	want(t, srv.call(t, "m", 0, desc("route", "r2"), desc("model", "m2")), ok, "OK 99", "OK 1")
}
