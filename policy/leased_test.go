package policy_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/middleware/httplimit"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// hammer sends one-unit requests through take from g goroutines for d and
// returns how many were admitted and the time from the first request to the
// last.
func hammer(t *testing.T, g int, d time.Duration, take func() (bool, error)) (int64, time.Duration) {
	t.Helper()
	var admitted atomic.Int64
	var failed atomic.Value
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ok, err := take()
				if err != nil {
					failed.Store(err)
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return admitted.Load(), time.Since(start)
}

// bound is what one token bucket admits at most over elapsed from full.
func bound(burst int64, perSec float64, elapsed time.Duration) int64 {
	return burst + int64(perSec*elapsed.Seconds()) + 1
}

// A leased policy, through Live.Take and through Match and TakeAll, admits
// within the bound of its one global bucket over 2 s, and at least 90% of it.
func TestLeasedWithinGlobalBound(t *testing.T) {
	const rate, burst = 400, 100
	cfg := policy.Config{
		Domain:      "api",
		DefaultPlan: "global",
		Policies: []policy.Policy{
			{Name: "global", Rate: floodgate.PerSecond(rate), Burst: burst, Leased: true, LeaseRefresh: 50 * time.Millisecond},
			{Name: "loose", Rate: floodgate.PerSecond(100_000)},
		},
		Rules: []policy.Rule{{Key: "route", Policy: "global"}, {Key: "client", Policy: "loose"}},
	}
	ctx := context.Background()
	t.Run("Take", func(t *testing.T) {
		live, err := policy.NewLive(cfg, redistest.Stores(t)(t))
		require.NoError(t, err)
		defer live.Close(ctx)
		admitted, elapsed := hammer(t, 8, 2*time.Second, func() (bool, error) {
			d, err := live.Take(ctx, "k", 1)
			return d.Allowed, err
		})
		max := bound(burst, rate, elapsed)
		t.Logf("admitted %d of at most %d in %v", admitted, max, elapsed)
		assert.LessOrEqual(t, admitted, max)
		assert.GreaterOrEqual(t, float64(admitted), 0.9*float64(max))
		ll, ok := live.Set().Lease("global")
		require.True(t, ok)
		assert.Positive(t, ll.Stats().Grants, "the key is decided on leases")
	})
	t.Run("MatchTakeAll", func(t *testing.T) {
		live, err := policy.NewLive(cfg, redistest.Stores(t)(t))
		require.NoError(t, err)
		defer live.Close(ctx)
		descs := []middleware.Descriptor{{{Key: "route", Value: "/img"}}, {{Key: "client", Value: "c1"}}}
		admitted, elapsed := hammer(t, 8, 2*time.Second, func() (bool, error) {
			var buf [2]floodgate.Check
			checks, enforcing, err := live.Match(ctx, descs, 1, buf[:0])
			if err != nil {
				return false, err
			}
			if len(checks) != 2 || enforcing != 2 {
				return false, errors.New("want two enforcing checks")
			}
			d, err := floodgate.TakeAll(ctx, checks)
			return d.Allowed, err
		})
		max := bound(burst, rate, elapsed)
		t.Logf("admitted %d of at most %d in %v", admitted, max, elapsed)
		assert.LessOrEqual(t, admitted, max)
		assert.GreaterOrEqual(t, float64(admitted), 0.9*float64(max))
	})
}

// All or nothing holds with a leased check in a group: a refusal by the
// other check gives the leased tokens back to the global bucket; a dry-run
// leased policy's checks come after the enforcing ones.
func TestLeasedAllOrNothingAndDryRun(t *testing.T) {
	const burst = 1000
	cfg := policy.Config{
		Domain: "api",
		Policies: []policy.Policy{
			{Name: "big", Rate: floodgate.PerSecond(1), Burst: burst, Leased: true},
			{Name: "small", Rate: floodgate.PerSecond(1), Burst: 20},
			{Name: "watch", Rate: floodgate.PerSecond(10), Leased: true, DryRun: true},
		},
		Rules: []policy.Rule{{Key: "route", Policy: "big"}, {Key: "client", Policy: "small"}, {Key: "tenant", Policy: "watch"}},
	}
	ctx := context.Background()
	live, err := policy.NewLive(cfg, redistest.Stores(t)(t))
	require.NoError(t, err)
	defer live.Close(ctx)
	set := live.Set()
	big, _ := set.Lease("big")
	watch, _ := set.Lease("watch")
	descs := []middleware.Descriptor{{{Key: "tenant", Value: "t"}}, {{Key: "route", Value: "/img"}}, {{Key: "client", Value: "c"}}}
	checks, enforcing, err := live.Match(ctx, descs, 1, nil)
	require.NoError(t, err)
	require.Len(t, checks, 3)
	require.Equal(t, 2, enforcing, "the dry-run check goes last")
	assert.Same(t, big, checks[0].Limiter, "the leased policy is decided by its lease")
	assert.Same(t, watch, checks[2].Limiter)
	admitted := 0
	for range 400 { // hot enough for "big" to lease
		checks, _, err := live.Match(ctx, descs, 1, checks[:0])
		require.NoError(t, err)
		d, err := floodgate.TakeAll(ctx, checks[:2])
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	assert.InDelta(t, 20, admitted, 2, "small admits its burst")
	assert.Positive(t, big.Stats().Grants, "big leases")
	require.NoError(t, live.Close(ctx))
	direct, _ := set.Limiter("big")
	d, err := direct.Peek(ctx, checks[0].Key)
	require.NoError(t, err)
	// Every refusal by small refunded big's token: big lost only what was
	// admitted, and what its leases dropped unspent at their TTL (none on
	// an idle machine; the test runs in well under the TTL).
	expired := big.Stats().Expired
	assert.GreaterOrEqual(t, d.Remaining, int64(burst-admitted)-expired, "big's tokens went back on refusals and at Close (%d expired)", expired)
}

// A live raise of a leased policy keeps a drained key drained (no fresh
// burst), then admits at the new rate.
func TestLeasedRaiseKeepsState(t *testing.T) {
	defer policy.SetLeaseGrace(50 * time.Millisecond)()
	cfg := policy.Config{
		DefaultPlan: "pro",
		Policies:    []policy.Policy{{Name: "pro", Rate: floodgate.PerSecond(100), Leased: true}},
	}
	ctx := context.Background()
	live, err := policy.NewLive(cfg, redistest.Stores(t)(t))
	require.NoError(t, err)
	defer live.Close(ctx)
	take := func() (bool, error) {
		d, err := live.Take(ctx, "k", 1)
		return d.Allowed, err
	}
	// Drain: burst 100 and the refill of the half second.
	admitted, elapsed := hammer(t, 4, 500*time.Millisecond, take)
	drained := time.Now()
	require.LessOrEqual(t, admitted, bound(100, 100, elapsed))
	old, _ := live.Set().Lease("pro")

	raised := cfg
	raised.Policies = []policy.Policy{{Name: "pro", Rate: floodgate.PerSecond(200), Leased: true}}
	// The tokens the old lease still holds go back to the bucket when it
	// is closed: they may be admitted after the raise.
	held := old.Stats().Held
	raisedAt := time.Now()
	// The bucket refills at the old rate between the drain and the raise
	// (a loaded machine may take some milliseconds between the two).
	held += int64(100 * raisedAt.Sub(drained).Seconds())
	ch, err := live.Update(raised, "api")
	require.NoError(t, err)
	assert.Equal(t, []string{"pro"}, ch.Changed)
	cur, _ := live.Set().Lease("pro")
	require.NotSame(t, old, cur, "a changed leased policy gets a new lease limiter")

	// Drained: the first 100 ms admit the refill only, not a burst of 200.
	first, _ := hammer(t, 4, 100*time.Millisecond, take)
	assert.LessOrEqual(t, first, int64(200*time.Since(raisedAt).Seconds())+2+held, "a drained key gained a burst on the raise")
	// Then the new rate: from the raise on, at most one bucket at 200/s
	// from empty (plus what the old lease held).
	admitted, _ = hammer(t, 4, 1500*time.Millisecond, take)
	since := time.Since(raisedAt)
	t.Logf("after the raise: %d then %d admitted in %v (%d held by the old lease)", first, admitted, since, held)
	assert.LessOrEqual(t, first+admitted, int64(200*since.Seconds())+2+held)
	// At least 90% of it, less the last refresh period's refill (a
	// divided bucket is claimed once a period: the refill since the last
	// claim, 100ms at most, is still in the store when the window ends).
	assert.GreaterOrEqual(t, float64(first+admitted), 0.9*200*(since.Seconds()-0.1))

	// The replaced lease limiter was closed after the grace.
	_, err = old.Take(ctx, "k", 1)
	assert.ErrorIs(t, err, floodgate.ErrClosed)
}

// Leased belongs to token buckets (file:line errors), and needs a store
// that grants leases.
func TestLeasedConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"policies:\n  - name: w\n    algorithm: fixed-window\n    limit: 10\n    window: 1m\n    leased: true\n",
			"p.yaml:6: policy \"w\": leased is for token-bucket policies, not fixed-window (a lease holds tokens)"},
		{"policies:\n  - name: b\n    rate: 10/s\n    lease_refresh: 100ms\n",
			"p.yaml:4: policy \"b\": lease_refresh needs leased: true"},
		{"policies:\n  - name: b\n    rate: 10/s\n    leased: true\n    lease_refresh: 1m\n",
			"p.yaml:5: policy \"b\": lease_refresh 1m0s outside 1ms..10s"},
		{"policies:\n  - name: b\n    rate: 10/s\n    leased: yes please\n",
			"p.yaml:4: leased: want true or false"},
	} {
		_, err := policy.Parse("p.yaml", []byte(tc.yaml))
		var ce *policy.ConfigError
		require.ErrorAs(t, err, &ce, tc.yaml)
		assert.Equal(t, tc.want, err.Error())
	}
	cfg, err := policy.Parse("p.yaml", []byte("default_plan: b\npolicies:\n  - {name: b, rate: 10/s, leased: true, lease_refresh: 20ms}\n"))
	require.NoError(t, err, "a store's abilities are not the file's business")
	assert.Equal(t, policy.Policy{Name: "b", Rate: floodgate.PerSecond(10), Leased: true, LeaseRefresh: 20 * time.Millisecond}, cfg.Policies[0])

	const want = `policy "b": leased needs a shared store that grants leases (redisstore)`
	mem, err := memstore.New()
	require.NoError(t, err)
	_, err = policy.NewLive(cfg, mem)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	assert.Contains(t, err.Error(), want)

	plain := policy.Config{Policies: []policy.Policy{{Name: "b", Rate: floodgate.PerSecond(10)}}}
	live, err := policy.NewLive(plain, mem)
	require.NoError(t, err)
	_, err = live.Update(cfg, "api")
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	assert.Contains(t, err.Error(), want)
	require.NoError(t, live.Close(context.Background()), "a Live without leases has nothing to close")

}

