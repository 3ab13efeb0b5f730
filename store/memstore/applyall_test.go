package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
	"github.com/floodgate-go/floodgate/window"
)

// groupOps returns n ops of cost 1 on n keys of a fast token bucket (every
// one admitted), each key already in the store, and a decision slice.
func groupOps(tb testing.TB, s *memstore.Store, n int) ([]store.Op, []floodgate.Decision) {
	tb.Helper()
	l := keyed(tb, s, bucket.Config{Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000})
	ops := make([]store.Op, n)
	for i := range ops {
		ops[i] = store.Op{Key: "user:" + strconv.Itoa(i), Alg: l.Algorithm(), N: 1}
	}
	out := make([]floodgate.Decision, n)
	if _, err := s.ApplyAll(context.Background(), ops, out, true); err != nil {
		tb.Fatal(err)
	}
	return ops, out
}

// TestApplyAllDoesNotAllocate: a group of up to 8 ops on existing keys
// allocates nothing, committed or evaluated.
func TestApplyAllDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 3, 8} {
		s := newStore(t)
		ops, out := groupOps(t, s, n)
		for _, commit := range []bool{false, true} {
			if a := testing.AllocsPerRun(1000, func() { s.ApplyAll(ctx, ops, out, commit) }); a != 0 {
				t.Errorf("ApplyAll of %d ops (commit %v) allocates %v times", n, commit, a)
			}
		}
	}
}

func BenchmarkApplyAll(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 3, 8} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			s, err := memstore.New(memstore.WithSweepInterval(0))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			ops, out := groupOps(b, s, n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ApplyAll(ctx, ops, out, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestApplyAllKeepsItsOwnKeys: when a group's new keys need room in a full
// shard, the evictions take other keys, never a key the group has just
// written (which would forget what the group consumed).
func TestApplyAllKeepsItsOwnKeys(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(4), memstore.WithSweepInterval(0))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: 100})
	ctx := context.Background()
	// Two old keys far from full (90s): the group's keys (1s from full)
	// are the closest to full, the natural victims.
	for _, k := range []string{"old1", "old2"} {
		if d, _ := l.Take(ctx, k, 90); !d.Allowed {
			t.Fatal(d)
		}
	}
	ops := []store.Op{{Key: "g1", Alg: l.Algorithm(), N: 1}, {Key: "g2", Alg: l.Algorithm(), N: 1}, {Key: "g3", Alg: l.Algorithm(), N: 1}}
	out := make([]floodgate.Decision, len(ops))
	if ok, err := s.ApplyAll(ctx, ops, out, true); !ok || err != nil {
		t.Fatalf("ApplyAll = %v, %v: %+v", ok, err, out)
	}
	if st := s.Stats(); st.Keys != 4 || st.Evictions != 1 {
		t.Fatalf("%+v, want 4 keys and 1 eviction", st)
	}
	for _, o := range ops {
		if d, _ := l.Peek(ctx, o.Key); d.Remaining != 99 {
			t.Fatalf("%s lost what the group took: %+v", o.Key, d)
		}
	}
	// A group larger than the shard: the bound wins (some of its keys
	// restart full), and the count stays right.
	var big []store.Op
	for i := range 6 {
		big = append(big, store.Op{Key: fmt.Sprint("big", i), Alg: l.Algorithm(), N: 1})
	}
	out = make([]floodgate.Decision, len(big))
	if ok, err := s.ApplyAll(ctx, big, out, true); !ok || err != nil {
		t.Fatalf("ApplyAll = %v, %v: %+v", ok, err, out)
	}
	if st := s.Stats(); st.Keys != 4 {
		t.Fatalf("%+v, want 4 keys (MaxKeys)", st)
	}
	kept := 0
	for _, o := range big {
		if d, _ := l.Peek(ctx, o.Key); d.Remaining == 99 {
			kept++
		}
	}
	if kept != 4 {
		t.Fatalf("%d of the group's keys kept, want 4 (all the shard holds)", kept)
	}
}

