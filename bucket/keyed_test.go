package bucket_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// keyedEpoch is a realistic "now" in Unix microseconds (November 2023).
const keyedEpoch = int64(1_700_000_000_000_000)

func mustKeyedAlg(t testing.TB, c bucket.Config) algo.Algorithm {
	t.Helper()
	alg, err := c.Algorithm()
	if err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	return alg
}

const usMilli = int64(time.Millisecond / time.Microsecond)

// TestKeyedStepTable walks one key of a bucket of 3 refilling 1 per 100ms
// through explicit times.
func TestKeyedStepTable(t *testing.T) {
	alg := mustKeyedAlg(t, bucket.Config{Rate: floodgate.Rate{N: 10, Per: time.Second}, Burst: 3})
	if sp := alg.Spec(); sp.Name != "token-bucket" || sp.Words != 1 || sp.MaxLog != 0 || sp.Lua.Source == "" {
		t.Fatalf("Spec = %+v", sp)
	}
	type row struct {
		name    string
		at      int64 // microseconds after keyedEpoch
		n       int64
		allowed bool
		rem     int64
		retry   time.Duration
		reset   time.Duration
	}
	rows := []row{
		{"peek fresh", 0, 0, true, 3, 0, 0},
		{"take 1", 0, 1, true, 2, 0, 100 * time.Millisecond},
		{"take 2 (cost n)", 0, 2, true, 0, 0, 300 * time.Millisecond},
		{"empty: denied", 0, 1, false, 0, 100 * time.Millisecond, 300 * time.Millisecond},
		{"denial consumed nothing", 0, 1, false, 0, 100 * time.Millisecond, 300 * time.Millisecond},
		{"1us early", 100*usMilli - 1, 1, false, 0, time.Microsecond, 200*time.Millisecond + time.Microsecond},
		{"retry at RetryAfter", 100 * usMilli, 1, true, 0, 0, 300 * time.Millisecond},
		{"refund 1", 100 * usMilli, -1, true, 1, 0, 200 * time.Millisecond},
		{"cost 3 with 1 left", 100 * usMilli, 3, false, 1, 200 * time.Millisecond, 200 * time.Millisecond},
		{"peek after denial", 100 * usMilli, 0, true, 1, 0, 200 * time.Millisecond},
		{"cost 3 at its RetryAfter", 300 * usMilli, 3, true, 0, 0, 300 * time.Millisecond},
		{"partial refill floors", 450 * usMilli, 0, true, 1, 0, 150 * time.Millisecond},
		{"refill stops at burst", 10_000 * usMilli, 0, true, 3, 0, 0},
		{"refund on full", 10_000 * usMilli, -5, true, 3, 0, 0},
		{"burst again", 10_000 * usMilli, 3, true, 0, 0, 300 * time.Millisecond},
		{"refund more than taken", 10_000 * usMilli, -3, true, 3, 0, 0},
	}
	var s algo.State
	for _, r := range rows {
		var d floodgate.Decision
		s, d = alg.Step(s, keyedEpoch+r.at, r.n)
		want := floodgate.Decision{Allowed: r.allowed, Limit: 3, Remaining: r.rem, RetryAfter: r.retry, ResetAfter: r.reset}
		if d != want {
			t.Fatalf("%s (t=%dus, n=%d): got %+v, want %+v", r.name, r.at, r.n, d, want)
		}
		if s.W[0] > keyedEpoch+r.at+3*100*usMilli {
			t.Fatalf("%s: state %d is more than tau ahead of now", r.name, s.W[0])
		}
	}
}

// TestKeyedIntervalRoundsUp checks that the interval is rounded up to a whole
// microsecond, so that the effective rate is never above the written one.
func TestKeyedIntervalRoundsUp(t *testing.T) {
	alg := mustKeyedAlg(t, bucket.Config{Rate: floodgate.Rate{N: 3, Per: time.Second}, Burst: 1}) // 333333.33us
	s, d := alg.Step(algo.State{}, keyedEpoch, 1)
	if !d.Allowed || d.ResetAfter != 333334*time.Microsecond {
		t.Fatalf("got %+v, want ResetAfter 333334us", d)
	}
	if _, d = alg.Step(s, keyedEpoch+333333, 1); d.Allowed {
		t.Fatalf("admitted one microsecond before the rounded-up interval: %+v", d)
	}
	if _, d = alg.Step(s, keyedEpoch+333334, 1); !d.Allowed {
		t.Fatalf("denied at the rounded-up interval: %+v", d)
	}
}