// An unchanged leased policy keeps its lease limiter across reloads; a
// changed or removed one is closed; Live.Close stops every goroutine.
func TestLeasedLifecycle(t *testing.T) {
	defer policy.SetLeaseGrace(20 * time.Millisecond)()
	s := redistest.Stores(t)(t)
	ctx := context.Background()
	warm, err := policy.Policy{Name: "warm-up", Rate: floodgate.PerSecond(1)}.Limiter(s)
	require.NoError(t, err)
	_, err = warm.Peek(ctx, "k") // the client's own goroutines start
	require.NoError(t, err)
	cfg := policy.Config{Policies: []policy.Policy{
		{Name: "a", Rate: floodgate.PerSecond(100), Leased: true},
		{Name: "b", Rate: floodgate.PerSecond(100), Leased: true},
		{Name: "c", Rate: floodgate.PerSecond(100)},
	}}
	live, err := policy.NewLive(cfg, s)
	require.NoError(t, err)
	const perLimiter = 4 + 2 // lease's workers, sweeper, heartbeat
	require.Equal(t, 2*perLimiter, leaseGoroutines())
	a, _ := live.Set().Lease("a")
	b, _ := live.Set().Lease("b")
	_, ok := live.Set().Lease("c")
	require.False(t, ok)

	next := policy.Config{Policies: []policy.Policy{
		{Name: "a", Rate: floodgate.PerSecond(100), Leased: true, DryRun: true},
		{Name: "c", Rate: floodgate.PerSecond(50)},
	}}
	_, err = live.Update(next, "api")
	require.NoError(t, err)
	a2, _ := live.Set().Lease("a")
	assert.Same(t, a, a2, "an unchanged leased policy keeps its lease limiter")
	_, err = a.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return leaseGoroutines() == perLimiter }, 2*time.Second, 5*time.Millisecond, "the removed policy's lease limiter is closed")
	_, err = b.Take(ctx, "k", 1)
	assert.ErrorIs(t, err, floodgate.ErrClosed)

	// A bad config leaves no lease limiter behind.
	bad := next
	bad.Policies = append(bad.Policies, policy.Policy{Name: "d", Rate: floodgate.PerSecond(10), Leased: true}, policy.Policy{Name: "d", Rate: floodgate.PerSecond(1)})
	_, err = live.Update(bad, "api")
	require.Error(t, err)
	// A closed limiter's goroutines have returned; the runtime may list one
	// for a moment after its wg.Done.
	assert.Eventually(t, func() bool { return leaseGoroutines() == perLimiter }, time.Second, time.Millisecond)

	// A change and a Close within the grace: both limiters closed at once.
	next.Policies[0].Rate = floodgate.PerSecond(200)
	_, err = live.Update(next, "api")
	require.NoError(t, err)
	require.NoError(t, live.Close(ctx))
	assert.Eventually(t, func() bool { return leaseGoroutines() == 0 }, time.Second, time.Millisecond, "goroutines of package lease after Live.Close")
	_, err = live.Take(ctx, "k", 1) // no plan: admitted
	require.NoError(t, err)
	_, err = live.Update(next, "api")
	assert.ErrorIs(t, err, floodgate.ErrClosed)
}

