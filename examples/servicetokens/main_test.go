package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate/observer/slogobserver"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Through a real server and client: the two tokens of billing spend one
// budget (5), search has its own, a forged token is refused before the
// limiter; and no token reaches the store or the observer, which see the
// service names only.
func TestKeyedByServiceNeverByToken(t *testing.T) {
	oldTok, oldLine := newToken("billing")
	newTok, newLine := newToken("billing")
	searchTok, searchLine := newToken("search")
	reg, err := parseServices("# digest service\n" + oldLine + "\n" + newLine + "\n" + searchLine + "\n")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	rec, err := shadow.New(shadow.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	st, err := rec.Store(mem) // records every key that reaches the store
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	obs, err := slogobserver.New(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	var mu sync.Mutex
	h, err := newHandler(reg, st, obs, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, serviceOf(r)+" "+r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	call := func(token string, n int) map[int]int {
		codes := map[int]int{}
		for range n {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			codes[resp.StatusCode]++
		}
		return codes
	}
	a, b := call(oldTok, 4), call(newTok, 4)
	if a[http.StatusOK]+b[http.StatusOK] != 5 || a[http.StatusTooManyRequests]+b[http.StatusTooManyRequests] != 3 {
		t.Errorf("billing's two tokens: %v then %v; want 5 admitted in all (one budget), 3 refused", a, b)
	}
	if c := call(searchTok, 4); c[http.StatusOK] != 4 {
		t.Errorf("search: %v, want its own budget: 4 admitted", c)
	}
	forged := "svc_" + strings.Repeat("A", 26)
	if c := call(forged, 3); c[http.StatusUnauthorized] != 3 {
		t.Errorf("a forged token: %v, want 3 x 401", c)
	}
	if c := call("", 1); c[http.StatusUnauthorized] != 1 {
		t.Errorf("no token: %v, want 401", c)
	}

	// The application got the service's name, and no token.
	for _, s := range seen {
		if s != "billing " && s != "search " {
			t.Errorf("the application saw %q, want the service name and no Authorization header", s)
		}
	}
	// The keys that reached the store: the caller's IP for per-ip, the
	// service's name for per-service.
	var serviceKeys []string
	for _, r := range rec.Reports() {
		for _, k := range r.Top {
			for _, tok := range []string{oldTok, newTok, searchTok, forged} {
				if strings.Contains(k.Key, tok) {
					t.Errorf("policy %s: a token reached the store: key %q", r.Policy, k.Key)
				}
			}
			if r.Policy == "per-service" {
				serviceKeys = append(serviceKeys, k.Key)
			}
		}
	}
	slices.Sort(serviceKeys)
	if !slices.Equal(serviceKeys, []string{"service billing", "service search"}) {
		t.Errorf("per-service keys in the store %q, want the two service names", serviceKeys)
	}
	// The observer logged decisions, by policy and service: no token.
	text := logs.String()
	if !strings.Contains(text, "per-service") {
		t.Fatalf("the observer logged no per-service decision:\n%s", text)
	}
	for _, tok := range []string{oldTok, newTok, searchTok, forged, "svc_"} {
		if strings.Contains(text, tok) {
			t.Errorf("the observer's log holds a token:\n%s", text)
		}
	}
}

// A line that is not a digest and a name is refused with its number.
func TestParseServicesRefusesBadLines(t *testing.T) {
	for _, text := range []string{"abc billing", strings.Repeat("0", 64), strings.Repeat("zz", 32) + " billing"} {
		if _, err := parseServices("# head\n" + text); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v, want an error at line 2", text, err)
		}
	}
}

// The demo runs end to end and prints the shared budget.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-demo"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"billing, old token: 4 calls: 4 admitted",
		"billing, new token: 4 calls: 1 admitted, 3 refused (429)",
		"search: 4 calls: 4 admitted",
		"a forged token: 3 calls: 0 admitted, 0 refused (429), 3 unauthenticated (401)",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out.String())
		}
	}
}