// TestKeyedNamespace checks the identity rule: limiters with the same Name
// share a namespace whatever their parameters (a change of parameters keeps
// the state); different names never share; unnamed limiters never share,
// even with equal parameters.
func TestKeyedNamespace(t *testing.T) {
	ns := func(c bucket.Config) uint64 { return mustKeyedAlg(t, c).Spec().Namespace }
	a := bucket.Config{Name: "api", Rate: floodgate.PerSecond(10), Burst: 5}
	if ns(a) != ns(bucket.Config{Name: "api", Rate: floodgate.PerMinute(7), Burst: 50}) {
		t.Error("one Name with other parameters has another namespace")
	}
	if ns(a) == ns(bucket.Config{Name: "api2", Rate: floodgate.PerSecond(10), Burst: 5}) {
		t.Error("two names share a namespace")
	}
	u := bucket.Config{Rate: floodgate.PerSecond(10), Burst: 5}
	if ns(u) == ns(u) || ns(u) == ns(a) {
		t.Error("unnamed limiters share a namespace")
	}
	if sp := mustKeyedAlg(t, a).Spec(); sp.Policy != "api" || sp.Capacity != 5 {
		t.Errorf("Spec = %+v, want Policy api and Capacity 5", sp)
	}
}

func TestKeyedRejectsBadConfig(t *testing.T) {
	for name, c := range map[string]bucket.Config{
		"zero":                  {},
		"N = 0":                 {Rate: floodgate.Rate{N: 0, Per: time.Second}, Burst: 1},
		"N < 0":                 {Rate: floodgate.Rate{N: -1, Per: time.Second}, Burst: 1},
		"Per = 0":               {Rate: floodgate.Rate{N: 1}, Burst: 1},
		"Per < 0":               {Rate: floodgate.Rate{N: 1, Per: -time.Second}, Burst: 1},
		"burst 0":               {Rate: floodgate.PerSecond(1), Burst: 0},
		"burst < 0":             {Rate: floodgate.PerSecond(1), Burst: -5},
		"Per below 1us":         {Rate: floodgate.Rate{N: 1, Per: 999}, Burst: 1},
		"above 1/us":            {Rate: floodgate.PerSecond(2_000_000), Burst: 1},
		"N = MaxInt64":          {Rate: floodgate.Rate{N: math.MaxInt64, Per: time.Second}, Burst: 1},
		"interval above 2^50us": {Rate: floodgate.Rate{N: 1, Per: math.MaxInt64}, Burst: 1},
		"burst x interval":      {Rate: floodgate.PerSecond(1), Burst: 1 << 31},
		"burst = MaxInt64":      {Rate: floodgate.PerSecond(1_000_000), Burst: math.MaxInt64},
	} {
		if err := validate(c); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
		if alg, err := c.Algorithm(); alg != nil || !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: Algorithm() = %v, %v, want ErrInvalidConfig", name, alg, err)
		}
		s, _ := memstore.New(memstore.WithSweepInterval(0))
		if l, err := bucket.NewKeyed(s, c); l != nil || !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%s: NewKeyed() = %v, %v, want ErrInvalidConfig", name, l, err)
		}
	}
	if l, err := bucket.NewKeyed(nil, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 1}); l != nil || !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("nil store: %v, %v, want ErrInvalidConfig", l, err)
	}
	// The limits themselves are accepted.
	for name, c := range map[string]bucket.Config{
		"1/us":              {Rate: floodgate.PerSecond(1_000_000), Burst: 1},
		"burst x interval":  {Rate: floodgate.PerSecond(1), Burst: 1 << 30},
		"1 per 35 years":    {Rate: floodgate.Rate{N: 1, Per: 35 * 365 * 24 * time.Hour}, Burst: 1},
		"large N, long Per": {Rate: floodgate.Rate{N: 1 << 40, Per: 1 << 62}, Burst: 1000},
	} {
		if err := validate(c); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestKeyedRejectsBadCost(t *testing.T) {
	s, err := memstore.New(memstore.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{0, -1, -5, 6, math.MaxInt} {
		if d, err := l.Take(ctx, "k", n); !errors.Is(err, floodgate.ErrInvalidCost) || d != (floodgate.Decision{}) {
			t.Errorf("Take(%d) = %+v, %v; want ErrInvalidCost", n, d, err)
		}
	}
	if d, err := l.Take(ctx, "k", 5); err != nil || !d.Allowed {
		t.Errorf("Take(burst) = %+v, %v; want admitted", d, err)
	}
}

// TestKeyedConcurrentTakesOnMemstore races 1,000 Takes on a fresh key: the
// store serialises them, so exactly the burst is admitted.
func TestKeyedConcurrentTakesOnMemstore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(func() time.Time { return now })))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		admitted atomic.Int64
		start    = make(chan struct{})
	)
	for range 1000 {
		wg.Go(func() {
			<-start
			d, err := l.Take(context.Background(), "hot", 1)
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("1000 concurrent takes admitted %d, want the burst (100)", got)
	}
}