// leaseGoroutines counts the goroutines started by package lease.
func leaseGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/floodgate-go/floodgate/lease.") {
			n++
		}
	}
	return n
}

// A leased policy behind httplimit.Policies, through a real HTTP server:
// its burst is admitted, then 429 with its name in RateLimit-Policy.
func TestLeasedOverHTTP(t *testing.T) {
	cfg, err := policy.Parse("limits.yaml", []byte("policies:\n  - {name: origin, rate: 1/m, burst: 30, leased: true}\nrules:\n  - {key: route, policy: origin}\n"))
	require.NoError(t, err)
	ctx := context.Background()
	live, err := policy.NewLive(cfg, redistest.Stores(t)(t))
	require.NoError(t, err)
	defer live.Close(ctx)
	limit, err := httplimit.Policies(live, httplimit.WithDescriptor(httplimit.ValueEntry("route", false, func(*http.Request) string { return "/img" })))
	require.NoError(t, err)
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	defer srv.Close()
	codes := map[int]int{}
	var policyHeader string
	for range 60 {
		resp, err := srv.Client().Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
		codes[resp.StatusCode]++
		policyHeader = resp.Header.Get("RateLimit-Policy")
	}
	assert.Equal(t, map[int]int{http.StatusOK: 30, http.StatusTooManyRequests: 30}, codes)
	assert.Equal(t, `"origin";q=30;w=1800`, policyHeader, "the policy as its store limiter describes it: its rate, scaled to its burst")
}

