package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// A key's misses call the resolver once at a time; a failure is remembered
// for failTTL (the last answer served meanwhile, stale, when there is one);
// a caller that gives up does not make the others fail; a panic is a
// failure.
func TestResolverOneCallAndFailures(t *testing.T) {
	var calls atomic.Int64
	var mode atomic.Value // "ok", "fail", "block", "panic"
	mode.Store("block")
	release := make(chan struct{})
	r := newResolver(func(ctx context.Context, key string) (string, error) {
		calls.Add(1)
		switch mode.Load() {
		case "fail":
			return "", errors.New("db down")
		case "panic":
			panic("boom")
		case "block":
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "p-" + key, nil
	}, time.Minute, 1000)
	ctx := context.Background()

	// 32 concurrent misses of one key: one call.
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if name, _, err := r.resolve(ctx, "k"); err != nil || name != "p-k" {
				t.Errorf("resolve(k) = %q, %v", name, err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d calls of the resolver for 32 concurrent misses of one key", got)
	}

	// A failure with no answer to fall back on: the error, one call.
	mode.Store("fail")
	calls.Store(0)
	for range 100 {
		if _, _, err := r.resolve(ctx, "new"); err == nil || !strings.Contains(err.Error(), "db down") {
			t.Fatalf("resolve(new) while failing: %v", err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d calls of a failing resolver for 100 requests within failTTL", got)
	}

	// A failure once the answer expired: the last answer, stale, one call.
	r.answers.store("k", cached{policy: "p-k", until: 1, born: 1}, r.trim)
	calls.Store(0)
	for range 100 {
		if name, _, err := r.resolve(ctx, "k"); err != nil || name != "p-k" {
			t.Fatalf("resolve(k) while failing = %q, %v; want the last answer", name, err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d calls of a failing resolver for 100 requests of an expired key", got)
	}

	// failTTL later the resolver is asked again; answering, it is believed.
	time.Sleep(failTTL + 150*time.Millisecond)
	mode.Store("ok")
	calls.Store(0)
	if name, _, err := r.resolve(ctx, "new"); err != nil || name != "p-new" {
		t.Fatalf("resolve(new) after failTTL = %q, %v", name, err)
	}
	if calls.Load() != 1 {
		t.Fatalf("the remembered failure outlived failTTL: %d calls", calls.Load())
	}

	// The caller whose call is in flight gives up: a waiter calls again.
	mode.Store("block")
	release = make(chan struct{})
	calls.Store(0)
	lctx, cancel := context.WithCancel(ctx)
	leader := make(chan error, 1)
	go func() { _, _, err := r.resolve(lctx, "w"); leader <- err }()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	waiter := make(chan string, 1)
	go func() {
		name, _, err := r.resolve(ctx, "w")
		if err != nil {
			name = err.Error()
		}
		waiter <- name
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v", err)
	}
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if got := <-waiter; got != "p-w" {
		t.Fatalf("the waiter got %q, want the answer of a new call", got)
	}

	// A panic is a failure, remembered.
	mode.Store("panic")
	calls.Store(0)
	for range 10 {
		if _, _, err := r.resolve(ctx, "q"); err == nil || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("resolve(q) of a panicking resolver: %v", err)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls of a panicking resolver", calls.Load())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.flight) != 0 {
		t.Fatalf("%d calls left in flight", len(r.flight))
	}
}
