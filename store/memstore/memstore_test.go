package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/micros"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

var t0 = time.Unix(1_700_000_000, 0)

func keyed(t testing.TB, s store.Store, c bucket.Config) *store.Limiter {
	t.Helper()
	l, err := bucket.NewKeyed(s, c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string][]memstore.Option{
		"shards 0":              {memstore.WithShards(0)},
		"shards 3":              {memstore.WithShards(3)},
		"shards 2^17":           {memstore.WithShards(1 << 17)},
		"max keys 0":            {memstore.WithMaxKeys(0)},
		"max keys -1":           {memstore.WithMaxKeys(-1)},
		"negative sweep":        {memstore.WithSweepInterval(-time.Second)},
		"nil clock":             {memstore.WithClock(nil)},
		"coarse clock too fine": {memstore.WithCoarseClock(50 * time.Microsecond)},
		"coarse clock too slow": {memstore.WithCoarseClock(time.Second)},
		"coarse clock zero":     {memstore.WithCoarseClock(0)},
		"zero option":           {memstore.Option{}},
		"more shards than keys": {memstore.WithShards(16), memstore.WithMaxKeys(8)},
	} {
		s, err := memstore.New(opts...)
		if !errors.Is(err, floodgate.ErrInvalidConfig) || s != nil {
			t.Errorf("%s: New = %v, %v; want nil and ErrInvalidConfig", name, s, err)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	s := newStore(t)
	if st := s.Stats(); st.Shards != 256 || st.Keys != 0 || st.Slots != 0 {
		t.Fatalf("fresh default store: %+v", st)
	}
	// Fewer keys than the default shards: the shards shrink to fit.
	if st := newStore(t, memstore.WithMaxKeys(10)).Stats(); st.Shards != 8 {
		t.Fatalf("MaxKeys 10: %d shards, want 8", st.Shards)
	}
}

// fakeAlg is a configurable algorithm for testing what a store does with a
// Spec: it counts calls in W[1] and sets W[0] (full at) to now+hold.
type fakeAlg struct {
	spec algo.Spec
	hold int64
}

func (f *fakeAlg) Spec() algo.Spec { return f.spec }
func (f *fakeAlg) Step(s algo.State, now, n int64) (algo.State, floodgate.Decision) {
	if f.spec.Words > 1 {
		s.W[1]++
	}
	s.W[0] = now + f.hold
	return s, floodgate.Decision{Allowed: true, Limit: 1 << 20, Remaining: s.W[min(1, f.spec.Words-1)] & 0xfffff}
}

func TestApplyRejectsBadSpec(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for _, sp := range []algo.Spec{{Words: 0}, {Words: algo.MaxWords + 1}, {Words: 1, MaxLog: -1}} {
		if _, err := s.Apply(ctx, "k", &fakeAlg{spec: sp}, 1); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("Spec %+v: %v, want ErrInvalidConfig", sp, err)
		}
	}
	if _, err := s.Apply(ctx, "k", nil, 1); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("nil algorithm: %v, want ErrInvalidConfig", err)
	}
}

// TestEveryWidthKeepsItsWords checks that states of every width keep all
// their words and that widths do not mix.
func TestEveryWidthKeepsItsWords(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk))
	ctx := context.Background()
	for w := 1; w <= algo.MaxWords; w++ {
		alg := &wordsAlg{words: w}
		for call := int64(1); call <= 3; call++ {
			d, err := s.Apply(ctx, "k", alg, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != call {
				t.Fatalf("width %d, call %d: the state came back with count %d", w, call, d.Remaining)
			}
		}
	}
	if got := s.Stats().Keys; got != algo.MaxWords {
		t.Fatalf("%d keys, want one per width (%d)", got, algo.MaxWords)
	}
}

// wordsAlg fills every word with the call count and checks, on each call,
// that all words came back equal.
type wordsAlg struct{ words int }

