package httplimit

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

const servicesYAML = `domain: images
default_plan: free
policies:
  - {name: free, rate: 2/m}
  - {name: pro, rate: 5/m}
  - {name: purge, rate: 3/m}
  - {name: per-route, rate: 100/m}
  - {name: shadow, rate: 1/m, dry_run: true}
overrides:
  key-pro-1: pro
rules:
  - key: api_key
    plan: true
  - key: service
    value: purge-orchestrator
    policy: purge
    rules:
      - key: route
        policy: per-route
  - key: method
    value: DELETE
    policy: shadow
`

func newPolicies(t testing.TB, s store.Store, yaml string, opts ...PoliciesOption) (*policy.Live, http.Handler, *okHandler) {
	t.Helper()
	cfg, err := policy.Parse("services.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	live, err := policy.NewLive(cfg, s, policy.WithKeySecret([]byte("0123456789abcdef0123456789abcdef")))
	if err != nil {
		t.Fatal(err)
	}
	service := ValueEntry("service", false, func(r *http.Request) string { return r.Header.Get("X-Service") })
	opts = append([]PoliciesOption{
		WithDescriptor(HeaderEntry("X-API-Key", "api_key")),
		WithDescriptor(service),
		WithDescriptor(service, RouteEntry("route")),
		WithDescriptor(MethodEntry("method")),
	}, opts...)
	mw, err := Policies(live, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := &okHandler{}
	return live, mw(h), h
}

func TestPoliciesPlansAndRules(t *testing.T) {
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	obs := &counter{}
	_, h, ok := newPolicies(t, s, servicesYAML, WithObserver(obs))
	srv := serve(t, h)
	c := clientFrom(t, "127.0.0.1")
	count := func(n int, hdr map[string]string, method string) (admitted int, last result) {
		for range n {
			last = do(t, c, method, srv.URL+"/img/a.png", hdr)
			if last.status == 200 {
				admitted++
			}
		}
		return admitted, last
	}
	if got, last := count(4, map[string]string{"X-API-Key": "key-free-1"}, "GET"); got != 2 || last.status != 429 {
		t.Fatalf("free key admitted %d (want its plan's 2), last %d", got, last.status)
	} else if pol := parseRL(t, last.header, "RateLimit-Policy"); len(pol) != 1 || pol[0].name != "free" || pol[0].q != 2 || pol[0].w != 60 {
		t.Fatalf("policy header %+v", pol)
	}
	if got, _ := count(7, map[string]string{"X-API-Key": "key-pro-1"}, "GET"); got != 5 {
		t.Fatalf("pro key (override) admitted %d, want 5", got)
	}
	// The service's budget (descriptor [service]) and, nested, its
	// per-route budget (descriptor [service, route]): all or nothing.
	purge := map[string]string{"X-Service": "purge-orchestrator"}
	if got, last := count(3, purge, "GET"); got != 3 {
		t.Fatalf("purge admitted %d, want 3", got)
	} else if cur := parseRL(t, last.header, "RateLimit"); len(cur) != 2 || cur[0].name != "purge" || cur[1].name != "per-route" || cur[1].r != 97 {
		t.Fatalf("RateLimit %+v: want purge and per-route charged the 3 admitted", cur)
	}
	if got, last := count(2, purge, "GET"); got != 0 {
		t.Fatalf("purge admitted %d more, want 0", got)
	} else if cur := parseRL(t, last.header, "RateLimit"); len(cur) != 1 || cur[0].name != "purge" || cur[0].r != 0 {
		t.Fatalf("RateLimit %+v: want only purge, refusing", cur)
	}
	// No descriptor matches: not limited.
	if got, _ := count(5, nil, "GET"); got != 5 {
		t.Fatalf("unmatched requests admitted %d, want all", got)
	}
	// A dry-run policy never refuses, and reports would_deny.
	before := obs.get(floodgate.OutcomeWouldDeny)
	if got, _ := count(3, nil, "DELETE"); got != 3 {
		t.Fatalf("dry-run policy refused: admitted %d", got)
	}
	if obs.get(floodgate.OutcomeWouldDeny)-before != 2 {
		t.Fatalf("would_deny %d, want 2", obs.get(floodgate.OutcomeWouldDeny)-before)
	}
	// One event per (request, policy): a request matching purge and
	// per-route is counted under both, a refusal under the policy that
	// refused (the other says it would have admitted); a request matching
	// no enforcing policy gets one event without a policy; the dry-run
	// policy's checks their own shadow events.
	got := map[string]int{}
	for _, e := range obs.events {
		if e.Source == floodgate.SourceRequest && e.Outcome == floodgate.OutcomeWouldDeny {
			t.Fatalf("a request's event says would_deny (%q): its enforcing verdict was hidden", e.Policy)
		}
		got[e.Source.String()+" "+e.Policy+" "+e.Outcome.String()]++
	}
	want := map[string]int{
		"request free allowed": 2, "request free denied": 2,
		"request pro allowed": 5, "request pro denied": 2,
		"request purge allowed": 3, "request purge denied": 2,
		"request per-route allowed": 5,
		"request  allowed":          8,
		"shadow shadow allowed":     1, "shadow shadow would_deny": 2,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("events by source, policy and outcome:\n got %v\nwant %v", got, want)
	}
	if last := obs.events[len(obs.events)-1]; last.Source != floodgate.SourceShadow || last.Outcome != floodgate.OutcomeWouldDeny {
		t.Fatalf("the last event is %v %v, want the dry-run policy's would_deny", last.Source, last.Outcome)
	}
	_ = ok
}

func TestPoliciesOptionsAndErrors(t *testing.T) {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cfg, err := policy.Parse("x.yaml", []byte("policies:\n  - {name: a, rate: 1/s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	live, err := policy.NewLive(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	var nilLive *policy.Live
	shared, err := policy.NewLive(cfg, sharedStore{s})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Policies(shared, WithDescriptor(MethodEntry("m"))); err != nil {
		t.Fatalf("no credential on a shared store without the secret: %v", err)
	}
	for name, f := range map[string]func() error{
		"credential on a shared store without the secret": func() error {
			_, err := Policies(shared, WithDescriptor(HeaderEntry("X-API-Key", "api_key")))
			return err
		},
		"nil live":      func() error { _, err := Policies(nilLive, WithDescriptor(MethodEntry("m"))); return err },
		"no descriptor": func() error { _, err := Policies(live); return err },
		"zero source":   func() error { _, err := Policies(live, WithDescriptor(Source{})); return err },
		"nil value func": func() error {
			_, err := Policies(live, WithDescriptor(ValueEntry("k", false, nil)))
			return err
		},
		"nil option": func() error { _, err := Policies(live, WithDescriptor(MethodEntry("m")), nil); return err },
	} {
		if err := f(); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A live change through the policy set: a drained key stays drained and is
// then admitted at the new rate; the API key never reaches Redis in clear.
func TestPoliciesLiveChangeOnRedis(t *testing.T) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	prefix := "fg-policies-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	rs, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second)) // a loaded machine must not turn decisions into errors (admitted: fail open)
	if err != nil {
		t.Fatal(err)
	}
	live, h, _ := newPolicies(t, rs, servicesYAML)
	srv := serve(t, h)
	c := clientFrom(t, "127.0.0.1")
	const key = "sk_live_the_key_itself_1234"
	hdr := map[string]string{"X-API-Key": key}
	statuses := map[int]int{}
	for range 3 {
		statuses[do(t, c, "GET", srv.URL, hdr).status]++
	}
	if statuses[200] != 2 || statuses[429] != 1 {
		t.Fatalf("free plan on Redis: %v", statuses)
	}
	cfg := live.Set().Config()
	for i := range cfg.Policies {
		if cfg.Policies[i].Name == "free" {
			cfg.Policies[i].Rate = floodgate.PerMinute(4)
		}
	}
	if _, err := live.Update(cfg, "api"); err != nil {
		t.Fatal(err)
	}
	if res := do(t, c, "GET", srv.URL, hdr); res.status != 429 {
		t.Fatalf("a drained key got a fresh burst from a raise: %d", res.status)
	}
	keys, err := client.Do(context.Background(), client.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	for _, k := range keys {
		if strings.Contains(k, key) || strings.Contains(k, "sk_live") {
			t.Fatalf("credential in clear in Redis key %q", k)
		}
	}
}

// sharedStore is a store that says it is shared by several processes.
type sharedStore struct{ store.Store }

func (sharedStore) Shared() bool { return true }
