package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/middleware"
)

func reqFrom(remote string, hdr map[string][]string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header[k] = v
	}
	return r
}

func TestForgedHeadersIgnoredWithoutTrustedProxies(t *testing.T) {
	c := defaultConfig()
	r := reqFrom("203.0.113.5:4321", map[string][]string{
		"X-Forwarded-For": {"198.51.100.1"},
		"X-Real-Ip":       {"198.51.100.2"},
		"Forwarded":       {"for=198.51.100.3"},
	})
	if k, fromIP := c.key(r); k != "203.0.113.5" || !fromIP {
		t.Fatalf("key %q (fromIP %v), want the peer", k, fromIP)
	}
	if a, ok := ClientIP(r); !ok || a != netip.MustParseAddr("203.0.113.5") {
		t.Fatalf("ClientIP = %v %v", a, ok)
	}
}

func TestClientAddrTrustedProxies(t *testing.T) {
	c := defaultConfig()
	if err := WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")).applyMiddleware(&c); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remote string
		hdr    map[string][]string
		want   string
	}{
		{"untrusted peer", "198.51.100.9:1", map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}, "198.51.100.9"},
		{"trusted, no header", "10.0.0.1:1", nil, "10.0.0.1"},
		{"one hop", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}, "1.2.3.4"},
		{"forged left part", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"9.9.9.9, 1.2.3.4"}}, "1.2.3.4"},
		{"chain of proxies", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"9.9.9.9, 1.2.3.4,10.0.0.7 , 10.0.0.8"}}, "1.2.3.4"},
		{"several lines", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"9.9.9.9, 1.2.3.4", "10.0.0.7"}}, "1.2.3.4"},
		{"all trusted", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"10.1.1.1, 10.0.0.7"}}, "10.1.1.1"},
		{"garbage stops at the nearest trusted hop", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"1.2.3.4, nonsense, 10.0.0.7"}}, "10.0.0.7"},
		{"empty element", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"1.2.3.4,"}}, "10.0.0.1"},
		{"with port", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"1.2.3.4:5678"}}, "1.2.3.4"},
		{"mapped", "10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"::ffff:1.2.3.4"}}, "1.2.3.4"},
		{"zoned peer trusted", "[fd00::1%eth0]:1", map[string][]string{"X-Forwarded-For": {"2001:db8::7"}}, "2001:db8::7"},
		{"v6 peer trusted", "[fd00::1]:1", map[string][]string{"X-Forwarded-For": {"2001:db8::9"}}, "2001:db8::9"},
		{"forged Forwarded ignored when reading XFF", "10.0.0.1:1", map[string][]string{"Forwarded": {"for=1.2.3.4"}, "X-Forwarded-For": {"5.6.7.8"}}, "5.6.7.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, ok := c.clientAddr(reqFrom(tc.remote, tc.hdr))
			if !ok || a != netip.MustParseAddr(tc.want) {
				t.Fatalf("client %v (%v), want %s", a, ok, tc.want)
			}
		})
	}
	if err := WithForwardedHeader("forwarded").applyMiddleware(&c); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hdr  map[string][]string
		want string
	}{
		{"forwarded", map[string][]string{"Forwarded": {`for=9.9.9.9, for="[2001:db8::1]:4711";proto=https, for=10.0.0.3`}}, "2001:db8::1"},
		{"forwarded case and params", map[string][]string{"Forwarded": {"proto=http;For=1.2.3.4;by=10.0.0.1"}}, "1.2.3.4"},
		{"forged XFF ignored when reading Forwarded", map[string][]string{"Forwarded": {"for=1.2.3.4"}, "X-Forwarded-For": {"5.6.7.8"}}, "1.2.3.4"},
		{"forwarded unknown", map[string][]string{"Forwarded": {"for=unknown, for=10.0.0.2"}}, "10.0.0.2"},
		{"forwarded obfuscated", map[string][]string{"Forwarded": {"for=_hidden"}}, "10.0.0.1"},
		{"forwarded without for", map[string][]string{"Forwarded": {"proto=http"}}, "10.0.0.1"},
		{"forwarded quoted v4 with port", map[string][]string{"Forwarded": {`for="192.0.2.60:8080"`}}, "192.0.2.60"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, ok := c.clientAddr(reqFrom("10.0.0.1:1", tc.hdr))
			if !ok || a != netip.MustParseAddr(tc.want) {
				t.Fatalf("client %v (%v), want %s", a, ok, tc.want)
			}
		})
	}
}