func (a *wordsAlg) Spec() algo.Spec {
	return algo.Spec{Name: "words", Namespace: uint64(a.words), Words: a.words}
}
func (a *wordsAlg) Step(s algo.State, now, n int64) (algo.State, floodgate.Decision) {
	c := s.W[a.words-1]
	for i := 1; i < a.words; i++ {
		if s.W[i] != c {
			c = -1 << 40 // corrupt: make the test fail
		}
	}
	if a.words == 1 {
		c = s.W[0] - (now + 1<<40)
		if s.W[0] == 0 {
			c = 0
		}
	}
	c++
	for i := 1; i < a.words; i++ {
		s.W[i] = c
	}
	s.W[0] = now + 1<<40 + c // never full
	for i := a.words; i < algo.MaxWords; i++ {
		if s.W[i] != 0 {
			c = -1 << 40 // a word beyond the width came back set
		}
	}
	return s, floodgate.Decision{Allowed: true, Limit: 1 << 41, Remaining: max(c, 0)}
}

// logAlg is a sliding log of limit entries over window microseconds that
// rewrites its log in place.
type logAlg struct{ limit, window int64 }

func (a *logAlg) Spec() algo.Spec {
	return algo.Spec{Name: "test-log", Namespace: 0x10c, Words: 1, MaxLog: int(a.limit)}
}
func (a *logAlg) Step(s algo.State, now, n int64) (algo.State, floodgate.Decision) {
	kept := s.Log[:0]
	for _, at := range s.Log {
		if at > now-a.window {
			kept = append(kept, at)
		}
	}
	s.Log = kept
	d := floodgate.Decision{Limit: a.limit}
	switch {
	case n <= 0: // peek (this test log does not refund)
		d.Allowed = true
	case int64(len(s.Log)) < a.limit:
		s.Log = append(s.Log, now)
		d.Allowed = true
	default:
		d.RetryAfter = micros.Dur(s.Log[0] + a.window - now)
	}
	d.Remaining = a.limit - int64(len(s.Log))
	s.W[0] = 0
	if len(s.Log) > 0 {
		s.W[0] = s.Log[len(s.Log)-1] + a.window
		d.ResetAfter = micros.Dur(s.W[0] - now)
	}
	return s, d
}

func TestLogState(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk))
	alg := &logAlg{limit: 3, window: 1e6}
	ctx := context.Background()
	for i := range 3 {
		if d, _ := s.Apply(ctx, "k", alg, 1); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("take %d: %+v", i, d)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if d, _ := s.Apply(ctx, "k", alg, 1); d.Allowed || d.RetryAfter != 700*time.Millisecond {
		t.Fatalf("fourth take: %+v, want denied for 700ms", d)
	}
	if d, _ := s.Apply(ctx, "other", alg, 1); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("other key: %+v, want its own log", d)
	}
	clk.Advance(700 * time.Millisecond)
	if d, _ := s.Apply(ctx, "k", alg, 1); !d.Allowed {
		t.Fatalf("take after the oldest left the window: %+v", d)
	}
	// Existing keys reuse their log in place: no allocation.
	if a := testing.AllocsPerRun(1000, func() {
		clk.Advance(400 * time.Millisecond)
		s.Apply(ctx, "k", alg, 1)
	}); a != 0 {
		t.Fatalf("Apply on an existing log key allocates %v times", a)
	}
	// Once the log is empty (full), the key is dropped.
	clk.Advance(time.Hour)
	s.Apply(ctx, "k", alg, 0)
	if got := s.Stats().Keys; got != 1 {
		t.Fatalf("%d keys after k emptied, want 1 (other)", got)
	}
}

func TestApplyDoesNotAllocate(t *testing.T) {
	s := newStore(t)
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1000), Burst: 1000})
	ctx := context.Background()
	l.Take(ctx, "k", 1)
	if a := testing.AllocsPerRun(1000, func() { l.Take(ctx, "k", 1) }); a != 0 {
		t.Fatalf("Take on an existing key allocates %v times", a)
	}
}

func TestFullStatesAreNotKept(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(10), Burst: 10})
	ctx := context.Background()
	l.Peek(ctx, "peeked")
	l.Refund(ctx, "refunded", 1)
	if got := s.Stats().Keys; got != 0 {
		t.Fatalf("peek and refund on fresh keys kept %d keys", got)
	}
	l.Take(ctx, "k", 1)
	if got := s.Stats().Keys; got != 1 {
		t.Fatalf("%d keys after a take, want 1", got)
	}
	l.Refund(ctx, "k", 1)
	if got := s.Stats().Keys; got != 0 {
		t.Fatalf("%d keys after the refund made k full again, want 0", got)
	}
}

