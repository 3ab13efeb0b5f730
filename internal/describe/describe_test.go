package describe

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admit"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
)

type req map[string]string

func entry(key string, cred bool) Entry[req] {
	return Entry[req]{Key: key, Credential: cred, Value: func(r req) string {
		if r["panic"] == key {
			panic("boom")
		}
		return r[key]
	}}
}

// liveOf is a live policy set of yaml on a memory store.
func liveOf(t *testing.T, yaml string) *policy.Live {
	t.Helper()
	cfg, err := policy.Parse("t.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	live, err := policy.NewLive(cfg, ms)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func newSet(t *testing.T) *Set[req] {
	t.Helper()
	live := liveOf(t, `domain: t
policies:
  - {name: per-key, rate: 2/m}
  - {name: per-route, rate: 1/m}
  - {name: watch, rate: 1/m, dry_run: true}
rules:
  - key: api_key
    policy: per-key
    rules:
      - key: route
        policy: per-route
  - key: route
    policy: watch
`)
	s, err := New(live, [][]Entry[req]{
		{entry("api_key", true)},
		{entry("api_key", true), entry("route", false)},
		{entry("route", false)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDecide(t *testing.T) {
	s := newSet(t)
	core := admit.NewDynamic(admit.Config{})
	ctx := context.Background()
	r := req{"api_key": "k1", "route": "/a"}
	v, m := s.Decide(ctx, core, r, floodgate.Event{}, 0)
	if v.Kind != admit.Admit || len(m.Checks) != 2 {
		t.Fatalf("first request: %+v, %d enforcing checks, want admitted with 2 (per-key, per-route; watch is dry-run)", v, len(m.Checks))
	}
	m.Release()
	// per-route (1/m) is spent for k1 on /a: all or nothing refuses.
	v, m = s.Decide(ctx, core, r, floodgate.Event{}, 0)
	if v.Kind == admit.Admit {
		t.Fatalf("second request admitted: %+v", v)
	}
	m.Release()
	// Without api_key the first two descriptors are not yielded: only the
	// dry-run one matches, which never refuses.
	v, m = s.Decide(ctx, core, req{"route": "/a"}, floodgate.Event{}, 0)
	if v.Kind != admit.Admit || len(m.Checks) != 0 {
		t.Fatalf("request without api_key: %+v, %d enforcing checks, want admitted with 0", v, len(m.Checks))
	}
	m.Release()
}

func TestPanicIsAnError(t *testing.T) {
	s := newSet(t)
	core := admit.NewDynamic(admit.Config{FailMode: admit.FailClosed})
	v, m := s.Decide(context.Background(), core, req{"api_key": "k", "route": "/r", "panic": "route"}, floodgate.Event{}, 0)
	defer m.Release()
	if v.Kind == admit.Admit || !errors.Is(v.Err, admit.ErrPanic) {
		t.Fatalf("panicking entry, fail closed: %+v, want a refusal with ErrPanic", v)
	}
}

func TestReleaseLeavesNoCredential(t *testing.T) {
	s := newSet(t)
	ctx := context.Background()
	const secret = "sk-live-very-secret"
	// A first request fills every buffer; on the second, reusing them, the
	// second descriptor reads api_key then finds no route: not yielded,
	// but the key was read into its buffer.
	m := &Match{}
	if _, _, err := s.match(ctx, req{"api_key": "other", "route": "/r"}, m); err != nil {
		t.Fatal(err)
	}
	m.reset()
	// Then the same with an entry that panics after the key was read.
	for _, r := range []req{{"api_key": secret}, {"api_key": secret, "route": "/r", "panic": "route"}} {
		if _, _, err := s.match(ctx, req{"api_key": "other", "route": "/r"}, m); err != nil {
			t.Fatal(err)
		}
		m.reset()
		if _, _, err := s.match(ctx, r, m); (err != nil) != (r["panic"] != "") {
			t.Fatalf("match %v: %v", r, err)
		}
		m.reset()
		descs := m.descs[:cap(m.descs)]
		for i, d := range descs {
			for _, e := range d[:cap(d)] {
				if strings.Contains(e.Value, secret) {
					t.Fatalf("%v: buffer %d still holds the credential after Release", r, i)
				}
			}
		}
	}
}

func TestConstructionErrors(t *testing.T) {
	if err := Check[req](nil); err == nil {
		t.Error("Check accepted a descriptor without entries")
	}
	if err := Check([]Entry[req]{{Key: "k"}}); err == nil {
		t.Error("Check accepted an entry without a value function")
	}
	if err := Check([]Entry[req]{{Value: func(req) string { return "" }}}); err == nil {
		t.Error("Check accepted an entry without a key")
	}
	live := liveOf(t, "domain: t\npolicies:\n  - {name: p, rate: 1/s}\nrules:\n  - {key: k, policy: p}\n")
	if _, err := New[req](live, nil, nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("New without descriptors: %v, want ErrInvalidConfig", err)
	}
}
