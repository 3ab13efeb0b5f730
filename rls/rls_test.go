package rls_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/rls"
)

// Fixtures written from the semantics envoyproxy/ratelimit documents in its
// README (a domain per file, descriptors with and without values, nested
// descriptors, wildcards, unlimited, shadow mode, replaces).
var fixtures = map[string]string{
	"mongo.yaml": `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: hour
      requests_per_unit: 5
  - key: database
    value: default
    rate_limit:
      unit: hour
      requests_per_unit: 3
`,
	"messaging.yaml": `
domain: messaging
descriptors:
  # Marketing messages: 4 per day to each number.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 4
  # Any message: 100 per day to each number.
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`,
	"edge.yaml": `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 3
  # The health checker is never limited.
  - key: remote_address
    value: 10.0.0.1
    rate_limit:
      unlimited: true
  - key: path
    value: /api/*
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 50
  - key: client
    value: trial
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
`,
	"replaces.yaml": `
domain: api
descriptors:
  - key: api_key
    rate_limit:
      name: per-key
      unit: hour
      requests_per_unit: 2
  - key: plan
    value: enterprise
    rate_limit:
      unit: hour
      requests_per_unit: 5
      replaces:
        - name: per-key
`,
	"origin.yaml": `
domain: edge
descriptors:
  - key: destination_cluster
    value: image-origin.prod
    rate_limit:
      unit: second
      requests_per_unit: 15000
    descriptors:
      - key: source_service
        value: purge-orchestrator
        rate_limit:
          unit: second
          requests_per_unit: 500
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 10
`,
}

// forStores runs f on memstore, a Redis node and a Redis Cluster.
func forStores(t *testing.T, f func(t *testing.T, srv *server)) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			f(t, serve(t, st.make(t, nil), fixtures))
		})
	}
}

func TestReadmeExamples(t *testing.T) {
	forStores(t, func(t *testing.T, srv *server) {
		// Values: each its own budget; a value with no descriptor is not limited.
		for i, w := range []string{"OK 4", "OK 3", "OK 2", "OK 1", "OK 0", "OVER", "OVER"} {
			code := ok
			if strings.HasPrefix(w, "OVER") {
				code = over
			}
			t.Logf("call %d", i)
			want(t, srv.call(t, "mongo_cps", 0, desc("database", "users")), code, w)
		}
		want(t, srv.call(t, "mongo_cps", 0, desc("database", "default")), ok, "OK 2")
		want(t, srv.call(t, "mongo_cps", 0, desc("database", "orders")), ok, "OK -")

		// Nested: marketing messages to a number, 4 a day, apart from the
		// 100 a day of any message to it; the first level alone has no limit.
		for range 4 {
			srv.call(t, "messaging", 0, desc("message_type", "marketing", "to_number", "2061111111"))
		}
		want(t, srv.call(t, "messaging", 0, desc("message_type", "marketing", "to_number", "2061111111")), over, "OVER")
		want(t, srv.call(t, "messaging", 0, desc("message_type", "marketing", "to_number", "2062222222")), ok, "OK 3")
		want(t, srv.call(t, "messaging", 0, desc("to_number", "2061111111")), ok, "OK 99")
		want(t, srv.call(t, "messaging", 0, desc("message_type", "marketing")), ok, "OK -")
		// More entries than the config has levels: no limit.
		want(t, srv.call(t, "messaging", 0, desc("to_number", "2061111111", "extra", "x")), ok, "OK -")

		// Key without value (per IP), unlimited value, wildcard value.
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "192.0.2.1")), ok, "OK 2")
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "192.0.2.2")), ok, "OK 2")
		for range 5 {
			want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "10.0.0.1")), ok, "OK unlimited")
		}
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("path", "/api/users")), ok, "OK 1")
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("path", "/api/orders")), ok, "OK 1") // each value its own counter
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("path", "/api/users")), ok, "OK 0")
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("path", "/api/users")), over, "OVER")
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("path", "/static/a.css")), ok, "OK 49")

		// Shadow mode: over its limit, still OK.
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("client", "trial")), ok, "OK 0")
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("client", "trial")), ok, "OK 0")
		// A shadow descriptor beside an enforcing one decides nothing.
		want(t, srv.call(t, "edge_proxy_per_ip", 0, desc("client", "trial"), desc("remote_address", "192.0.2.9")), ok, "OK 0", "OK 2")

		// Unknown domain: OK, no limit.
		want(t, srv.call(t, "nowhere", 0, desc("database", "users")), ok, "OK -")
	})
}

