package httplimit

import (
	"context"
	"fmt"
	"github.com/floodgate-go/floodgate/middleware"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// outageYAML gives the Policies middleware the two limits of the other
// mechanisms: pa on the descriptor (k), pb on (k2), both 7/s with a burst
// of 7.
const outageYAML = `domain: outage
policies:
  - {name: pa, rate: 7/s, burst: 7}
  - {name: pb, rate: 7/s, burst: 7}
rules:
  - key: k
    policy: pa
  - key: k2
    policy: pb
`

// answer is what a client and the observers saw of one request.
type answer struct {
	status     int
	limit      string // X-RateLimit-Limit
	retryAfter string
	outcome    string // the request's event
	store      string // the store's events: outcome and whether it had a cause
}

// outageFailures are the store failure policies, each with the middleware
// fail mode that applies when the store returns an error.
var outageFailures = []struct {
	name string
	fp   func() redisstore.FailurePolicy
	want answer // what a single limiter gives (the first request of the outage)
}{
	{"error", redisstore.FailError, answer{status: 503, retryAfter: "1", outcome: floodgate.OutcomeErrorClosed.String()}},
	{"open", redisstore.FailOpen, answer{status: 200, outcome: floodgate.OutcomeErrorOpen.String(), store: "error_open+cause"}},
	{"closed", func() redisstore.FailurePolicy { return redisstore.FailClosed(2 * time.Second) },
		answer{status: 503, retryAfter: "2", outcome: floodgate.OutcomeErrorClosed.String(), store: "error_closed+cause"}},
	// Fallback: the local limit starts drained (a refusal by the fallback).
	{"fallback", nil, answer{status: 429, limit: "7", retryAfter: "1", outcome: floodgate.OutcomeFallback.String(), store: "fallback+cause"}},
}

// Group decisions in an outage answer as a single limiter does: for each
// failure policy of the store, a real Redis is killed and every mechanism
// (one limiter, floodgate.All, WithLimit, Policies with one and with two
// policies) gets one request over real HTTP: same status, same
// X-RateLimit-Limit and Retry-After, same request outcome and the store's
// own event with its cause.
func TestGroupOutageAnswersLikeSingle(t *testing.T) {
	for _, f := range outageFailures {
		t.Run(f.name, func(t *testing.T) {
			srvRedis := redistest.Start(t)
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srvRedis.Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			fp := redisstore.Fallback(newMem(t), 1)
			if f.fp != nil {
				fp = f.fp()
			}
			storeObs := &counter{}
			rs, err := redisstore.New(client, redisstore.WithFailurePolicy(fp), redisstore.WithObserver(storeObs), redisstore.WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			a := newBucket(t, rs, floodgate.PerSecond(7), 7)
			b := newBucket(t, rs, floodgate.PerSecond(7), 7)
			both, err := floodgate.All(a, b)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := policy.Parse("outage.yaml", []byte(outageYAML))
			if err != nil {
				t.Fatal(err)
			}
			live, err := policy.NewLive(cfg, rs, policy.WithKeySecret([]byte("0123456789abcdef0123456789abcdef")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { live.Close(context.Background()) })
			key := func(r *http.Request) string { return r.Header.Get("X-Key") }
			mechanisms := []struct {
				name   string
				limits int
				mw     func(...CommonOption) (func(http.Handler) http.Handler, error)
			}{
				{"single", 1, func(o ...CommonOption) (func(http.Handler) http.Handler, error) {
					return Middleware(a, as[Option](o, WithKeyFunc(key))...)
				}},
				{"All", 1, func(o ...CommonOption) (func(http.Handler) http.Handler, error) {
					return Middleware(both, as[Option](o, WithKeyFunc(key))...)
				}},
				{"WithLimit", 2, func(o ...CommonOption) (func(http.Handler) http.Handler, error) {
					return Middleware(a, as[Option](o, WithKeyFunc(key), WithLimit(b, key))...)
				}},
				{"Policies-1", 1, func(o ...CommonOption) (func(http.Handler) http.Handler, error) {
					return Policies(live, as[PoliciesOption](o, WithDescriptor(HeaderEntry("X-Key", "k")))...)
				}},
				{"Policies-2", 2, func(o ...CommonOption) (func(http.Handler) http.Handler, error) {
					return Policies(live, as[PoliciesOption](o, WithDescriptor(HeaderEntry("X-Key", "k")), WithDescriptor(HeaderEntry("X-Key", "k2")))...)
				}},
			}
			srvRedis.Kill()
			c := clientFrom(t, "127.0.0.1")
			for _, m := range mechanisms {
				obs := &counter{}
				mw, err := m.mw(WithObserver(obs), WithFailMode(middleware.FailClosed))
				if err != nil {
					t.Fatal(err)
				}
				srv := serve(t, mw(&okHandler{}))
				before := len(storeObs.snapshot())
				res := do(t, c, "GET", srv.URL, map[string]string{"X-Key": m.name})
				got := answer{status: res.status, limit: res.header.Get("X-RateLimit-Limit"), retryAfter: res.header.Get("Retry-After")}
				// One event per (request, limit), each with the request's
				// outcome: the limits failed together.
				evs := obs.snapshot()
				if len(evs) != m.limits {
					t.Errorf("%s: %d request events, want %d", m.name, len(evs), m.limits)
				}
				for i, ev := range evs {
					if i == 0 {
						got.outcome = ev.Outcome.String()
					} else if ev.Outcome.String() != got.outcome {
						t.Errorf("%s: event %d %s, event 0 %s", m.name, i, ev.Outcome, got.outcome)
					}
				}
				got.store = storeEvents(storeObs.snapshot()[before:])
				if got != f.want {
					t.Errorf("%s under %s: got %+v, want (as a single limiter) %+v", m.name, f.name, got, f.want)
				}
			}
			// floodgate.TakeAll itself: the combined Decision as a single Take's.
			one, err1 := a.Take(context.Background(), "take-one", 1)
			checks := []floodgate.Check{{Limiter: a, Key: "take-all", N: 1}, {Limiter: b, Key: "take-all", N: 1}}
			all, err2 := floodgate.TakeAll(context.Background(), checks)
			if (err1 == nil) != (err2 == nil) || shape(one) != shape(all) {
				t.Errorf("TakeAll under %s: %s, %v; Take: %s, %v", f.name, shape(all), err2, shape(one), err1)
			}
			for i := range checks {
				if err2 == nil && shape(checks[i].Decision) != shape(one) {
					t.Errorf("TakeAll under %s: check %d %s; Take: %s", f.name, i, shape(checks[i].Decision), shape(one))
				}
			}
		})
	}
}

func (c *counter) snapshot() []floodgate.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]floodgate.Event(nil), c.events...)
}

// shape is what a transport reads of a Decision.
func shape(d floodgate.Decision) string {
	return fmt.Sprintf("allowed=%t fallback=%t limit=%d retry=%ds", d.Allowed, d.Fallback, d.Limit, (d.RetryAfter+time.Second-1)/time.Second)
}

func newMem(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// storeEvents sums up a store's events: "outcome+cause" each.
func storeEvents(evs []floodgate.Event) string {
	var parts []string
	for _, e := range evs {
		s := e.Outcome.String()
		if e.Err != nil {
			s += "+cause"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}
