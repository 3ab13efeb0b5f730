package lease_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

func newLease(t testing.TB, st lease.Global, c lease.Config) *lease.Limiter {
	t.Helper()
	l, err := lease.New(st, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func TestConfigErrors(t *testing.T) {
	st := newStore(t, redisClient(t))
	ok := bucket.Config{Name: "x", Rate: floodgate.PerSecond(10), Burst: 10}
	for name, c := range map[string]lease.Config{
		"no name":       {Bucket: bucket.Config{Rate: floodgate.PerSecond(10), Burst: 10}},
		"bad bucket":    {Bucket: bucket.Config{Name: "x", Rate: floodgate.PerSecond(10)}},
		"refresh":       {Bucket: ok, Refresh: -time.Second},
		"long refresh":  {Bucket: ok, Refresh: time.Minute},
		"ttl":           {Bucket: ok, Refresh: time.Second, TTL: time.Millisecond},
		"hot rate":      {Bucket: ok, HotRate: -1},
		"hot rate NaN":  {Bucket: ok, HotRate: math.NaN()},
		"hot rate inf":  {Bucket: ok, HotRate: math.Inf(1)},
		"max keys":      {Bucket: ok, MaxKeys: -1},
		"heartbeat":     {Bucket: ok, Heartbeat: time.Millisecond},
		"workers":       {Bucket: ok, Workers: 1000},
		"mode":          {Bucket: ok, Mode: 7},
		"typed-nil clk": {Bucket: ok, Clock: floodgate.ClockFunc(nil)},
		"typed-nil obs": {Bucket: ok, Observer: floodgate.ObserverFunc(nil)},
	} {
		if _, err := lease.New(st, c); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
	var nilStore *redisstore.Store
	if _, err := lease.New(nilStore, lease.Config{Bucket: ok}); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("typed-nil store: %v", err)
	}
	l := newLease(t, st, lease.Config{Bucket: ok})
	for _, n := range []int{0, -1, 11} {
		if _, err := l.Take(context.Background(), "k", n); !errors.Is(err, floodgate.ErrInvalidCost) {
			t.Errorf("cost %d: %v", n, err)
		}
	}
}

// TestCallsAtSteadyRate offers a steady 10,000 requests per second on one
// key for 2 seconds and counts the calls to Redis (grants and direct
// decisions) after the first 300ms: at most about one per refresh period
// (100ms), so thousands of decisions per call.
func TestCallsAtSteadyRate(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(50_000), Burst: 50_000}})
	ctx := context.Background()
	const perMs = 10
	var decided, admitted int64
	var before lease.Stats
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for time.Since(start) < 2300*time.Millisecond {
		<-tick.C
		// Catch up on ticks the scheduler dropped: a steady rate.
		due := int(time.Since(start)/time.Millisecond) * perMs
		for ; sent < due; sent++ {
			d, err := l.Take(ctx, "hot", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
			decided++
		}
		if before.Grants == 0 && time.Since(start) >= 300*time.Millisecond {
			before = l.Stats()
			before.Grants++ // mark taken (at least one grant happened by then)
			decided, admitted = 0, 0
		}
	}
	after := l.Stats()
	calls := after.Grants - (before.Grants - 1) + after.Direct - before.Direct
	periods := 2000 * time.Millisecond / (100 * time.Millisecond)
	t.Logf("%d decisions (%d admitted) in 2s, %d Redis calls (%d grants, %d direct): %.2f per refresh period, %.0f decisions per call",
		decided, admitted, calls, after.Grants-(before.Grants-1), after.Direct-before.Direct, float64(calls)/float64(periods), float64(decided)/float64(max(calls, 1)))
	if admitted != decided {
		t.Errorf("%d of %d admitted under a limit 5x the rate", admitted, decided)
	}
	if float64(calls) > 1.25*float64(periods) {
		t.Errorf("%d calls in %d refresh periods, want about one per period", calls, periods)
	}
	if decided < 100*calls {
		t.Errorf("%d decisions for %d calls, want at least 100x fewer calls", decided, calls)
	}
}

