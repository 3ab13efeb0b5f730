package rls_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// fleet is n rls services on one Redis (one key prefix), each with its own
// client, store and policy.Live, as n processes of a fleet: served on
// loopback, one gRPC client each.
func fleet(t *testing.T, addrs []string, n int, files map[string]string) []*server {
	t.Helper()
	prefix := fmt.Sprintf("rlslease:%d:", rand.Uint64())
	dir := writeDir(t, files)
	var out []*server
	for range n {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := rls.LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := rls.New(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close(context.Background()) })
		out = append(out, serveService(t, svc, dir))
	}
	return out
}

// hammerFleet sends one-hit calls of req from g goroutines per server for
// d, and counts the calls and the admitted ones; a call that fails, leaves
// a descriptor unanswered or refuses without duration_until_reset fails
// the test.
// The start of every call (unix ns) is appended to starts when not nil.
func hammerFleet(t *testing.T, srvs []*server, g int, d time.Duration, req *rlspb.RateLimitRequest, admitted, calls *atomic.Int64, starts *[]int64) time.Duration {
	t.Helper()
	var after, never atomic.Int64
	return hammerFleetAfter(t, srvs, g, d, req, admitted, calls, &after, &never, starts)
}

// ideal is how many of one-unit calls started at starts (unix ns, from
// from on) one token bucket of rate per second and burst admits, holding
// tokens at from.
func ideal(starts []int64, from int64, tokens, rate float64, burst int64) int64 {
	slices.Sort(starts)
	last := from
	var n int64
	for _, at := range starts {
		tokens = min(float64(burst), tokens+float64(at-last)*rate/1e9)
		last = at
		if tokens >= 1 {
			tokens--
			n++
		}
	}
	return n
}

const fleetYAML = `domain: fleet
descriptors:
  - key: route
    rate_limit:
      algorithm: token-bucket
      unit: second
      requests_per_unit: 150
      burst: 50
      leased: true
      lease_refresh: 50ms
`

// Two services on one Redis (two nodes of a fleet) hammering one leased
// limit for 2 s admit within the one global bucket's bound (burst + rate x
// elapsed: tokens are debited from it before they are spent), at most 3
// bursts (and what expired) less than one bucket fed the same calls, every
// call answered, and decide on leases: Redis calls (grants and direct
// decisions) for at most half the calls.
func TestLeasedWithinGlobalBound(t *testing.T) {
	testLeasedBound(t, []string{singleAddr(t)}, 2*time.Second)
}

// The same on the Redis Cluster, for 1.5 s.
func TestLeasedWithinGlobalBoundCluster(t *testing.T) {
	testLeasedBound(t, clusterAddrs(t), 1500*time.Millisecond)
}

func testLeasedBound(t *testing.T, addrs []string, d time.Duration) {
	const rate, burst = 150, 50
	srvs := fleet(t, addrs, 2, map[string]string{"fleet.yaml": fleetYAML})
	req := &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("route", "/img")}}
	var admitted, calls atomic.Int64
	var starts []int64
	elapsed := hammerFleet(t, srvs, 6, d, req, &admitted, &calls, &starts)
	bound := burst + int64(rate*elapsed.Seconds()) + 1
	var grants, granted, direct, expired int64
	for _, srv := range srvs {
		st, ok := rls.LeaseStats(srv.svc, "fleet.route")
		if !ok {
			t.Fatal("no lease limiter for fleet.route")
		}
		grants += st.Grants
		granted += st.Granted
		direct += st.Direct
		expired += st.Expired
		if st.Nodes != 2 {
			t.Errorf("a node counts %d nodes, want 2", st.Nodes)
		}
	}
	slices.Sort(starts)
	n, one := admitted.Load(), ideal(starts, starts[0], burst, rate, burst)
	t.Logf("admitted %d of at most %d in %v (one bucket fed the same calls: %d; %d calls); %d grants brought %d tokens, %d expired, %d direct decisions",
		n, bound, elapsed, one, calls.Load(), grants, granted, expired, direct)
	if n > bound {
		t.Errorf("admitted %d, above the global bound %d", n, bound)
	}
	// Under-admission: at most what the leases held, what they dropped at
	// their TTL and what the nodes waited for (lease's "Bounds": about 2.5
	// bursts with every node busy, plus what expired); 3 bursts here.
	if short := one - n; short > 3*burst+expired {
		t.Errorf("admitted %d, %d less than one bucket fed the same calls (%d): more than 3 bursts and the %d expired", n, short, one, expired)
	}
	if grants == 0 || grants+direct > calls.Load()/2 {
		t.Errorf("%d grants and %d direct decisions for %d calls: not decided on leases", grants, direct, calls.Load())
	}
}