func TestMaxKeysEvictsFullFirstThenClosestToFull(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(8), memstore.WithSweepInterval(0))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 20})
	ctx := context.Background()
	// k0 takes 1 token (full again in 1s), k7 takes 8 (full in 8s).
	for i := range 8 {
		l.Take(ctx, fmt.Sprint("k", i), i+1)
	}
	if st := s.Stats(); st.Keys != 8 || st.Evictions != 0 {
		t.Fatalf("8 keys in a store of 8: %+v", st)
	}
	// Nothing is full: the new key evicts the one closest to full, k0.
	l.Take(ctx, "new1", 1)
	if st := s.Stats(); st.Keys != 8 || st.Evictions != 1 || st.Expired != 0 {
		t.Fatalf("after one insert into a full store: %+v, want 8 keys, 1 eviction", st)
	}
	if d, _ := l.Peek(ctx, "k0"); d.Remaining != 20 {
		t.Fatalf("k0 should have been evicted (fresh again): %+v", d)
	}
	for i := 1; i < 8; i++ {
		if d, _ := l.Peek(ctx, fmt.Sprint("k", i)); d.Remaining != int64(20-i-1) {
			t.Fatalf("k%d lost its state: %+v", i, d)
		}
	}
	// After 3s, k1 and k2 are full: they go first, without counting as
	// evictions.
	clk.Advance(3 * time.Second)
	l.Take(ctx, "new2", 1)
	if st := s.Stats(); st.Keys != 8 || st.Evictions != 1 || st.Expired != 1 {
		t.Fatalf("after an insert with full entries present: %+v, want 1 eviction, 1 expired", st)
	}
	if d, _ := l.Peek(ctx, "k7"); d.Remaining != 20-8+3 {
		t.Fatalf("k7 (far from full) was dropped: %+v", d)
	}
}

// TestMaxKeysAcrossWidths fills a shard with 1-word keys and inserts a
// 2-word key: the victim comes from the other table.
func TestMaxKeysAcrossWidths(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(4))
	ctx := context.Background()
	one := &fakeAlg{spec: algo.Spec{Name: "one", Namespace: 1, Words: 1}, hold: 1e9}
	two := &fakeAlg{spec: algo.Spec{Name: "two", Namespace: 2, Words: 2}, hold: 1e9}
	for i := range 4 {
		s.Apply(ctx, fmt.Sprint(i), one, 1)
	}
	s.Apply(ctx, "x", two, 1)
	if st := s.Stats(); st.Keys != 4 || st.Evictions != 1 {
		t.Fatalf("%+v, want 4 keys and 1 eviction", st)
	}
	if d, _ := s.Apply(ctx, "x", two, 1); d.Remaining != 2 {
		t.Fatalf("the 2-word key lost its state: %+v", d)
	}
}

func TestMaxKeysIsABound(t *testing.T) {
	s := newStore(t, memstore.WithMaxKeys(1000), memstore.WithShards(16))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 5})
	ctx := context.Background()
	for i := range 5000 {
		l.Take(ctx, fmt.Sprint(i), 1)
	}
	st := s.Stats()
	if st.Keys > 1000 || st.Keys < 900 {
		t.Fatalf("%+v: want between 900 and 1000 keys", st)
	}
	if st.Evictions != uint64(5000-st.Keys) {
		t.Fatalf("%+v: want %d evictions", st, 5000-st.Keys)
	}
}