// TestColdKeys sends 10,000 keys one request a second each for 3 seconds,
// on a limit of 2 per 3 seconds per key (burst 1): the keys stay cold
// (direct calls, nothing leased), none is admitted more than the global
// bucket allows (burst + rate x elapsed), and the tracked keys go away
// once idle.
func TestColdKeys(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.Rate{N: 2, Per: 3 * time.Second}, Burst: 1}, Refresh: 50 * time.Millisecond})
	ctx := context.Background()
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "cold-" + string(rune('a'+i%26)) + "-" + itoa(i)
	}
	admitted := make([]int, keys)
	sent := make([][]int64, keys)  // when each request was sent
	times := make([][]int64, keys) // when each request was decided by
	start := time.Now()
	var wg sync.WaitGroup
	for round := range 3 {
		// Each second, every key once, by 64 workers.
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < keys; i += 64 {
					sent[i] = append(sent[i], time.Now().UnixNano())
					d, err := l.Take(ctx, names[i], 1)
					if err != nil {
						t.Error(err)
						return
					}
					times[i] = append(times[i], time.Now().UnixNano())
					if d.Allowed {
						admitted[i]++
					}
				}
			}()
		}
		wg.Wait()
		if s := l.Stats(); s.Leased != 0 || s.Granted != 0 {
			t.Fatalf("round %d: %d keys leased, %d tokens granted: cold keys must not lease", round, s.Leased, s.Granted)
		}
		time.Sleep(time.Until(start.Add(time.Duration(round+1) * time.Second)))
	}
	elapsed := time.Since(start)
	bound := 1 + int(2*elapsed/(3*time.Second))
	cfg := bucket.Config{Rate: floodgate.Rate{N: 2, Per: 3 * time.Second}, Burst: 1}
	var total, ideal int64
	for i, a := range admitted {
		// Never over-admitted: at most what one bucket of the key's own
		// admits, fed the key's requests each at a time between its
		// sending and its answer (Redis decided it then), and at most
		// burst + rate x elapsed.
		id := idealWithin(t, sent[i], times[i], cfg)
		if a > bound || int64(a) > id {
			t.Fatalf("key %d admitted %d times in %v; its ideal bucket %d, burst + rate x elapsed %d", i, a, elapsed, id, bound)
		}
		total += int64(a)
		ideal += id
	}
	s := l.Stats()
	t.Logf("%d keys, %d admitted in %v (the keys' ideal buckets: %d); tracked %d, direct calls %d", keys, total, elapsed, ideal, s.Keys, s.Direct)
	if total < ideal*99/100 {
		t.Errorf("%d admitted, under 99%% of the ideal %d (cold keys are decided by Redis directly)", total, ideal)
	}
	// Idle keys are forgotten after a TTL (3 refresh periods) without demand.
	deadline := time.Now().Add(2 * time.Second)
	for l.Stats().Keys > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if k := l.Stats().Keys; k > 0 {
		t.Errorf("%d idle keys still tracked", k)
	}
}

func itoa(i int) string {
	var b [20]byte
	p := len(b)
	for {
		p--
		b[p] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[p:])
		}
	}
}

// TestMaxKeys: keys beyond MaxKeys are decided directly, and tracked memory
// stays at MaxKeys.
func TestMaxKeys(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(100), Burst: 10}, MaxKeys: 50})
	for i := range 200 {
		if d, err := l.Take(context.Background(), itoa(i), 1); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if s := l.Stats(); s.Keys != 50 || s.Direct != 200 {
		t.Fatalf("stats %+v: want 50 keys tracked and every decision direct", s)
	}
}