// A reload raising a leased limit, on both nodes while they are hammered:
// every call is answered across the swap (the replaced lease limiters
// serve their last calls, then give their tokens back), the fleet stays
// within the bound of a bucket at the old rate until the reload and the
// new rate after it, and once reloaded admits what a bucket at the new
// rate, empty at the reload, would of the same calls (less lease's
// under-admission bound): far more than the old rate allows.
func TestLeasedReloadRaise(t *testing.T) {
	const oldRate, newRate, burst = 50, 400, 50
	v1 := strings.NewReplacer("requests_per_unit: 150", "requests_per_unit: 50").Replace(fleetYAML)
	v2 := strings.NewReplacer("requests_per_unit: 150", "requests_per_unit: 400").Replace(fleetYAML)
	srvs := fleet(t, []string{singleAddr(t)}, 2, map[string]string{"fleet.yaml": v1})
	req := &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("route", "/img")}}
	var admitted, calls, after atomic.Int64
	var reloadedAt atomic.Int64 // unix ns, once both nodes run v2
	var reloadStart time.Time
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(600 * time.Millisecond)
		reloadStart = time.Now()
		if err := os.WriteFile(filepath.Join(srvs[0].dir, "fleet.yaml"), []byte(v2), 0o644); err != nil {
			t.Error(err)
			return
		}
		for _, srv := range srvs {
			if err := srv.svc.ReloadDir(srv.dir); err != nil {
				t.Error(err)
				return
			}
		}
		reloadedAt.Store(time.Now().UnixNano())
	}()
	var starts []int64
	elapsed := hammerFleetAfter(t, srvs, 4, 1800*time.Millisecond, req, &admitted, &calls, &after, &reloadedAt, &starts)
	<-done
	if t.Failed() {
		return
	}
	end := start.Add(elapsed)
	bound := burst + int64(oldRate*reloadStart.Sub(start).Seconds()+newRate*end.Sub(reloadStart).Seconds()) + 1
	at := reloadedAt.Load()
	var late []int64
	for _, s := range starts {
		if s >= at {
			late = append(late, s)
		}
	}
	var expired int64
	for _, srv := range srvs {
		expired += leaseStats(t, srv.svc).Expired
	}
	// The late calls: what a bucket at the new rate, empty at the reload,
	// admits of them, and the most the old rate would (from full).
	atNew, atOld := ideal(late, at, 0, newRate, burst), ideal(late, at, burst, oldRate, burst)
	n, m := admitted.Load(), after.Load()
	t.Logf("admitted %d of at most %d in %v (%d calls); reloaded in %v; %d of %d calls after it admitted (a bucket at the new rate, empty: %d; at the old rate, full: %d; %d expired)",
		n, bound, elapsed, calls.Load(), time.Unix(0, at).Sub(reloadStart), m, len(late), atNew, atOld, expired)
	if n > bound {
		t.Errorf("admitted %d, above the bound %d", n, bound)
	}
	// Under-admission: 3 bursts for the new leases (lease's "Bounds"), one
	// for what the replaced ones held at the swap, and what expired.
	if short := atNew - m; short > 4*burst+expired {
		t.Errorf("after the reload: %d admitted, %d less than a bucket at the new rate would (%d), more than 4 bursts and the %d expired", m, short, atNew, expired)
	}
	for i, srv := range srvs {
		if srv.svc.Version() != 2 {
			t.Errorf("node %d: version %d, want 2", i, srv.svc.Version())
		}
	}
}