func TestIPKeys(t *testing.T) {
	c := defaultConfig()
	for remote, want := range map[string]string{
		"192.0.2.1:80":               "192.0.2.1",
		"[::ffff:192.0.2.1]:80":      "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:443":         "fe80::/64",
		"192.0.2.7":                  "192.0.2.7",
		"@":                          unknownPeer,
		"":                           unknownPeer,
	} {
		if k, _ := c.key(reqFrom(remote, nil)); k != want {
			t.Errorf("RemoteAddr %q: key %q, want %q", remote, k, want)
		}
	}
	if err := WithIPPrefix(24, 48).applyMiddleware(&c); err != nil {
		t.Fatal(err)
	}
	for remote, want := range map[string]string{
		"192.0.2.77:80":              "192.0.2.0/24",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1::/48",
	} {
		if k, _ := c.key(reqFrom(remote, nil)); k != want {
			t.Errorf("RemoteAddr %q: key %q, want %q", remote, k, want)
		}
	}
	if err := WithIPPrefix(32, 128).applyMiddleware(&c); err != nil {
		t.Fatal(err)
	}
	if k, _ := c.key(reqFrom("[2001:db8::5]:1", nil)); k != "2001:db8::5" {
		t.Errorf("/128 key %q", k)
	}
}

// TestRotatingForgedXFFIsLimited: one peer forging a fresh X-Forwarded-For
// on each of 1,000 requests gets exactly the burst through.
func TestRotatingForgedXFFIsLimited(t *testing.T) {
	st := newTestStore(frozen())
	l := newBucket(t, st, floodgate.PerMinute(1), 10)
	h := &okHandler{}
	srv := serve(t, mustMW(t, l)(h))
	c := clientFrom(t, "127.0.0.1")
	statuses := map[int]int{}
	for i := 0; i < 1000; i++ {
		res := do(t, c, "GET", srv.URL, map[string]string{
			"X-Forwarded-For": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			"X-Real-IP":       fmt.Sprintf("192.0.2.%d", i&255),
			"Forwarded":       fmt.Sprintf("for=198.51.100.%d", i&255),
		})
		statuses[res.status]++
	}
	if statuses[200] != 10 || statuses[429] != 990 || h.calls.Load() != 10 {
		t.Fatalf("statuses %v, handler calls %d", statuses, h.calls.Load())
	}
	if keys := st.keys(); len(keys) != 1 || keys[0] != "127.0.0.1" {
		t.Fatalf("keys %v, want only the peer", keys)
	}
}

// TestForgedVictimIPDoesNotTouchVictim: an attacker naming the victim's IP in
// X-Forwarded-For, directly or through a trusted proxy, spends only its own
// budget.
func TestForgedVictimIPDoesNotTouchVictim(t *testing.T) {
	const victim, attacker, proxy = "127.0.0.2", "127.0.0.1", "127.0.0.3"
	l := newMemBucket(t, frozen(), floodgate.PerMinute(1), 3)
	mw := mustMW(t, l, WithTrustedProxies(netip.MustParsePrefix(proxy+"/32")))
	srv := serve(t, mw(&okHandler{}))

	// Directly: the attacker is not a trusted proxy, its header is ignored.
	direct := clientFrom(t, attacker)
	for i := 0; i < 10; i++ {
		do(t, direct, "GET", srv.URL, map[string]string{"X-Forwarded-For": victim, "Forwarded": "for=" + victim})
	}
	// Through the trusted proxy, which appends the address it saw.
	viaProxy := clientFrom(t, proxy)
	for i := 0; i < 10; i++ {
		do(t, viaProxy, "GET", srv.URL, map[string]string{"X-Forwarded-For": victim + ", " + attacker, "Forwarded": "for=" + victim})
	}
	res := do(t, clientFrom(t, victim), "GET", srv.URL, nil)
	cur := parseRL(t, res.header, "RateLimit")
	if res.status != 200 || cur[0].r != 2 {
		t.Fatalf("victim: status %d, remaining %d; want 200 with its full budget minus one", res.status, cur[0].r)
	}
	if res := do(t, direct, "GET", srv.URL, nil); res.status != 429 {
		t.Fatalf("attacker: status %d, want 429", res.status)
	}
	// The proxied client is attributed to the attacker, the proxy itself
	// keeps its budget for its other clients.
	if res := do(t, viaProxy, "GET", srv.URL, map[string]string{"X-Forwarded-For": "127.0.0.9"}); res.status != 200 {
		t.Fatalf("another client behind the proxy: status %d", res.status)
	}
}

func TestHeaderKeysHaveTheirOwnNamespace(t *testing.T) {
	st := newTestStore(frozen())
	l := newBucket(t, st, floodgate.PerMinute(1), 1)
	srv := serve(t, mustMW(t, l, WithHeaderKey("X-Service-Token"))(&okHandler{}))
	c := clientFrom(t, "127.0.0.1")
	// A token spelled like the caller's IP must not share the IP's budget.
	if res := do(t, c, "GET", srv.URL, map[string]string{"X-Service-Token": "127.0.0.1"}); res.status != 200 {
		t.Fatalf("token request: %d", res.status)
	}
	if res := do(t, c, "GET", srv.URL, nil); res.status != 200 {
		t.Fatalf("IP-keyed request after a look-alike token: %d", res.status)
	}
	if res := do(t, c, "GET", srv.URL, map[string]string{"X-Service-Token": ""}); res.status != 429 {
		t.Fatalf("empty token must fall back to the (spent) IP budget: %d", res.status)
	}
}