// TestSweeper runs the background sweeper on synctest's fake time: idle keys
// are dropped once full, Close stops the goroutine (synctest.Test fails if a
// goroutine of the bubble outlives it), and Apply after Close fails.
func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(time.Now)), memstore.WithSweepInterval(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 100})
		ctx := context.Background()
		for i := range 100 {
			l.Take(ctx, fmt.Sprint("short", i), 1) // full again in 1s
			l.Take(ctx, fmt.Sprint("long", i), 90) // full again in 90s
		}
		if got := s.Stats().Keys; got != 200 {
			t.Fatalf("%d keys, want 200", got)
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 100 || st.Expired != 100 || st.Sweeps != 1 {
			t.Fatalf("after the first sweep: %+v, want the 100 long keys left", st)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 0 || st.Expired != 200 || st.Sweeps != 2 || st.Evictions != 0 {
			t.Fatalf("after the second sweep: %+v, want no key left", st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := l.Take(ctx, "k", 1); !errors.Is(err, floodgate.ErrClosed) {
			t.Fatalf("Take after Close: %v, want ErrClosed", err)
		}
	})
}

// TestSweeperStartsWithTheFirstKey: a store that keeps no key runs no
// goroutine; the first key kept starts the sweeper.
func TestSweeperStartsWithTheFirstKey(t *testing.T) {
	s := newStore(t, memstore.WithSweepInterval(time.Hour))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 5})
	ctx := context.Background()
	l.Peek(ctx, "k")
	l.Refund(ctx, "k", 1)
	if started, _ := memstore.SweeperState(s); started {
		t.Fatal("the sweeper started before the store kept a key")
	}
	l.Take(ctx, "k", 1)
	if started, _ := memstore.SweeperState(s); !started {
		t.Fatal("the sweeper did not start with the first key")
	}
	s.Close()
	if _, done := memstore.SweeperState(s); !isClosed(done) {
		t.Fatal("Close returned before the sweeper did")
	}
	// Closed before its first key: the sweeper never starts.
	s2 := newStore(t, memstore.WithSweepInterval(time.Hour))
	s2.Close()
	keyed(t, s2, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 5}).Take(ctx, "k", 1)
	if started, _ := memstore.SweeperState(s2); started {
		t.Fatal("a closed store started its sweeper")
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestForgottenCloseStopsTheSweeper: a store used and dropped without Close
// does not leak its sweeper goroutine: once the store is unreachable, the
// goroutine returns.
func TestForgottenCloseStopsTheSweeper(t *testing.T) {
	for _, group := range []bool{false, true} {
		done := useAndForget(t, group)
		deadline := time.Now().Add(10 * time.Second)
		for !isClosed(done) {
			if time.Now().After(deadline) {
				t.Fatalf("(first key by ApplyAll: %v) the sweeper of a dropped store still runs after 10s of collections", group)
			}
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
	}
}

// useAndForget makes a store with a sweeper, keeps a key in it (through
// Apply or ApplyAll) and drops it without Close, returning the channel
// closed when its sweeper returns.
func useAndForget(t *testing.T, group bool) <-chan struct{} {
	s, err := memstore.New(memstore.WithSweepInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 5})
	ctx := context.Background()
	if group {
		out := make([]floodgate.Decision, 2)
		ops := []store.Op{{Key: "a", Alg: l.Algorithm(), N: 1}, {Key: "b", Alg: l.Algorithm(), N: 1}}
		if _, err := s.ApplyAll(ctx, ops, out, true); err != nil {
			t.Fatal(err)
		}
	} else if _, err := l.Take(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	started, done := memstore.SweeperState(s)
	if !started {
		t.Fatal("the sweeper did not start with the first key")
	}
	return done
}

// TestSweepShrinks checks that a table emptied by the sweeper gives its
// memory back.
func TestSweepShrinks(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithSweepInterval(0))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 10})
	ctx := context.Background()
	for i := range 10000 {
		l.Take(ctx, fmt.Sprint(i), 1+i%2)
	}
	big := s.Stats().Slots
	clk.Advance(1500 * time.Millisecond) // the keys that took 1 are full
	s.Sweep()
	st := s.Stats()
	if st.Keys != 5000 {
		t.Fatalf("%+v, want 5000 keys left", st)
	}
	clk.Advance(time.Second)
	s.Sweep()
	if st := s.Stats(); st.Keys != 0 || st.Slots >= big/4 {
		t.Fatalf("%+v: want no key and far fewer than %d slots", st, big)
	}
}