// hammerFleetAfter is hammerFleet that also counts in after the admitted
// calls that started once *since (unix ns) was set.
func hammerFleetAfter(t *testing.T, srvs []*server, g int, d time.Duration, req *rlspb.RateLimitRequest, admitted, calls, after, since *atomic.Int64, starts *[]int64) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	var mu sync.Mutex
	start := time.Now()
	end := start.Add(d)
	for _, srv := range srvs {
		for range g {
			wg.Go(func() {
				var mine []int64
				if starts != nil {
					defer func() {
						mu.Lock()
						*starts = append(*starts, mine...)
						mu.Unlock()
					}()
				}
				for now := time.Now(); now.Before(end); now = time.Now() {
					if starts != nil {
						mine = append(mine, now.UnixNano())
					}
					s := since.Load()
					late := s != 0 && now.UnixNano() >= s
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := srv.client.ShouldRateLimit(ctx, req)
					cancel()
					calls.Add(1)
					if err != nil {
						failed.Store(err)
						return
					}
					if len(resp.Statuses) != len(req.Descriptors) || resp.Statuses[0].CurrentLimit == nil {
						failed.Store(fmt.Errorf("an unanswered descriptor: %v", resp))
						return
					}
					if resp.OverallCode == ok {
						admitted.Add(1)
						if late {
							after.Add(1)
						}
					} else if resp.Statuses[0].DurationUntilReset.AsDuration() <= 0 {
						failed.Store(fmt.Errorf("a refusal without duration_until_reset: %v", resp))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// What a leased limit answers, and what Close gives back. Node a makes the
// key hot (it leases); its limit_remaining is what its lease holds, not the
// global bucket's, which node b's look (hits_addend 0) tells. a's Close
// gives its lease's tokens (and its pool's) back to the global bucket (b
// sees them), and a then answers by its failure mode.
func TestLeasedAnswersAndClose(t *testing.T) {
	const burst = 1000
	yaml := "domain: fleet\ndescriptors:\n  - key: route\n    rate_limit:\n      algorithm: token-bucket\n      unit: minute\n      requests_per_unit: 1\n" +
		"      burst: 1000\n      leased: true\n      lease_refresh: 1s\n" // a TTL of 3 s: nothing expires during the test
	srvs := fleet(t, []string{singleAddr(t)}, 2, map[string]string{"fleet.yaml": yaml})
	a, b := srvs[0], srvs[1]
	d := desc("route", "/img")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				want(t, a.call(t, "fleet", 0, d), ok)
			}
		})
	}
	wg.Wait()
	resp := a.call(t, "fleet", 0, d)
	left := resp.Statuses[0].LimitRemaining
	// a's counters and the global bucket, with no renewal of a's lease
	// between them (one the last call started may still be on its way).
	var st lease.Stats
	var global uint32
	for try := 0; ; try++ {
		time.Sleep(20 * time.Millisecond)
		st = leaseStats(t, a.svc)
		global = b.call(t, "fleet", 0, withHits(desc("route", "/img"), 0)).Statuses[0].LimitRemaining
		if st2 := leaseStats(t, a.svc); st2.Grants == st.Grants || try == 20 {
			break
		}
	}
	if st.Leased != 1 || st.Held == 0 {
		t.Fatalf("node a: %+v, want the key leased and tokens held", st)
	}
	t.Logf("a's lease: %d left (held %d of %d granted, %d direct); the global bucket: %d", left, st.Held, st.Granted, st.Direct, global)
	// a's limit_remaining is its lease's (a alone asks: the bucket,
	// divided in proportion to the demands, is all a's); the global
	// bucket has what neither lease took.
	if int64(left) > st.Held {
		t.Errorf("a's limit_remaining %d, want at most what its lease holds (%d)", left, st.Held)
	}
	// a's calls: 201, the first ones decided directly on the global bucket
	// (until the key is hot), the others on the lease.
	if st.Direct+st.Granted-st.Held != 201 {
		t.Errorf("node a: %d direct and %d leased decisions, want 201 in all", st.Direct, st.Granted-st.Held)
	}
	// The bucket, divided (a's demand is far above 1 a minute), keeps in
	// a's pool what a's lease did not take: at most the burst less a's
	// grants and direct decisions is left in it.
	if g := burst - st.Granted - st.Direct; int64(global) > g+1 {
		t.Errorf("the global bucket has %d left, want at most %d (the burst less a's grants and direct decisions)", global, g)
	}
	// duration_until_reset: the global bucket's time to full as of a's
	// last grant, at 1 a minute.
	if r := resp.Statuses[0].DurationUntilReset.AsDuration(); r <= 0 || r > time.Duration(burst-global+1)*time.Minute {
		t.Errorf("duration_until_reset %v, want the global bucket's time to full (at most %v)", r, time.Duration(burst-global+1)*time.Minute)
	}
	if cl := resp.Statuses[0].CurrentLimit; cl.RequestsPerUnit != 1 || cl.Unit != rlspb.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit %v, want 1 per MINUTE", cl)
	}

	if err := a.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Close gives back what a's lease held and what its pool kept: the
	// bucket has the burst less what a admitted (its counters after
	// Close: a renewal the sweeper started may have come in before it).
	st = leaseStats(t, a.svc)
	after := b.call(t, "fleet", 0, withHits(desc("route", "/img"), 0)).Statuses[0].LimitRemaining
	if g := burst - (st.Granted - st.Returned) - st.Direct; int64(after) < g || int64(after) > g+1 {
		t.Errorf("after a's Close the global bucket has %d, want %d (the burst less what a admitted; %+v)", after, g, st)
	}
	// a's leased limit cannot decide any more: its failure mode answers
	// (FailError: Unavailable, for Envoy's failure_mode_deny).
	if _, err := a.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*ratelimitpb.RateLimitDescriptor{d}}); status.Code(err) != codes.Unavailable {
		t.Errorf("after Close: %v, want Unavailable", err)
	}
	if err := a.svc.Close(context.Background()); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// leaseStats are the counters of fleet.route's lease limiter on svc.