func TestHostileKeys(t *testing.T) {
	st := newTestStore(frozen())
	l := newBucket(t, st, floodgate.PerMinute(1), 2)
	h := &okHandler{}
	mw := mustMW(t, l, WithHeaderKey("X-Service-Token"), WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8")),
		WithHeaders(middleware.HeadersIETF|middleware.HeadersLegacy|middleware.HeadersDiagnostic), WithProblemDetails(true))
	srv := serve(t, mw(h))
	c := clientFrom(t, "127.0.0.1")
	huge := strings.Repeat("A", 64<<10)
	for i := 0; i < 3; i++ {
		res := do(t, c, "GET", srv.URL, map[string]string{"X-Service-Token": huge, "X-Forwarded-For": huge})
		if want := []int{200, 200, 429}[i]; res.status != want {
			t.Fatalf("64 KiB token, request %d: status %d, want %d", i, res.status, want)
		}
		if strings.Contains(res.body, "AAAA") {
			t.Fatal("body echoes the key")
		}
	}
	for _, k := range st.keys() {
		if len(k) > 64 {
			t.Fatalf("stored key of %d bytes", len(k))
		}
	}

	// Bytes a real server refuses on the wire, sent in-process.
	hostile := []string{"a\x00b", "a\r\nX-Injected: 1", "\n", "\xff\xfe", huge + "\x00", "[::1", "for=\"", ",,,,", "1.2.3.4%zone"}
	for _, v := range hostile {
		for _, remote := range []string{v, "127.0.0.1:1", "[" + v + "]:1"} {
			r := reqFrom(remote, map[string][]string{
				"X-Service-Token": {v}, "X-Forwarded-For": {v, v}, "Forwarded": {v},
			})
			w := httptest.NewRecorder()
			mw(h).ServeHTTP(w, r)
			for name, vals := range w.Header() {
				for _, hv := range vals {
					if strings.ContainsAny(hv, "\r\n\x00") {
						t.Fatalf("header %s carries %q", name, hv)
					}
				}
			}
		}
	}
	custom := mustMW(t, l, WithKeyFunc(func(r *http.Request) string { return r.Header.Get("K") }))
	for _, v := range hostile {
		w := httptest.NewRecorder()
		custom(h).ServeHTTP(w, reqFrom("127.0.0.1:1", map[string][]string{"K": {v}}))
		if w.Code != 200 && w.Code != 429 {
			t.Fatalf("custom key %q: status %d", v, w.Code)
		}
	}
}

func FuzzKey(f *testing.F) {
	f.Add("10.0.0.1:80", "1.2.3.4, 10.0.0.2", "for=\"[2001:db8::1]:80\"", "tok")
	f.Add("[2001:db8::1]:1", ",", "for=", "")
	c, err := buildConfig([]Option{WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")), WithHeaderKey("X-Token")}, Option.applyMiddleware)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, tok string) {
		r := reqFrom(remote, map[string][]string{"X-Forwarded-For": {xff}, "X-Token": {tok}})
		k, fromIP := c.key(r)
		if k == "" || len(k) > 160 {
			t.Fatalf("key %q", k)
		}
		if fromIP != (tok == "") {
			t.Fatalf("fromIP %v for token %q", fromIP, tok)
		}
		r.Header["Forwarded"] = []string{fwd}
		if a, _, ok := c.clientAddr(r); ok && !a.IsValid() {
			t.Fatalf("invalid address from %q %q %q", remote, xff, fwd)
		}
	})
}

// TestConcurrentRequests drives many goroutines through one middleware on a
// real server: the admitted count is exactly the burst.
func TestConcurrentRequests(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerMinute(1), 25)
	h := &okHandler{}
	srv := serve(t, mustMW(t, l)(h))
	c := clientFrom(t, "127.0.0.1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if statuses[200] != 25 || statuses[429] != 55 || h.calls.Load() != 25 {
		t.Fatalf("statuses %v, calls %d", statuses, h.calls.Load())
	}
}

// TestRotatingIPv6WithinA64IsLimited: behind a trusted proxy, a client
// rotating through the addresses of its /64 gets one budget, not one per
// address; another /64 has its own.
func TestRotatingIPv6WithinA64IsLimited(t *testing.T) {
	l := newMemBucket(t, frozen(), floodgate.PerMinute(1), 5)
	srv := serve(t, mustMW(t, l, WithTrustedProxies(netip.MustParsePrefix("127.0.0.1/32")))(&okHandler{}))
	c := clientFrom(t, "127.0.0.1")
	statuses := map[int]int{}
	for i := 0; i < 200; i++ {
		res := do(t, c, "GET", srv.URL, map[string]string{"X-Forwarded-For": fmt.Sprintf("2001:db8:aa:bb:%x:%x::1", i*7919&0xffff, i)})
		statuses[res.status]++
	}
	if statuses[200] != 5 || statuses[429] != 195 {
		t.Fatalf("statuses %v", statuses)
	}
	if res := do(t, c, "GET", srv.URL, map[string]string{"X-Forwarded-For": "2001:db8:aa:bc::1"}); res.status != 200 {
		t.Fatalf("neighbouring /64: %d", res.status)
	}
}