// TestConcurrentEverything races Apply on many keys with sweeps, Stats and
// Close (run with -race).
func TestConcurrentEverything(t *testing.T) {
	s, err := memstore.New(memstore.WithShards(4), memstore.WithMaxKeys(64), memstore.WithSweepInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1000), Burst: 10})
	logs := &logAlg{limit: 4, window: 1000}
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint(g, "/", i%100)
				if _, err := l.Take(ctx, key, 1); err != nil && !errors.Is(err, floodgate.ErrClosed) {
					t.Error(err)
					return
				}
				if _, err := s.Apply(ctx, key, logs, 1); err != nil && !errors.Is(err, floodgate.ErrClosed) {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					s.Stats()
					s.Sweep()
				}
			}
		})
	}
	wg.Go(func() {
		time.Sleep(5 * time.Millisecond)
		s.Close()
	})
	wg.Wait()
	if st := s.Stats(); st.Keys != 0 {
		t.Fatalf("after Close: %+v, want no key", st)
	}
}

func TestContextHonouredOnEntry(t *testing.T) {
	s := newStore(t)
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Take(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with a cancelled context: %v, want context.Canceled", err)
	}
}

// maxBytesPerKey is the published memory budget of a token-bucket key.
const maxBytesPerKey = 48

// TestBytesPerKey measures the live heap per token-bucket key after 1,000,000
// inserts (200,000 under the race detector, which is slow).
func TestBytesPerKey(t *testing.T) {
	n := benchKeys
	if raceEnabled {
		n = 200_000
	}
	per := bytesPerKey(t, n)
	t.Logf("%.1f bytes per key after %d keys", per, n)
	if per > maxBytesPerKey {
		t.Fatalf("%.1f bytes per key, want <= %d", per, maxBytesPerKey)
	}
}

// panicAlg violates the Step contract by panicking.
type panicAlg struct{}

func (panicAlg) Spec() algo.Spec {
	return algo.Spec{Name: "panics", Namespace: 0xbad, Words: 1}
}
func (panicAlg) Step(algo.State, int64, int64) (algo.State, floodgate.Decision) {
	panic("faulty algorithm")
}

// TestPanickingAlgorithmDoesNotLockTheShard checks that a panic in Step
// (recovered by the caller, as net/http does) leaves the shard usable.
func TestPanickingAlgorithmDoesNotLockTheShard(t *testing.T) {
	requireShardUsableAfterPanic(t, panicAlg{})
}

// requireShardUsableAfterPanic applies alg, which must panic, on a
// one-shard store, recovers, and checks that the shard still decides.
func requireShardUsableAfterPanic(t *testing.T, alg algo.Algorithm) {
	t.Helper()
	s := newStore(t, memstore.WithShards(1))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the algorithm's panic was swallowed")
			}
		}()
		s.Apply(context.Background(), "k", alg, 1)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 1})
		if d, err := l.Take(context.Background(), "k", 1); err != nil || !d.Allowed {
			t.Errorf("Take after a panic: %+v, %v", d, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shard stayed locked after a panic in the algorithm")
	}
}

