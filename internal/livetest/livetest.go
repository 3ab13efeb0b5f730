// Package livetest holds the acceptance scenarios of live policy changes
// (issue 12), written once and run on every store: memstore in package
// policy's tests, Redis (single node and Cluster) in redisstore's. Tests
// only.
package livetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store"
)

// Secret is the credential-hashing secret of the scenarios' Lives: every
// process on a shared store must have the same one.
var Secret = policy.WithKeySecret([]byte("livetest secret, the same on every node"))

// Env is a store under test and the way to move its time.
type Env struct {
	Store   store.Store
	Advance func(time.Duration)
}

// Applier is one way to change a running config.
type Applier struct {
	Name string
	// Start returns a Live running config text on st, and the function
	// that applies a new config text to it, returning once it runs.
	Start func(t *testing.T, st store.Store, text string) (*policy.Live, func(text string))
}

// Appliers are the three ways: the API (Live.Update), a file reload
// (Live.ReloadFile, what a SIGHUP handler calls) and a watched file
// (Live.WatchFile).
func Appliers() []Applier {
	return []Applier{
		{Name: "api", Start: func(t *testing.T, st store.Store, text string) (*policy.Live, func(string)) {
			t.Helper()
			live, err := policy.NewLive(parse(t, text), st, Secret)
			if err != nil {
				t.Fatal(err)
			}
			return live, func(text string) {
				if _, err := live.Update(parse(t, text), "api"); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{Name: "reload", Start: func(t *testing.T, st store.Store, text string) (*policy.Live, func(string)) {
			t.Helper()
			path := writeConfig(t, "", text)
			cfg, err := policy.LoadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			live, err := policy.NewLive(cfg, st, Secret)
			if err != nil {
				t.Fatal(err)
			}
			return live, func(text string) {
				writeConfig(t, path, text)
				if _, err := live.ReloadFile(path); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{Name: "watch", Start: func(t *testing.T, st store.Store, text string) (*policy.Live, func(string)) {
			t.Helper()
			path := writeConfig(t, "", text)
			cfg, err := policy.LoadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			applied := uint64(0)
			live, err := policy.NewLive(cfg, st, Secret, policy.WithOnChange(func(c policy.Change) {
				mu.Lock()
				defer mu.Unlock()
				if c.Err == nil {
					applied = c.Version
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			if err := live.WatchFile(ctx, path); err != nil {
				t.Fatal(err)
			}
			return live, func(text string) {
				want := live.Version() + 1
				writeConfig(t, path, text)
				for deadline := time.Now().Add(5 * time.Second); ; {
					mu.Lock()
					got := applied
					mu.Unlock()
					if got >= want {
						return
					}
					if time.Now().After(deadline) {
						t.Fatal("the watched file's change was not applied within 5 s")
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
		}},
	}
}

func parse(t *testing.T, text string) policy.Config {
	t.Helper()
	cfg, err := policy.Parse("limits.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// writeConfig writes text to path (a new file in a temporary directory
// when path is ""), replacing it the way deployment tools do, and returns
// the path.
func writeConfig(t *testing.T, path, text string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "limits.yaml")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Pro returns a config whose default plan is pro, a token bucket of the
// given rate per second (burst one second's worth).
func Pro(rate int) string {
	return fmt.Sprintf("default_plan: pro\npolicies:\n  - {name: pro, rate: %d/s}\n", rate)
}

func peek(t *testing.T, live *policy.Live, key string) int64 {
	t.Helper()
	lim, ok := live.Set().Limiter("pro")
	if !ok {
		t.Fatal("no policy pro")
	}
	d, err := lim.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func take(t *testing.T, live *policy.Live, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		d, err := live.Take(context.Background(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// RaiseThenLower is the scenario: pro raised from 100/s to 200/s
// with a drained key, which stays drained and is then admitted at 200/s;
// then lowered to 50/s, where no key gains anything.
func RaiseThenLower(t *testing.T, env Env, ap Applier) {
	live, apply := ap.Start(t, env.Store, Pro(100))
	if got := take(t, live, "drained", 100); got != 100 {
		t.Fatalf("a fresh key at 100/s burst 100 admitted %d of 100", got)
	}
	take(t, live, "half", 50)
	take(t, live, "one", 99)
	apply(Pro(200))
	if got := peek(t, live, "drained"); got != 0 {
		t.Fatalf("the drained key after the raise to 200/s: %d left, want 0", got)
	}
	if got := take(t, live, "drained", 1); got != 0 {
		t.Fatal("the drained key was admitted at the raise")
	}
	if got := peek(t, live, "half"); got != 50 {
		t.Fatalf("50 of 100 left, after the raise: %d left, want 50", got)
	}
	// From the change on, 200/s: a request every 250 µs for a second.
	admitted := 0
	for range 4000 {
		env.Advance(250 * time.Microsecond)
		admitted += take(t, live, "drained", 1)
	}
	if admitted < 199 || admitted > 201 {
		t.Fatalf("the drained key over the second after the raise: %d admitted, want 200±1", admitted)
	}
	keys := []string{"drained", "half", "one", "fresh"}
	take(t, live, "drained", 150)
	before := map[string]int64{}
	for _, k := range keys {
		before[k] = peek(t, live, k)
	}
	apply(Pro(50))
	for _, k := range keys {
		if got := peek(t, live, k); got > min(before[k], 50) {
			t.Fatalf("key %q after the lowering to 50/s: %d left, it had %d", k, got, before[k])
		}
	}
	if got := peek(t, live, "drained"); got != 0 {
		t.Fatalf("the drained key after the lowering: %d left, want 0", got)
	}
}

// KeepsTokens is the other case: 50 left of 100 stay 50 after a
// raise to 200 and are 30 after a lowering to 30.
func KeepsTokens(t *testing.T, env Env, ap Applier) {
	live, apply := ap.Start(t, env.Store, Pro(100))
	take(t, live, "k", 50)
	apply(Pro(200))
	if got := peek(t, live, "k"); got != 50 {
		t.Fatalf("50 of 100 left, raised to 200: %d left, want 50", got)
	}
	apply(Pro(30))
	if got := peek(t, live, "k"); got != 30 {
		t.Fatalf("50 left, lowered to 30: %d left, want 30", got)
	}
}

// Family is an algorithm family for [Bounded]: the configs it changes
// between (all of one window length for the windows) and the most a key may
// be admitted over an interval.
type Family struct {
	Name string
	// Policies are the config lines ("{name: pro, ...}") of the versions.
	Policies []string
	// Burst and Refill bound what a version admits to a key over [a, b]
	// (Unix µs): Burst(p) + Refill(p, a, b). Over an interval during which
	// several versions ran, a key is admitted at most the largest Burst of
	// them plus their largest Refill: the bound of a version with the
	// larger burst and the larger rate. (No carry-over rule can promise
	// the larger of the versions' own bounds: a key drained under a large
	// burst refills at the new, faster rate from the change on.)
	Burst  func(p policy.Policy) int64
	Refill func(p policy.Policy, a, b int64) int64
}

// Families are the algorithm families Bounded runs on.
func Families() []Family {
	burst := func(p policy.Policy) int64 {
		if p.Algorithm == policy.LeakyBucket {
			return p.Burst + 1
		}
		if p.Burst == 0 {
			return p.Rate.N
		}
		return p.Burst
	}
	refill := func(p policy.Policy, a, b int64) int64 {
		per := int64(p.Rate.Per / time.Microsecond)
		if p.Algorithm == policy.LeakyBucket {
			// nginx leaks by the millisecond: one more ms, one more
			// request of rounding.
			return p.Rate.N*((b-a)/1000+1)*1000/per + 1
		}
		interval := (per + p.Rate.N - 1) / p.Rate.N
		return (b - a) / interval
	}
	none := func(policy.Policy) int64 { return 0 }
	window := func(p policy.Policy, a, b int64) int64 {
		w := int64(p.Window / time.Microsecond)
		if p.Algorithm == policy.SlidingLog {
			return p.Limit * ((b-a)/w + 1)
		}
		// Fixed and sliding counter: Limit per epoch-aligned window.
		return p.Limit * (b/w - a/w + 1)
	}
	return []Family{
		{Name: "token-bucket", Burst: burst, Refill: refill, Policies: []string{
			"{name: pro, rate: 100/s}", "{name: pro, rate: 200/s}", "{name: pro, rate: 50/s}",
			"{name: pro, rate: 30/s, burst: 60}", "{name: pro, rate: 1000/s, burst: 10}"}},
		{Name: "leaky-bucket", Burst: burst, Refill: refill, Policies: []string{
			"{name: pro, algorithm: leaky-bucket, rate: 100/s, burst: 99, nodelay: true}",
			"{name: pro, algorithm: leaky-bucket, rate: 200/s, burst: 199, nodelay: true}",
			"{name: pro, algorithm: leaky-bucket, rate: 50/s, burst: 10, nodelay: true}",
			"{name: pro, algorithm: leaky-bucket, rate: 1000/s, nodelay: true}"}},
		{Name: "fixed-window", Burst: none, Refill: window, Policies: windows("fixed-window")},
		{Name: "sliding-counter", Burst: none, Refill: window, Policies: windows("sliding-counter")},
		{Name: "sliding-log", Burst: none, Refill: window, Policies: windows("sliding-log")},
	}
}

func windows(alg string) []string {
	var out []string
	for _, limit := range []int{100, 200, 30, 5} {
		out = append(out, fmt.Sprintf("{name: pro, algorithm: %s, limit: %d, window: 1s}", alg, limit))
	}
	return out
}

// maxInterval is the longest interval (µs) Bounded checks: longer ones
// have room to spare.
const maxInterval = 3_000_000

// admission is units admitted to a key at a time (Unix µs).
type admission struct{ at, n int64 }

// change is a version that runs from a time (Unix µs) on.
type change struct {
	at int64
	p  policy.Policy
}

// Bounded takes random costs on a few keys at random times while the
// config changes at random between f's versions (through the API), some
// keys drained right before a change. It checks that a change never gives
// a key more than it had left (unless it was full), and that over every
// interval no key was admitted more than the bound of the versions that
// ran during it (see [Family]).
func Bounded(t *testing.T, env Env, now func() int64, f Family, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 12))
	text := func(i int) string { return "default_plan: pro\npolicies:\n  - " + f.Policies[i] + "\n" }
	live, err := policy.NewLive(parse(t, text(0)), env.Store, Secret)
	if err != nil {
		t.Fatal(err)
	}
	running := func() policy.Policy {
		p, _ := live.Set().Policy("pro")
		return p
	}
	changes := []change{{at: now(), p: running()}}
	keys := []string{"a", "b", "c"}
	got := map[string][]admission{}
	steps := []time.Duration{0, 100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 20 * time.Millisecond, 300 * time.Millisecond}
	record := func(key string, n int) bool {
		d, err := live.Take(context.Background(), key, n)
		if errors.Is(err, floodgate.ErrCostExceedsCapacity) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got[key] = append(got[key], admission{at: now(), n: int64(n)})
		}
		return d.Allowed
	}
	for range 2500 {
		if r.IntN(60) == 0 {
			if r.IntN(2) == 0 {
				// Drain a key right before the change: a change that
				// granted anything would show at once.
				key := keys[r.IntN(len(keys))]
				for record(key, 1) {
				}
			}
			before := map[string]int64{}
			for _, k := range keys {
				before[k] = peek(t, live, k)
			}
			lim, _ := live.Set().Limiter("pro")
			full := lim.Capacity()
			if _, err := live.Update(parse(t, text(r.IntN(len(f.Policies)))), "api"); err != nil {
				t.Fatal(err)
			}
			changes = append(changes, change{at: now(), p: running()})
			for _, k := range keys {
				// A key keeps what it has left, capped: it never gains
				// (a full key is a fresh one, full under the new version).
				if got := peek(t, live, k); got > before[k] && before[k] < full {
					t.Fatalf("%s: key %s had %d left before the change to %v, %d after", f.Name, k, before[k], running(), got)
				}
			}
		}
		env.Advance(steps[r.IntN(len(steps))])
		record(keys[r.IntN(len(keys))], 1+r.IntN(3))
	}
	for key, as := range got {
		k0 := 0
		for i := range as {
			a := as[i].at
			// The versions running at some time in [a, b] are k0..k1.
			for k0+1 < len(changes) && changes[k0+1].at < a {
				k0++
			}
			k1 := k0
			sum := int64(0)
			for j := i; j < len(as) && as[j].at-a <= maxInterval; j++ {
				sum += as[j].n
				b := as[j].at
				for k1+1 < len(changes) && changes[k1+1].at <= b {
					k1++
				}
				var top, refill int64
				for _, c := range changes[k0 : k1+1] {
					top, refill = max(top, f.Burst(c.p)), max(refill, f.Refill(c.p, a, b))
				}
				if bound := top + refill; sum > bound {
					t.Fatalf("%s: key %s admitted %d units over [%d, %d] (%d us), above the bound %d of the versions that ran", f.Name, key, sum, a, b, b-a, bound)
				}
			}
		}
	}
}

// PlansConfig is the plans: free 10/s (the default plan), pro
// 100/s, one enterprise key at 1,000/s, each a token bucket whose burst is
// one second's worth.
const PlansConfig = `domain: api
default_plan: free
policies:
  - {name: free, rate: 10/s}
  - {name: pro, rate: 100/s}
  - {name: enterprise-acme, rate: 1000/s}
overrides:
  key_pro_1: pro
  key_acme: enterprise-acme
`

// Plans sends each key of PlansConfig's three plans four requests per
// token interval for 2 s, interleaved on one store, and requires that each
// key gets exactly its plan's admissions (+-1): its burst plus 2 s of its
// rate, 30, 300 and 3,000; and that two keys on one plan have a budget each.
func Plans(t *testing.T, env Env) {
	t.Helper()
	live, err := policy.NewLive(parse(t, PlansConfig), env.Store, Secret)
	if err != nil {
		t.Fatal(err)
	}
	const step = 250 * time.Microsecond
	keys := []struct {
		key   string
		every int // steps between requests
		want  int
	}{{"key_acme", 1, 3000}, {"key_pro_1", 10, 300}, {"key_free_1", 100, 30}, {"key_free_2", 100, 30}}
	got := make([]int, len(keys))
	ctx := context.Background()
	for i := range int(2 * time.Second / step) {
		for k, c := range keys {
			if i%c.every != 0 {
				continue
			}
			d, err := live.Take(ctx, c.key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				got[k]++
			}
		}
		env.Advance(step)
	}
	for k, c := range keys {
		if got[k] < c.want-1 || got[k] > c.want+1 {
			t.Errorf("%s: %d admitted over 2 s, want %d +-1", c.key, got[k], c.want)
		}
	}
}

// groupConfig is a plan checked with a second limit on every request (the
// README's layout: an API key's plan, and the origin's own budget).
func groupConfig(rate string) string {
	return fmt.Sprintf(`default_plan: free
policies:
  - {name: free, rate: %s}
  - {name: origin, rate: 100000/s}
rules:
  - key: api_key
    plan: true
  - key: destination
    policy: origin
`, rate)
}

// RaiseInGroup is a live raise of a plan that every request checks
// together with another limit, all or nothing: the drained key's refusals
// after the raise keep its conversion, so it refills at the new rate from
// its first request after the change, and the RetryAfter it is told is
// the truth (waiting it, it is admitted).
func RaiseInGroup(t *testing.T, env Env) {
	t.Helper()
	live, err := policy.NewLive(parse(t, groupConfig("2/m")), env.Store, Secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	descs := []middleware.Descriptor{{{Key: "api_key", Value: "k"}}, {{Key: "destination", Value: "image-origin"}}}
	take := func() floodgate.Decision {
		t.Helper()
		checks, _, err := live.Match(ctx, descs, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(checks) != 2 {
			t.Fatalf("%d checks, want the plan's and the origin's", len(checks))
		}
		d, err := floodgate.TakeAll(ctx, checks)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := 0; take().Allowed; i++ {
		if i > 2 {
			t.Fatal("a 2/m plan admitted more than its burst")
		}
	}
	if _, err := live.Update(parse(t, groupConfig("60/m")), "api"); err != nil {
		t.Fatal(err)
	}
	d := take()
	if d.Allowed {
		t.Fatal("the drained key was admitted at once after the raise: a fresh burst")
	}
	if d.RetryAfter <= 0 || d.RetryAfter > time.Second {
		t.Fatalf("RetryAfter %v after a raise to 60/m, want at most 1 s", d.RetryAfter)
	}
	for i := range 5 {
		env.Advance(d.RetryAfter)
		if d = take(); !d.Allowed {
			t.Fatalf("retry %d: refused after waiting the RetryAfter it was told (now told %v)", i, d.RetryAfter)
		}
		if d = take(); d.Allowed {
			t.Fatalf("retry %d: two admitted in a row at 1/s", i)
		}
	}

	// A raise from 4/s to 40/s: 500 ms of requests every 10 ms after it
	// admit the new rate's 20 (+-1), not the old rate's 2.
	live, err = policy.NewLive(parse(t, groupConfig("4/s")), env.Store, Secret)
	if err != nil {
		t.Fatal(err)
	}
	descs[0][0].Value = "k2"
	for take().Allowed {
	}
	if _, err := live.Update(parse(t, groupConfig("40/s")), "api"); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 50 {
		env.Advance(10 * time.Millisecond)
		if take().Allowed {
			admitted++
		}
	}
	if admitted < 19 || admitted > 21 {
		t.Fatalf("%d admitted in the 500 ms after a raise to 40/s, want 20 +-1", admitted)
	}
}