// TestApplyAllMaxKeysIsABound: groups of new keys never take the store past
// MaxKeys, and every key dropped is counted.
func TestApplyAllMaxKeysIsABound(t *testing.T) {
	s := newStore(t, memstore.WithMaxKeys(100), memstore.WithShards(4), memstore.WithSweepInterval(0))
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 5})
	ctx := context.Background()
	out := make([]floodgate.Decision, 3)
	for i := range 1000 {
		ops := []store.Op{
			{Key: fmt.Sprint(i, "a"), Alg: l.Algorithm(), N: 1},
			{Key: fmt.Sprint(i, "b"), Alg: l.Algorithm(), N: 1},
			{Key: fmt.Sprint(i, "a"), Alg: l.Algorithm(), N: 1},
		}
		if ok, err := s.ApplyAll(ctx, ops, out, true); !ok || err != nil {
			t.Fatalf("group %d: %v, %v", i, ok, err)
		}
		if st := s.Stats(); st.Keys > 100 {
			t.Fatalf("group %d: %+v, past MaxKeys", i, st)
		}
	}
	st := s.Stats()
	if st.Keys < 90 || st.Evictions+uint64(st.Keys) != 2000 {
		t.Fatalf("%+v: want about 100 keys and every one of the 2000 inserted either kept or counted evicted", st)
	}
}

// TestApplyAllSlidingLog: a sliding log with spare capacity in its slice
// (the step appends there) keeps its entries through denied groups and
// evaluations that stepped it, and then decides as its twin does.
func TestApplyAllSlidingLog(t *testing.T) {
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithSweepInterval(0))
	alg, err := window.Config{Limit: 8, Window: time.Second}.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	deny := keyed(t, s, bucket.Config{Rate: floodgate.PerHour(1), Burst: 1})
	ctx := context.Background()
	apply := func(key string, n int64) floodgate.Decision {
		t.Helper()
		d, err := s.Apply(ctx, key, alg, n)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	deny.Take(ctx, "d", 1)
	for range 3 { // log of 3 entries, grown by append: spare capacity
		clk.Advance(10 * time.Millisecond)
		apply("g", 1)
		apply("c", 1)
	}
	out := make([]floodgate.Decision, 3)
	for round := range 5 {
		clk.Advance(10 * time.Millisecond)
		ops := []store.Op{{Key: "g", Alg: alg, N: 2}, {Key: "g", Alg: alg, N: 1}, {Key: "d", Alg: deny.Algorithm(), N: 1}}
		if ok, _ := s.ApplyAll(ctx, ops, out, true); ok || !out[0].Allowed || !out[1].Allowed {
			t.Fatalf("round %d: %v, %+v; want denied by the token bucket alone", round, ok, out)
		}
		if ok, _ := s.ApplyAll(ctx, ops[:2], out, false); !ok {
			t.Fatalf("round %d: evaluation denied: %+v", round, out)
		}
		if g, c := apply("g", 0), apply("c", 0); g != c {
			t.Fatalf("round %d: peek %+v, its twin %+v", round, g, c)
		}
	}
	for i := range 12 {
		clk.Advance(90 * time.Millisecond)
		if g, c := apply("g", 1), apply("c", 1); g != c {
			t.Fatalf("take %d: %+v, its twin %+v", i, g, c)
		}
	}
}

// TestApplyAllRacingClose races ApplyAll groups with Close: no call returns
// anything but a decision or ErrClosed, and no group re-inserts a key after
// Close emptied its shard (run with -count=200).
func TestApplyAllRacingClose(t *testing.T) {
	s, err := memstore.New(memstore.WithShards(4), memstore.WithMaxKeys(64), memstore.WithSweepInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1000), Burst: 10})
	logs, err := window.Config{Limit: 4, Window: time.Millisecond}.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range 4 {
		wg.Go(func() {
			out := make([]floodgate.Decision, 3)
			for i := range 2000 {
				ops := []store.Op{
					{Key: fmt.Sprint(g, "/", i%100), Alg: l.Algorithm(), N: 1},
					{Key: fmt.Sprint((g+1)%4, "/", i%100), Alg: logs, N: 1},
					{Key: "shared", Alg: l.Algorithm(), N: 1},
				}
				if _, err := s.ApplyAll(ctx, ops, out, i%3 != 0); err != nil {
					if !errors.Is(err, floodgate.ErrClosed) {
						t.Error(err)
					}
					return
				}
			}
		})
	}
	wg.Go(func() {
		time.Sleep(2 * time.Millisecond)
		s.Close()
	})
	wg.Wait()
	if st := s.Stats(); st.Keys != 0 {
		t.Fatalf("after Close: %+v, want no key", st)
	}
}

// Stats.MaxKeys is the bound the shards share: WithMaxKeys' value, however
// it divides among the shards.
func TestStatsMaxKeys(t *testing.T) {
	for _, c := range []struct{ shards, max int }{{1, 3}, {4, 10}, {16, 1000}, {256, 1 << 22}} {
		s, err := memstore.New(memstore.WithShards(c.shards), memstore.WithMaxKeys(c.max))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().MaxKeys; got != c.max {
			t.Errorf("%d shards, max %d: Stats().MaxKeys = %d", c.shards, c.max, got)
		}
		s.Close()
	}
}