// TestCoarseClockReleased: the coarse clock's goroutine runs while a store
// reads it, stops at Close, and stops too once a store dropped without
// Close is collected.
func TestCoarseClockReleased(t *testing.T) {
	const res = 7 * time.Millisecond // a resolution no other test uses
	s, err := memstore.New(memstore.WithCoarseClock(res))
	if err != nil {
		t.Fatal(err)
	}
	if !memstore.CoarseRunning(s) {
		t.Fatal("the coarse clock does not run")
	}
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 1})
	ctx := context.Background()
	if d, err := l.Take(ctx, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v, %v", d, err)
	}
	d, err := l.Take(ctx, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter <= time.Hour-time.Second || d.RetryAfter > time.Hour+res {
		t.Fatalf("second take: %+v, %v; want a denial with RetryAfter in (1h-1s, 1h+%v]", d, err, res)
	}
	// ApplyAll adds the resolution to a denial's RetryAfter too.
	out := make([]floodgate.Decision, 1)
	ok, err := s.ApplyAll(ctx, []store.Op{{Key: "k", Alg: l.Algorithm(), N: 1}}, out, true)
	if err != nil || ok || out[0].RetryAfter <= time.Hour-time.Second || out[0].RetryAfter > time.Hour+res {
		t.Fatalf("ApplyAll on the drained key: %v, %+v, %v; want a denial with RetryAfter in (1h-1s, 1h+%v]", ok, out[0], err, res)
	}
	clk := memstore.CoarseClock(s)
	s.Close()
	if clk.Running() {
		t.Fatal("the coarse clock runs after Close")
	}

	clk = func() interface{ Running() bool } {
		s, err := memstore.New(memstore.WithCoarseClock(res))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := keyed(t, s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 1}).Take(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		return memstore.CoarseClock(s)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Running() {
		if time.Now().After(deadline) {
			t.Fatal("the coarse clock of a dropped store still runs after 10s of collections")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestCoarseClockOnlyForSlowRates: WithCoarseClock applies to an algorithm
// whose grain spans ten resolutions (its denials carry the resolution's
// slack), and a faster one keeps the exact clock (no slack: RetryAfter is
// the exact refill time, less the time between the two takes).
func TestCoarseClockOnlyForSlowRates(t *testing.T) {
	const res = 5 * time.Millisecond // a resolution no other test uses
	s, err := memstore.New(memstore.WithCoarseClock(res))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// take drains a fresh key and returns the RetryAfter of the next take
	// and the time the two took.
	take := func(l *store.Limiter, key string) (time.Duration, time.Duration) {
		start := time.Now()
		if d, err := l.Take(ctx, key, 1); err != nil || !d.Allowed {
			t.Fatalf("first take: %+v, %v", d, err)
		}
		d, err := l.Take(ctx, key, 1)
		if err != nil || d.Allowed {
			t.Fatalf("second take: %+v, %v; want a denial", d, err)
		}
		return d.RetryAfter, time.Since(start)
	}

	// grain 49ms < ten resolutions: exact, every time.
	fast := floodgate.Rate{N: 1, Per: 10*res - time.Millisecond}
	l := keyed(t, s, bucket.Config{Rate: fast, Burst: 1})
	for i := range 20 {
		ra, took := take(l, fmt.Sprint("fast", i))
		if ra > fast.Per || ra < fast.Per-took-time.Microsecond {
			t.Fatalf("grain 49ms: RetryAfter %v, want in [%v, %v]: the exact clock, no slack", ra, fast.Per-took, fast.Per)
		}
	}
	// grain 50ms: cached. Both takes see the same cached time unless a
	// refresh falls between them, so RetryAfter is the period plus the
	// slack: seen at least once in 20 tries.
	slow := floodgate.Rate{N: 1, Per: 10 * res}
	l = keyed(t, s, bucket.Config{Rate: slow, Burst: 1})
	var seen []time.Duration
	for i := range 20 {
		ra, _ := take(l, fmt.Sprint("slow", i))
		if ra == slow.Per+res {
			return
		}
		seen = append(seen, ra)
	}
	t.Fatalf("grain 50ms: RetryAfter never %v (the cached time and its slack): %v", slow.Per+res, seen)
}

// TestCoarseClockNotForApplyAll: ApplyAll reads the exact clock (see
// WithCoarseClock), as Apply does for an algorithm faster than ten
// resolutions: a group denied right after a take drained its key sees the
// exact refill time, less the time between the two, with no slack (a
// cached time would be behind the take's and leave more to wait).
func TestCoarseClockNotForApplyAll(t *testing.T) {
	const res = 20 * time.Millisecond // a resolution no other test uses
	s, err := memstore.New(memstore.WithCoarseClock(res))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	per := 10*res - time.Millisecond // grain below ten resolutions: exact
	l := keyed(t, s, bucket.Config{Rate: floodgate.Rate{N: 1, Per: per}, Burst: 1})
	out := make([]floodgate.Decision, 1)
	for i := range 20 {
		key := fmt.Sprint("group", i)
		start := time.Now()
		if d, err := l.Take(ctx, key, 1); err != nil || !d.Allowed {
			t.Fatalf("take: %+v, %v", d, err)
		}
		ops := []store.Op{{Key: key, Alg: l.Algorithm(), N: 1}}
		if ok, err := s.ApplyAll(ctx, ops, out, i%2 == 0); err != nil || ok {
			t.Fatalf("group: %v, %v; want a denial", ok, err)
		}
		took := time.Since(start)
		if ra := out[0].RetryAfter; ra > per || ra < per-took-time.Microsecond {
			t.Fatalf("commit %v: RetryAfter %v, want in [%v, %v]: the exact clock, no slack", i%2 == 0, ra, per-took, per)
		}
	}
}