func leaseStats(t *testing.T, svc *rls.Service) lease.Stats {
	t.Helper()
	st, ok := rls.LeaseStats(svc, "fleet.route")
	if !ok {
		t.Fatal("no lease limiter for fleet.route")
	}
	return st
}

// A leased limit of rate_limits beside a plain one, all or nothing: the
// plain one's refusals give the leased tokens back to the global bucket,
// so that it loses only what was admitted.
func TestLeasedInAGroup(t *testing.T) {
	yaml := "domain: fleet\ndescriptors:\n  - key: route\n    rate_limit: {algorithm: token-bucket, unit: minute, requests_per_unit: 1, burst: 20}\n" +
		"    rate_limits:\n      - {algorithm: token-bucket, unit: minute, requests_per_unit: 1, burst: 1000, leased: true, lease_refresh: 1s}\n"
	srv := fleet(t, []string{singleAddr(t)}, 1, map[string]string{"fleet.yaml": yaml})[0]
	admitted := 0
	for range 300 {
		if srv.call(t, "fleet", 0, desc("route", "/img")).OverallCode == ok {
			admitted++
		}
	}
	st, _ := rls.LeaseStats(srv.svc, "fleet.route#1")
	if st.Grants == 0 {
		t.Errorf("%+v: the leased limit did not lease", st)
	}
	if admitted < 20 || admitted > 21 {
		t.Errorf("admitted %d, want the plain limit's burst of 20", admitted)
	}
	if err := srv.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The global bucket of the leased limit, read from the store: the
	// burst less what was admitted (what the leases held went back at Close).
	s := rls.StoreOf(srv.svc)
	p := policy.Policy{Name: "fleet.route#1", Rate: floodgate.Rate{N: 1, Per: time.Minute}, Burst: 1000}
	l, err := p.Limiter(s)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := l.Peek(context.Background(), "fleet|route=/img")
	if err != nil {
		t.Fatal(err)
	}
	if dec.Remaining < int64(1000-admitted) || dec.Remaining > int64(1000-admitted+1) {
		t.Errorf("the leased limit's global bucket has %d, want %d: refusals must give its tokens back (%+v)", dec.Remaining, 1000-admitted, st)
	}
}

// A request refused early (a descriptor it only looks at is over) is
// evaluated, not charged: its leased descriptor answers from this node's
// lease, as the request would have been decided, not from the global
// bucket that the lease drained; and the descriptor that refused leads.
func TestLeasedRefusedEarly(t *testing.T) {
	yaml := "domain: fleet\ndescriptors:\n  - key: route\n    rate_limit:\n      algorithm: token-bucket\n      unit: minute\n      requests_per_unit: 1\n" +
		"      burst: 1000\n      leased: true\n      lease_refresh: 1s\n" +
		"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	a := fleet(t, []string{singleAddr(t)}, 1, map[string]string{"fleet.yaml": yaml})[0]
	d := desc("route", "/img")
	var alone *rlspb.RateLimitResponse
	for range 960 {
		alone = a.call(t, "fleet", 0, d) // hot: leased
	}
	if alone.Statuses[0].Code != rlspb.RateLimitResponse_OK {
		t.Fatalf("the leased descriptor alone: %v", alone)
	}
	a.call(t, "fleet", 0, desc("user", "u1")) // spends user's 1 a minute
	resp := a.call(t, "fleet", 0, d, withHits(desc("user", "u1"), 0))
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("user is spent, yet: %v", resp)
	}
	leasedSt, user := resp.Statuses[0], resp.Statuses[1]
	if leasedSt.Code != rlspb.RateLimitResponse_OK {
		t.Errorf("the leased descriptor of a request refused early: %v, want OK (the lease would admit it)", leasedSt)
	}
	if got, want := int64(leasedSt.LimitRemaining), int64(alone.Statuses[0].LimitRemaining); got < want-2 || got > want+2 {
		t.Errorf("its limit_remaining %d, want what the lease holds, about %d", got, want)
	}
	if user.Code != rlspb.RateLimitResponse_OVER_LIMIT || user.DurationUntilReset.AsDuration() > time.Minute {
		t.Errorf("the refusing descriptor: %v", user)
	}
}
