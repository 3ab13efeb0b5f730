package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestQuickMedian(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 200; n++ {
		xs := make([]int64, n)
		for i := range xs {
			xs[i] = r.Int64N(int64(n))
		}
		sorted := slices.Sorted(slices.Values(xs))
		if got, want := quickMedian(xs), sorted[n/2]; got != want {
			t.Fatalf("n %d: median %d, want %d", n, got, want)
		}
	}
}

// Answers are cached, seen without a lock once merged, expire after ttl
// (give or take the coarse clock's tick), and stay within the bound.
func TestResolverCache(t *testing.T) {
	var calls atomic.Int64
	r := newResolver(func(_ context.Context, key string) (string, error) {
		calls.Add(1)
		return "p-" + key, nil
	}, time.Second, 100)
	ctx := context.Background()
	resolve := func(keys int) {
		for i := range 3000 {
			key := fmt.Sprint(i % keys)
			name, _, err := r.resolve(ctx, key)
			if err != nil || name != "p-"+key {
				t.Fatalf("resolve(%s) = %q, %v", key, name, err)
			}
		}
	}
	resolve(80)
	if got := calls.Load(); got != 80 {
		t.Fatalf("%d calls of the resolver for 80 keys", got)
	}
	resolve(150)
	if n := len(*r.answers.cur.Load()); n > 100 {
		t.Fatalf("%d answers kept, bound 100", n)
	}
	calls.Store(0)
	r.resolve(ctx, "x")
	r.resolve(ctx, "x")
	if _, ok := r.answers.load("x"); !ok || calls.Load() != 1 {
		t.Fatalf("a small cache merges at once: calls %d", calls.Load())
	}
	time.Sleep(1200 * time.Millisecond)
	r.resolve(ctx, "x")
	if calls.Load() != 2 {
		t.Fatalf("an answer older than ttl was served: %d calls", calls.Load())
	}
}

// A large cache merges once the copy is paid for; until then answers are
// read from pending, and hits on it hasten the merge.
func TestSnapshotMergesWhenPaidFor(t *testing.T) {
	big := map[string]int{}
	for i := range 4000 {
		big[fmt.Sprint(i)] = i
	}
	c := newSnapshot(big)
	c.store("new", 1, nil)
	if _, ok := c.load("new"); ok {
		t.Fatal("merged a large map for one write")
	}
	if v, ok := c.loadPending("new", nil); !ok || v != 1 {
		t.Fatal("pending write not found")
	}
	for range 1000 {
		c.loadPending("new", nil)
	}
	if _, ok := c.load("new"); !ok {
		t.Fatal("a thousand pending hits did not merge")
	}
}

func TestResolverConcurrent(t *testing.T) {
	r := newResolver(func(_ context.Context, key string) (string, error) { return key, nil }, time.Second, 50)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint((i * (g + 1)) % 80)
				if name, _, err := r.resolve(context.Background(), key); err != nil || name != key {
					t.Errorf("resolve(%s) = %q, %v", key, name, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