func TestReplaces(t *testing.T) {
	forStores(t, func(t *testing.T, srv *server) {
		// Alone, the per-key limit applies.
		want(t, srv.call(t, "api", 0, desc("api_key", "k1")), ok, "OK 1")
		want(t, srv.call(t, "api", 0, desc("api_key", "k1")), ok, "OK 0")
		want(t, srv.call(t, "api", 0, desc("api_key", "k1")), over, "OVER")
		// With the enterprise plan, it is replaced: the plan's 5 decide.
		for _, w := range []string{"OK 4", "OK 3", "OK 2", "OK 1", "OK 0"} {
			want(t, srv.call(t, "api", 0, desc("api_key", "k1"), desc("plan", "enterprise")), ok, "OK -", w)
		}
		want(t, srv.call(t, "api", 0, desc("api_key", "k1"), desc("plan", "enterprise")), over, "OK -", "OVER")
	})
}

func TestUnlimitedAnswer(t *testing.T) {
	srv := serve(t, stores[0].make(t, nil), fixtures)
	st := srv.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "10.0.0.1")).Statuses[0]
	if st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 || st.DurationUntilReset != nil {
		t.Fatalf("unlimited: %v, want OK, no current limit, limit_remaining 2^32-1 (the reference's)", st)
	}
}

