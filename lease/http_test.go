package lease_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// TestBehindHTTP puts a leased limiter behind httplimit on a real
// net/http server: the global burst passes, then 429 with a Retry-After
// and the RateLimit fields of the global policy, whether the key was
// decided directly (cold) or from a lease (hot).
func TestBehindHTTP(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerMinute(10), Burst: 10}, HotRate: 4})
	if _, err := httplimit.Middleware(l, httplimit.WithHeaderKey("X-Client")); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("a header key on a leased (shared) limiter without the fleet's secret: %v", err)
	}
	mw, err := httplimit.Middleware(l, httplimit.WithHeaderKey("X-Client"), httplimit.WithKeySecret([]byte("the fleet's secret, 32 bytes....")))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })))
	defer srv.Close()
	client := srv.Client()
	codes := map[int]int{}
	var retry string
	for range 30 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Client", "c1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			retry = resp.Header.Get("Retry-After")
			if resp.Header.Get("RateLimit-Policy") == "" {
				t.Error("a 429 without RateLimit-Policy")
			}
		}
	}
	if codes[http.StatusNoContent] != 10 || codes[http.StatusTooManyRequests] != 20 {
		t.Fatalf("codes %v: want the burst of 10 admitted, 20 refused; %+v", codes, l.Stats())
	}
	if s, err := strconv.Atoi(retry); err != nil || s < 1 || s > 6 {
		t.Fatalf("Retry-After %q, want 1..6 s (one token every 6s)", retry)
	}
	if s := l.Stats(); s.Leased != 1 {
		t.Errorf("the key did not lease after 30 requests: %+v", s)
	}
}

// TestAllRefunds: floodgate.All over a leased limiter and a tighter local
// one gives the leased tokens back when the local one refuses, so that
// the global budget is not spent by refused requests.
func TestAllRefunds(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerHour(1), Burst: 100}, HotRate: 1})
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tight, err := bucket.NewKeyed(mem, bucket.Config{Rate: floodgate.PerHour(1), Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	both, err := floodgate.All(l, tight)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := 0
	for range 50 {
		d, err := both.Take(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			ok++
		}
	}
	if ok != 3 {
		t.Fatalf("%d admitted, want the tight limit's 3", ok)
	}
	// 97 of the global 100 are left: held in the lease, kept for this
	// node in the store (the bucket is divided: its demand is far above
	// 1 an hour), or in the bucket. Close gives back the first two.
	time.Sleep(10 * time.Millisecond)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	direct, _ := bucket.NewKeyed(st, bucket.Config{Name: l.Describe().Name, Rate: floodgate.PerHour(1), Burst: 100})
	d, err := direct.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 97 {
		t.Fatalf("global %d after Close, want 97 (refused requests spend nothing)", d.Remaining)
	}
}