// The recompile that drops expired versions (Live's retire timer) keeps
// the Set's credential check: on a shared store without WithKeySecret,
// credentials stay refused.
func TestRetireKeepsCredentialCheck(t *testing.T) {
	s := redistest.Stores(t)(t)
	cfg := policy.Config{Policies: []policy.Policy{{Name: "p", Rate: floodgate.PerSecond(10)}}}
	live, err := policy.NewLive(cfg, s)
	require.NoError(t, err)
	require.Error(t, live.CheckCredentials())
	cfg.Policies[0].Rate = floodgate.PerSecond(20)
	_, err = live.Update(cfg, "api")
	require.NoError(t, err)
	now := time.Now().Add(24 * time.Hour)
	policy.SetClock(live, func() time.Time { return now })
	policy.Retire(live)
	assert.ErrorIs(t, live.CheckCredentials(), floodgate.ErrInvalidConfig, "after the retire recompile")
}

// Reloads of a leased policy under traffic: every request gets a decision
// (a request that picked a lease limiter closed under it is decided on the
// running Set), and the fleet stays within the larger config's bound.
func TestLeasedReloadUnderTraffic(t *testing.T) {
	defer policy.SetLeaseGrace(time.Millisecond)() // closes race the requests
	cfg := func(rate int64) policy.Config {
		return policy.Config{DefaultPlan: "p", Policies: []policy.Policy{{Name: "p", Rate: floodgate.PerSecond(rate), Leased: true, LeaseRefresh: 20 * time.Millisecond}}}
	}
	ctx := context.Background()
	live, err := policy.NewLive(cfg(100), redistest.Stores(t)(t))
	require.NoError(t, err)
	defer live.Close(ctx)
	var changes atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := live.Update(cfg(100+100*int64(i%2)), "api"); err != nil {
				t.Error(err)
				return
			}
			changes.Add(1)
		}
	})
	admitted, elapsed := hammer(t, 4, time.Second, func() (bool, error) {
		d, err := live.Take(ctx, "k", 1)
		return d.Allowed, err
	})
	close(done)
	wg.Wait()
	max := bound(200, 200, elapsed) + changes.Load() // a raise may bring the next token an interval sooner
	t.Logf("%d admitted in %v across %d changes, at most %d", admitted, elapsed, changes.Load(), max)
	assert.LessOrEqual(t, admitted, max)
	assert.Positive(t, changes.Load())
}