func TestRequestErrors(t *testing.T) {
	srv := serve(t, stores[0].make(t, nil), fixtures)
	ctx := context.Background()
	for _, req := range []*rlspb.RateLimitRequest{
		{Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "edge"},
	} {
		_, err := srv.client.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}

// alignSecond waits for the start of a second, so that a test's calls fall
// in one window of a per-second limit.
func alignSecond() {
	for {
		now := time.Now()
		if now.Nanosecond() < 20_000_000 {
			return
		}
		time.Sleep(time.Second - time.Duration(now.Nanosecond()) + time.Millisecond)
	}
}

// The image origin takes 15000 rps; the purge orchestrator 500 of them.
// Envoy sends both descriptors on each purge request.
func TestImageOriginPurgeOrchestrator(t *testing.T) {
	forStores(t, func(t *testing.T, srv *server) {
		origin := func() *ratelimitpb.RateLimitDescriptor { return desc("destination_cluster", "image-origin.prod") }
		purge := func() *ratelimitpb.RateLimitDescriptor {
			return desc("destination_cluster", "image-origin.prod", "source_service", "purge-orchestrator")
		}
		thumb := func() *ratelimitpb.RateLimitDescriptor {
			return desc("destination_cluster", "image-origin.prod", "source_service", "thumbnailer")
		}
		for attempt := 0; ; attempt++ {
			alignSecond()
			start := time.Now()
			r1 := srv.call(t, "edge", 400, origin(), purge())
			r2 := srv.call(t, "edge", 100, origin(), purge())
			r3 := srv.call(t, "edge", 1, origin(), purge())
			// Another service: only the origin's limit applies.
			r4 := srv.call(t, "edge", 1000, origin(), thumb())
			if time.Since(start) > 900*time.Millisecond && attempt < 3 {
				continue // the calls crossed a window: try again
			}
			want(t, r1, ok, "OK 14600", "OK 100")
			want(t, r2, ok, "OK 14500", "OK 0")
			// The orchestrator is over; the refused request charged nothing.
			want(t, r3, over, "OK 14500", "OVER")
			want(t, r4, ok, "OK 13500", "OK -")
			for _, r := range []*rlspb.RateLimitResponse{r1, r3} {
				for _, st := range r.Statuses {
					if st.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_SECOND || st.DurationUntilReset.AsDuration() != time.Second {
						t.Errorf("%v: want unit SECOND and duration_until_reset 1s", st)
					}
				}
			}
			return
		}
	})
}

func TestHitsAddend(t *testing.T) {
	forStores(t, func(t *testing.T, srv *server) {
		tenant := func() *ratelimitpb.RateLimitDescriptor { return desc("tenant", "t1") }
		want(t, srv.call(t, "edge", 8, tenant()), ok, "OK 2")
		// 5 more cross the limit of 10: refused, and (floodgate) not counted.
		want(t, srv.call(t, "edge", 5, tenant()), over, "OVER")
		// Descriptor-level 0: check without counting.
		want(t, srv.call(t, "edge", 5, withHits(tenant(), 0)), ok, "OK 2")
		want(t, srv.call(t, "edge", 0, withHits(tenant(), 0)), ok, "OK 2")
		// The descriptor's own hits_addend wins over the request's.
		want(t, srv.call(t, "edge", 9, withHits(tenant(), 2)), ok, "OK 0")
		want(t, srv.call(t, "edge", 0, withHits(tenant(), 0)), over, "OVER") // nothing left
		want(t, srv.call(t, "edge", 0, tenant()), over, "OVER")
		// Looking at a spent limit refuses the request: the other
		// descriptor is not charged.
		want(t, srv.call(t, "edge", 0, withHits(tenant(), 0), desc("tenant", "t3")), over, "OVER", "OK 10")
		want(t, srv.call(t, "edge", 0, desc("tenant", "t3")), ok, "OK 9")
		// A cost larger than the limit can never pass.
		want(t, srv.call(t, "edge", 11, desc("tenant", "t2")), over, "OVER")
		want(t, srv.call(t, "edge", 0, desc("tenant", "t2")), ok, "OK 9")
	})
}

func TestRequestLimitOverride(t *testing.T) {
	forStores(t, func(t *testing.T, srv *server) {
		d := func() *ratelimitpb.RateLimitDescriptor {
			x := desc("tenant", "t9")
			x.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR}
			return x
		}
		want(t, srv.call(t, "edge", 0, d()), ok, "OK 1")
		r := srv.call(t, "edge", 0, d())
		want(t, r, ok, "OK 0")
		if cl := r.Statuses[0].CurrentLimit; cl.RequestsPerUnit != 2 || cl.Unit != rlspb.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("current_limit %v, want the request's 2 per hour", cl)
		}
		want(t, srv.call(t, "edge", 0, d()), over, "OVER")
		// A descriptor no config entry matches takes the request's limit too.
		x := desc("unknown_key", "v")
		x.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_MINUTE}
		want(t, srv.call(t, "edge", 0, x), ok, "OK 0")
	})
}

// A fake clock for the memory store: windows open and close exactly.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestWindowBoundaries(t *testing.T) {
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2026, 1, 1, 10, 0, 57, 500_000_000, time.UTC).UnixNano())
	s := stores[0].make(t, clock)
	srv := serve(t, s, map[string]string{"w.yaml": `
domain: w
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
`}, rls.WithClock(clock))
	// Fresh key, only looked at: the window ends at 10:01:00.
	r := srv.call(t, "w", 0, withHits(desc("k", "a"), 0))
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 3*time.Second {
		t.Errorf("duration_until_reset %v, want 3s (2.5s rounded up, as the reference's whole seconds)", got)
	}
	for _, w := range []string{"OK 2", "OK 1", "OK 0", "OVER"} {
		code := ok
		if w == "OVER" {
			code = over
		}
		r = srv.call(t, "w", 0, desc("k", "a"))
		want(t, r, code, w)
		if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 3*time.Second {
			t.Errorf("duration_until_reset %v, want 3s", got)
		}
	}
	clock.advance(2499 * time.Millisecond) // 10:00:59.999
	want(t, srv.call(t, "w", 0, desc("k", "a")), over, "OVER")
	clock.advance(time.Millisecond) // 10:01:00: a new window, aligned to the epoch
	r = srv.call(t, "w", 0, desc("k", "a"))
	want(t, r, ok, "OK 2")
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != time.Minute {
		t.Errorf("duration_until_reset %v, want 60s", got)
	}
}

