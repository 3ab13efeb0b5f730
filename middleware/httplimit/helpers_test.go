package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// testStore is a minimal store.Store: one mutex, one map, a settable clock.
type testStore struct {
	mu    sync.Mutex
	m     map[string]algo.State
	clock func() time.Time
}

func newTestStore(clock func() time.Time) *testStore {
	if clock == nil {
		clock = time.Now
	}
	return &testStore{m: map[string]algo.State{}, clock: clock}
}

func (s *testStore) Apply(_ context.Context, key string, alg algo.Algorithm, n int64) (floodgate.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := strconv.FormatUint(alg.Spec().Namespace, 16) + "/" + key
	st, d := alg.Step(s.m[k], micros.Of(s.clock()), n)
	s.m[k] = st
	return d, nil
}

func (s *testStore) ApplyAll(_ context.Context, ops []store.Op, out []floodgate.Decision, commit bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := micros.Of(s.clock())
	next := map[string]algo.State{}
	all := true
	for i, op := range ops {
		k := strconv.FormatUint(op.Alg.Spec().Namespace, 16) + "/" + op.Key
		st, ok := next[k]
		if !ok {
			st = s.m[k]
		}
		next[k], out[i] = op.Alg.Step(st, now, op.N)
		all = all && out[i].Allowed
	}
	if all && commit {
		for k, st := range next {
			s.m[k] = st
		}
	}
	return all, nil
}

func (s *testStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.m))
	for k := range s.m {
		out = append(out, k[strings.IndexByte(k, '/')+1:])
	}
	return out
}

// newMemBucket is a token bucket on the embedded memstore with the given
// clock.
func newMemBucket(t testing.TB, clock func() time.Time, rate floodgate.Rate, burst int64) *store.Limiter {
	t.Helper()
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(clock)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return newBucket(t, s, rate, burst)
}

// frozen returns a clock stuck at one instant: no refill during a test, so
// counts are exact.
func frozen() func() time.Time {
	t0 := time.Unix(1_800_000_000, 0)
	return func() time.Time { return t0 }
}

func newBucket(t testing.TB, s store.Store, rate floodgate.Rate, burst int64) *store.Limiter {
	t.Helper()
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: rate, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// counter counts observed outcomes.
type counter struct {
	mu     sync.Mutex
	counts map[floodgate.Outcome]int
	events []floodgate.Event
}

func (c *counter) Observe(e floodgate.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[floodgate.Outcome]int{}
	}
	c.counts[e.Outcome]++
	c.events = append(c.events, e)
}

func (c *counter) get(o floodgate.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[o]
}

func mustMW(t testing.TB, l floodgate.Limiter, opts ...Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := Middleware(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// okHandler answers 200 "ok" and counts the calls.
type okHandler struct{ calls atomic.Int64 }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.calls.Add(1)
	_, _ = w.Write([]byte("ok"))
}

// serve starts a real server on 127.0.0.1 and closes it at the end of the
// test.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// clientFrom returns a client whose connections come from the loopback
// address local (127.0.0.x), so that a server sees distinct peers.
func clientFrom(t *testing.T, local string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

type result struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, c *http.Client, method, url string, hdr map[string]string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return result{status: resp.StatusCode, header: resp.Header, body: b.String()}
}

// rl is a parsed RateLimit / RateLimit-Policy member.
type rl struct {
	name string
	r, t int64
	q, w int64
	hasT bool
	hasW bool
}

// parseRL strictly parses a RateLimit or RateLimit-Policy field (all its
// lines) and checks the draft-10 shape: a String policy name and Integer
// parameters, r (RateLimit) or q (RateLimit-Policy) required.
func parseRL(t *testing.T, h http.Header, field string) []rl {
	t.Helper()
	vals := h.Values(field)
	if len(vals) == 0 {
		t.Fatalf("no %s field", field)
	}
	ms, err := httpsfv.UnmarshalList(vals)
	if err != nil {
		t.Fatalf("%s: %q: %v", field, vals, err)
	}
	var out []rl
	for _, m := range ms {
		item, ok := m.(httpsfv.Item)
		name, isStr := item.Value.(string)
		if !ok || !isStr {
			t.Fatalf("%s: member %+v is not a String item", field, m)
		}
		x := rl{name: name}
		for _, key := range item.Params.Names() {
			pv, _ := item.Params.Get(key)
			v, isInt := pv.(int64)
			if !isInt || v < 0 {
				t.Fatalf("%s: parameter %s is not a non-negative Integer: %+v", field, key, pv)
			}
			switch key {
			case "r":
				x.r = v
			case "t":
				x.t, x.hasT = v, true
			case "q":
				x.q = v
			case "w":
				x.w, x.hasW = v, true
			default:
				t.Fatalf("%s: unexpected parameter %q", field, key)
			}
		}
		req := "r"
		if field == "RateLimit-Policy" {
			req = "q"
		}
		if _, ok := item.Params.Get(req); !ok {
			t.Fatalf("%s: member without %s", field, req)
		}
		out = append(out, x)
	}
	return out
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		t.Fatalf("%q is not a canonical integer", s)
	}
	return n
}

// as converts server options to a constructor's option type, followed by
// more of that type.
func as[O any](server []CommonOption, more ...O) []O {
	out := make([]O, 0, len(server)+len(more))
	for _, s := range server {
		out = append(out, any(s).(O))
	}
	return append(out, more...)
}
