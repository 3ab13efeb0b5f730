package httplimit

import (
	"github.com/floodgate-go/floodgate/middleware"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/window"
)

// checkEncoding checks one response's IETF fields, parsed by httpsfv (not
// the middleware's formatter), against the contract: every RateLimit
// member names a RateLimit-Policy member, r <= q, q/w is the rate of the
// limit of that name (rates), and on a refusal Retry-After >= every t,
// the largest t being Retry-After itself (no jitter here).
func checkEncoding(t *testing.T, label string, resp *http.Response, rates map[string]floodgate.Rate) {
	t.Helper()
	pols := map[string]rl{}
	for _, p := range parseRL(t, resp.Header, "RateLimit-Policy") {
		pols[p.name] = p
		rate, ok := rates[p.name]
		if !ok {
			t.Fatalf("%s: policy %q not configured", label, p.name)
		}
		if !p.hasW || p.w <= 0 || p.q*int64(rate.Per) != p.w*rate.N*int64(time.Second) {
			t.Errorf("%s: %q;q=%d;w=%d: q/w is not the rate %d per %v", label, p.name, p.q, p.w, rate.N, rate.Per)
		}
	}
	cur := parseRL(t, resp.Header, "RateLimit")
	maxT := int64(-1)
	for _, m := range cur {
		p, ok := pols[m.name]
		if !ok {
			t.Fatalf("%s: RateLimit member %q has no policy", label, m.name)
		}
		if m.r > p.q {
			t.Errorf("%s: %q: r=%d > q=%d", label, m.name, m.r, p.q)
		}
		maxT = max(maxT, m.t)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		if len(cur) != len(pols) {
			t.Errorf("%s: admitted with %d RateLimit members for %d policies", label, len(cur), len(pols))
		}
		return
	}
	ra := atoi(t, resp.Header.Get("Retry-After"))
	for _, m := range cur {
		if m.t > ra {
			t.Errorf("%s: Retry-After %d < %q;r=%d;t=%d", label, ra, m.name, m.r, m.t)
		}
	}
	if maxT != ra {
		t.Errorf("%s: Retry-After %d, largest t %d: want them equal", label, ra, maxT)
	}
}

type encLimit struct {
	rate floodgate.Rate
	make func(store.Store) (*store.Limiter, error)
}

func tb(name string, rate floodgate.Rate, burst int64) encLimit {
	return encLimit{rate, func(s store.Store) (*store.Limiter, error) {
		return bucket.NewKeyed(s, bucket.Config{Name: name, Rate: rate, Burst: burst})
	}}
}

func lb(name string, rate floodgate.Rate, burst, delay int64) encLimit {
	return encLimit{rate, func(s store.Store) (*store.Limiter, error) {
		return leaky.NewKeyed(s, leaky.Config{Name: name, Rate: rate, Burst: burst, Delay: delay, NoDelay: delay == 0})
	}}
}

func win(name string, limit int64, w time.Duration, sliding bool) encLimit {
	return encLimit{floodgate.Rate{N: limit, Per: w}, func(s store.Store) (*store.Limiter, error) {
		if sliding {
			return window.NewSlidingCounter(s, window.Config{Name: name, Limit: limit, Window: w})
		}
		return window.NewFixed(s, window.Config{Name: name, Limit: limit, Window: w})
	}}
}

// The IETF fields through a real server and client, for many limits and
// combinations, until each is refused.
func TestEncodingThroughHTTP(t *testing.T) {
	cases := []struct {
		name   string
		limits map[string]encLimit // the first listed in order is the main one
		order  []string
		opts   []Option
	}{
		{"burst above N", map[string]encLimit{"per-ip": tb("per-ip", floodgate.PerSecond(10), 20)}, []string{"per-ip"}, nil},
		{"burst below N", map[string]encLimit{"b": tb("b", floodgate.PerSecond(10), 5)}, []string{"b"}, nil},
		{"burst not a multiple", map[string]encLimit{"b": tb("b", floodgate.PerSecond(10), 15)}, []string{"b"}, nil},
		{"sub-second period", map[string]encLimit{"b": tb("b", floodgate.Rate{N: 5, Per: 500 * time.Millisecond}, 3)}, []string{"b"}, nil},
		{"slow bucket", map[string]encLimit{"b": tb("b", floodgate.PerMinute(3), 7)}, []string{"b"}, nil},
		{"fixed window", map[string]encLimit{"w": win("w", 5, 2*time.Second, false)}, []string{"w"}, nil},
		{"sliding window", map[string]encLimit{"w": win("w", 3, 10*time.Second, true)}, []string{"w"}, nil},
		{"leaky", map[string]encLimit{"l": lb("l", floodgate.PerSecond(2), 4, 0)}, []string{"l"}, nil},
		{"leaky delay refused", map[string]encLimit{"l": lb("l", floodgate.PerSecond(1), 5, 2)}, []string{"l"}, []Option{WithDelayMode(middleware.DelayRefuse)}},
		{"one of two refuses", map[string]encLimit{
			"tight":  tb("tight", floodgate.Rate{N: 1, Per: 4 * time.Second}, 1),
			"search": tb("search", floodgate.Rate{N: 1, Per: 7 * time.Second}, 2),
		}, []string{"tight", "search"}, nil},
		{"one of three refuses", map[string]encLimit{
			"search": tb("search", floodgate.PerSecond(2), 3),
			"hourly": win("hourly", 100, time.Hour, false),
			"burst":  tb("burst", floodgate.PerMinute(10), 30),
		}, []string{"hourly", "search", "burst"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			rates := map[string]floodgate.Rate{}
			var ls []*store.Limiter
			for _, name := range tc.order {
				l, err := tc.limits[name].make(s)
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
				rates[name] = tc.limits[name].rate
			}
			opts := tc.opts
			for _, l := range ls[1:] {
				opts = append(opts, WithLimit(l, nil))
			}
			srv := serve(t, mustMW(t, ls[0], opts...)(&okHandler{}))
			c := clientFrom(t, "127.0.0.1")
			for i := 0; ; i++ {
				resp, err := c.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				checkEncoding(t, tc.name+" request "+strconv.Itoa(i), resp, rates)
				if resp.StatusCode == http.StatusTooManyRequests {
					break
				}
				if i > 200 {
					t.Fatal("never refused")
				}
			}
		})
	}
}

// The same contract from Policies, where two matched policies check a
// request and one refuses.
func TestEncodingThroughPolicies(t *testing.T) {
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(frozen())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, h, _ := newPolicies(t, s, `policies:
  - {name: search, rate: 1/7s, burst: 2}
  - {name: tight, rate: 1/4s, burst: 1}
  - {name: free, rate: 10/s, burst: 20}
rules:
  - key: service
    value: s
    policy: search
    rules:
      - key: route
        policy: tight
`)
	srv := serve(t, h)
	c := clientFrom(t, "127.0.0.1")
	rates := map[string]floodgate.Rate{
		"search": {N: 1, Per: 7 * time.Second},
		"tight":  {N: 1, Per: 4 * time.Second},
	}
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		req.Header.Set("X-Service", "s")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		checkEncoding(t, "policies request "+strconv.Itoa(i), resp, rates)
		if resp.StatusCode == http.StatusTooManyRequests {
			return
		}
	}
	t.Fatal("never refused")
}