// TestCloseGivesBack: a hot key's lease goes back to the global bucket on
// Close, the goroutines stop (no leak), and Take after Close is refused.
func TestCloseGivesBack(t *testing.T) {
	st := newStore(t, redisClient(t))
	cfg := bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(1000), Burst: 1000}
	direct, _ := bucket.NewKeyed(st, cfg)
	if _, err := direct.Peek(context.Background(), "warm-up"); err != nil { // the client's own goroutines start
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	l, err := lease.New(st, lease.Config{Bucket: cfg, HotRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := leaseGoroutines(); n != 4+2 {
		t.Fatalf("%d goroutines of the limiter running, want 4 workers, the sweeper and the heartbeat", n)
	}
	ctx := context.Background()
	taken := 0
	for range 300 {
		d, err := l.Take(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			taken++
		}
	}
	if l.Stats().Held == 0 {
		t.Fatal("no lease held after 300 requests")
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Held != 0 || s.Expired != 0 || s.Returned != s.Granted-int64(taken-int(s.Direct)) {
		t.Fatalf("stats after Close %+v, %d admitted: every leased token unspent must go back", s, taken)
	}
	if _, err := l.Take(ctx, "k", 1); !errors.Is(err, floodgate.ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
	d, err := direct.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// What is left is the burst less what was admitted (plus a little
	// refill since): nothing stayed stranded in the lease.
	if d.Remaining < int64(1000-taken) {
		t.Fatalf("global bucket has %d left after %d admitted: the lease was not given back", d.Remaining, taken)
	}
	// The goroutines have returned; the runtime may list one for a moment
	// after its wg.Done.
	for end := time.Now().Add(time.Second); leaseGoroutines() != 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := leaseGoroutines(); n != 0 {
		t.Fatalf("%d goroutines of package lease after Close (%d goroutines before New, %d now)", n, base, runtime.NumGoroutine())
	}
}

// leaseGoroutines counts the goroutines running a function of package
// lease (the test's own excluded).
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

// TestDividedMode: each of 4 limiters (the heartbeats count 4) admits the
// rate and burst divided by 4, in memory: no Redis call per decision.
func TestDividedMode(t *testing.T) {
	st := newStore(t, redisClient(t))
	cfg := bucket.Config{Name: uniqueName(t), Rate: floodgate.PerMinute(400), Burst: 40}
	ls := make([]*lease.Limiter, 4)
	for i := range ls {
		ls[i] = newLease(t, st, lease.Config{Bucket: cfg, Mode: lease.Divided, Heartbeat: 20 * time.Millisecond})
	}
	// Wait for every limiter to see the four heartbeats.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		for _, l := range ls {
			all = all && l.Stats().Nodes == 4
		}
		if all {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	total := 0
	for i, l := range ls {
		if n := l.Stats().Nodes; n != 4 {
			t.Fatalf("limiter %d sees %d nodes", i, n)
		}
		ok := 0
		for range 50 {
			d, err := l.Take(context.Background(), "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				ok++
			}
		}
		if ok != 10 {
			t.Errorf("limiter %d admitted %d of 50, want its share of the burst, 10", i, ok)
		}
		total += ok
		if s := l.Stats(); s.Grants != 0 || s.Direct != 0 {
			t.Errorf("divided mode called Redis: %+v", s)
		}
	}
	if total != 40 {
		t.Errorf("fleet admitted %d, want the burst 40", total)
	}
	// A limiter that leaves is no longer counted.
	ls[3].Close(context.Background())
	deadline = time.Now().Add(time.Second)
	for ls[0].Stats().Nodes != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := ls[0].Stats().Nodes; n != 3 {
		t.Errorf("after one left, %d nodes", n)
	}
}

// TestHotAfterCold: a key goes from direct calls to leasing once it is
// busy, and back to direct calls once idle.
func TestHotAfterCold(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(100_000), Burst: 100_000}, Refresh: 20 * time.Millisecond})
	ctx := context.Background()
	var leased atomic.Bool
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && !leased.Load() {
		for range 100 {
			l.Take(ctx, "k", 1)
		}
		leased.Store(l.Stats().Leased == 1)
	}
	if !leased.Load() {
		t.Fatal("a busy key did not lease")
	}
	deadline = time.Now().Add(2 * time.Second)
	for l.Stats().Keys != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := l.Stats(); s.Keys != 0 || s.Held != 0 {
		t.Fatalf("an idle key is still tracked: %+v", s)
	}
}

// TestOnCluster runs two leasing nodes on a Redis Cluster: grants,
// heartbeats and direct decisions each touch one key (one slot), so the
// limit holds there as on one server: two nodes at twice the rate admit
// at most the bound and close to it, on keys in different slots.
func TestOnCluster(t *testing.T) {
	client := clusterClient(t)
	st := newStore(t, client)
	cfg := bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(1000), Burst: 50}
	a := newLease(t, st, lease.Config{Bucket: cfg, Heartbeat: 20 * time.Millisecond})
	b := newLease(t, st, lease.Config{Bucket: cfg, Heartbeat: 20 * time.Millisecond})
	ctx := context.Background()
	const d = time.Second
	keys := []string{"alpha", "beta", "gamma"} // three slots
	admitted := make([]atomic.Int64, len(keys))
	var tmu sync.Mutex
	times := make([][]int64, len(keys))
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range []*lease.Limiter{a, b} {
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := start
				for time.Since(start) < d {
					time.Sleep(time.Until(next))
					next = next.Add(time.Millisecond) // 1,000/s per node per key: 2x the limit
					dd, err := l.Take(ctx, keys[k], 1)
					if err != nil {
						t.Error(err)
						return
					}
					tmu.Lock()
					times[k] = append(times[k], time.Now().UnixNano())
					tmu.Unlock()
					if dd.Allowed {
						admitted[k].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := int64(50) + int64(1000*elapsed.Seconds())
	for k := range keys {
		got := admitted[k].Load()
		ideal := idealAdmitted(t, times[k], cfg)
		t.Logf("key %s: %d admitted, bound %d, the ideal bucket fed the same requests %d (%.1f%%)", keys[k], got, bound, ideal, 100*float64(got)/float64(ideal))
		if got > bound+1 {
			t.Errorf("key %s: %d admitted > bound %d + 1", keys[k], got, bound)
		}
		if got < ideal*95/100 {
			t.Errorf("key %s: %d admitted < 95%% of the ideal %d", keys[k], got, ideal)
		}
	}
	if n := a.Stats().Nodes; n != 2 {
		t.Errorf("%d nodes counted on the cluster, want 2", n)
	}
	if s := a.Stats(); s.Leased != 3 {
		t.Errorf("stats %+v: want the 3 keys leased", s)
	}
}

// TestCancelledCaller: a caller whose context is done while its key's
// lease is spent gets its context's error, and the key is not taken for
// failed: the next caller leases as before.
func TestCancelledCaller(t *testing.T) {
	st := newStore(t, redisClient(t))
	l := newLease(t, st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(1000), Burst: 1000}, HotRate: 1})
	ctx := context.Background()
	for range 5 { // the key turns hot, leases, and spends
		if _, err := l.Take(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var sawErr bool
	for range 2000 { // until the lease is spent and the cancelled caller must renew
		if _, err := l.Take(cancelled, "k", 1); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
			sawErr = true
			break
		}
	}
	if !sawErr {
		t.Fatal("a cancelled caller was never refused")
	}
	before := l.Stats()
	d, err := l.Take(ctx, "k", 1)
	if err != nil || !d.Allowed || d.Fallback {
		t.Fatalf("after a cancelled caller: %+v, %v", d, err)
	}
	if s := l.Stats(); s.Failures != before.Failures || s.Failures != 0 {
		t.Fatalf("a cancelled caller counted as a store failure: %+v", s)
	}
}

// The interfaces a Limiter and the Redis store promise.
var (
	_ lease.Global        = (*redisstore.Store)(nil)
	_ floodgate.Limiter   = (*lease.Limiter)(nil)
	_ floodgate.Refunder  = (*lease.Limiter)(nil)
	_ floodgate.Describer = (*lease.Limiter)(nil)
)

// TestCloseUnderTraffic: Close while requests kick renewals returns (a
// renewal queued for the workers when they quit is ended, not waited for
// forever), and so do the requests waiting for it.
func TestCloseUnderTraffic(t *testing.T) {
	st := newStore(t, redisClient(t))
	ctx := context.Background()
	for round := range 20 {
		cfg := bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(1_000_000), Burst: 1 << 20}
		l, err := lease.New(st, lease.Config{Bucket: cfg, HotRate: 1, Refresh: time.Millisecond, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				key := string(rune('a' + g))
				for {
					if _, err := l.Take(ctx, key, 1); errors.Is(err, floodgate.ErrClosed) {
						return
					} else if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
		done := make(chan struct{})
		go func() {
			l.Close(ctx)
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Close under traffic did not return", round)
		}
	}
}

// Look tells what the lease would decide without taking: a cold key and a
// closed limiter have no answer (the global bucket has it), a leased key
// answers what its lease holds, and looking takes nothing.
func TestLook(t *testing.T) {
	st := newStore(t, redisClient(t))
	l, err := lease.New(st, lease.Config{Bucket: bucket.Config{Name: uniqueName(t), Rate: floodgate.PerSecond(1000), Burst: 100_000}, Refresh: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok := l.Look("k", 1); ok {
		t.Fatal("a key never seen answered from a lease")
	}
	deadline := time.Now().Add(time.Second)
	for l.Stats().Leased == 0 && time.Now().Before(deadline) {
		for range 100 {
			l.Take(ctx, "k", 1)
		}
	}
	// A renewal in flight may add tokens meanwhile, never take any.
	before := l.Stats().Held
	d, ok := l.Look("k", 1)
	held := l.Stats().Held
	if !ok || !d.Allowed || d.Remaining < before || d.Remaining > held || held < 1 {
		t.Fatalf("a leased key: %+v %v, want admitted with what the lease holds (%d..%d)", d, ok, before, held)
	}
	for range 10 {
		l.Look("k", 1)
	}
	if h := l.Stats().Held; h < held {
		t.Fatalf("looking took %d tokens", held-h)
	}
	// A cost above what the lease holds is the global bucket's to answer
	// (unless a renewal brought enough meanwhile).
	if n := l.Stats().Held + 1; n <= 100_000 {
		if d, ok := l.Look("k", int(n)); ok && (!d.Allowed || d.Remaining < n) {
			t.Fatalf("a cost of %d answered from a lease holding %d: %+v", n, d.Remaining, d)
		}
	}
	if _, ok := l.Look("k", 0); ok {
		t.Fatal("a cost of 0 answered from the lease")
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Look("k", 1); ok {
		t.Fatal("a closed limiter answered from a lease")
	}
}