// On Redis the windows follow the server's clock: a per-second limit opens
// again at the next second.
func TestWindowBoundaryRedis(t *testing.T) {
	for _, st := range stores[1:] {
		t.Run(st.name, func(t *testing.T) {
			srv := serve(t, st.make(t, nil), map[string]string{"w.yaml": `
domain: w
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2}
`})
			for attempt := 0; ; attempt++ {
				alignSecond()
				start := time.Now()
				k := desc("k", start.Format("150405.000"))
				r1 := srv.call(t, "w", 0, k)
				r2 := srv.call(t, "w", 0, k)
				r3 := srv.call(t, "w", 0, k)
				if time.Since(start) > 800*time.Millisecond && attempt < 3 {
					continue
				}
				want(t, r1, ok, "OK 1")
				want(t, r2, ok, "OK 0")
				want(t, r3, over, "OVER")
				time.Sleep(time.Until(start.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
				want(t, srv.call(t, "w", 0, k), ok, "OK 1")
				return
			}
		})
	}
}

func TestConcurrentCallsExact(t *testing.T) {
	forStores(t, func(t *testing.T, srv *server) {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if srv.call(t, "edge", 1, desc("tenant", "busy")).OverallCode == ok {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if admitted.Load() != 10 {
			t.Fatalf("%d admitted of 40 concurrent calls, want exactly the limit of 10", admitted.Load())
		}
	})
}

// TestObserver: one event per call and limit, named as RateLimit-Policy
// names the limit (never by a request's values), with the limit's outcome;
// a shadow-mode limit's with Source shadow.
func TestObserver(t *testing.T) {
	var mu sync.Mutex
	var events []floodgate.Event
	obs := floodgate.ObserverFunc(func(e floodgate.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	srv := serve(t, stores[0].make(t, nil), fixtures, rls.WithObserver(obs), rls.WithHeaders(middleware.HeadersIETF))
	first := srv.call(t, "mongo_cps", 3, desc("database", "default"))
	srv.call(t, "mongo_cps", 1, desc("database", "default"))
	srv.call(t, "edge_proxy_per_ip", 2, desc("client", "trial"))
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 3 {
		t.Fatalf("%d events, want 3", len(events))
	}
	for i, w := range []floodgate.Outcome{floodgate.OutcomeAllowed, floodgate.OutcomeDenied, floodgate.OutcomeWouldDeny} {
		if events[i].Outcome != w {
			t.Errorf("event %d: %v, want %v", i, events[i].Outcome, w)
		}
	}
	if pol := header(first, "RateLimit-Policy"); !strings.HasPrefix(pol, `"`+events[0].Policy+`";`) || events[0].Policy == "" {
		t.Errorf("policy %q, want the name RateLimit-Policy gives the limit (%s)", events[0].Policy, pol)
	}
	if events[0].Source != floodgate.SourceRequest || events[2].Source != floodgate.SourceShadow {
		t.Errorf("sources %v and %v, want request, then shadow for the shadow-mode limit", events[0].Source, events[2].Source)
	}
	if d := events[0].Decision; !d.Allowed || d.Remaining != 0 || d.Limit != 3 {
		t.Errorf("first event's decision %+v, want the limit's (3 of 3 taken)", d)
	}
}
