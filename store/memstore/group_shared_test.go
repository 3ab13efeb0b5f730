package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// TestSharedPathSeesNoPartialGroup: ApplyAll is atomic (no other call on
// any of its keys sees a partial group), and that holds for the token
// bucket's peeks and denials made without the shard's lock too. Groups
// take one token from each of two keys, written in that order, on a clock
// that does not move, so after every group both keys have the same
// Remaining; an observer that peeks the first key and then the second must
// never see the second with more left than the first (which it would if
// it read the first after the group's write and the second before it).
func TestSharedPathSeesNoPartialGroup(t *testing.T) {
	const burst = 1 << 20
	for _, shards := range []int{1, 2} {
		clk := storetest.NewClock(t0)
		s := newStore(t, memstore.WithClock(clk), memstore.WithShards(shards), memstore.WithSweepInterval(0))
		l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: burst})
		ctx := context.Background()
		// Both keys held, so that the observer's peeks take the shared path.
		for _, k := range []string{"a", "b"} {
			if _, err := l.Take(ctx, k, 1); err != nil {
				t.Fatal(err)
			}
		}
		ops := []store.Op{{Key: "a", Alg: l.Algorithm(), N: 1}, {Key: "b", Alg: l.Algorithm(), N: 1}}
		var stop atomic.Bool
		var partial atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			out := make([]floodgate.Decision, 2)
			for range burst / 2 {
				if stop.Load() {
					return
				}
				if ok, err := s.ApplyAll(ctx, ops, out, true); err != nil || !ok {
					t.Errorf("group: %v %v", ok, err)
					return
				}
			}
		})
		wg.Go(func() {
			defer stop.Store(true)
			for range 200_000 {
				da, err := l.Peek(ctx, "a")
				if err != nil {
					t.Error(err)
					return
				}
				db, err := l.Peek(ctx, "b")
				if err != nil {
					t.Error(err)
					return
				}
				if db.Remaining > da.Remaining {
					partial.Add(1)
				}
			}
		})
		wg.Wait()
		if n := partial.Load(); n > 0 {
			t.Errorf("%d shards: %d peeks saw a group's first key written and not its second", shards, n)
		}
	}
}

// TestSharedPathWithGroupsAdmitsExactlyBurst races single takes and peeks
// on two keys (their admissions committed only if the shard's table did not
// move since their read) with groups taking from both, on a clock that
// does not move: each key must admit exactly its burst, counting the
// groups that admitted, and the store must end with both keys drained.
func TestSharedPathWithGroupsAdmitsExactlyBurst(t *testing.T) {
	const burst = 3_000
	for _, shards := range []int{1, 2} {
		clk := storetest.NewClock(t0)
		s := newStore(t, memstore.WithClock(clk), memstore.WithShards(shards), memstore.WithSweepInterval(0))
		l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: burst})
		ctx := context.Background()
		keys := []string{"a", "b"}
		ops := []store.Op{{Key: "a", Alg: l.Algorithm(), N: 1}, {Key: "b", Alg: l.Algorithm(), N: 1}}
		var single [2]atomic.Int64
		var groups atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				out := make([]floodgate.Decision, 2)
				for i := range 2 * burst {
					switch k := (g + i) % 4; k {
					case 0, 1:
						d, err := l.Take(ctx, keys[k], 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							single[k].Add(1)
						}
					case 2:
						ok, err := s.ApplyAll(ctx, ops, out, true)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							groups.Add(1)
						}
					default:
						if _, err := l.Peek(ctx, keys[i%2]); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		for k, key := range keys {
			if got := single[k].Load() + groups.Load(); got != burst {
				t.Errorf("%d shards: key %s admitted %d (%d alone, %d in groups), want %d", shards, key, got, single[k].Load(), groups.Load(), burst)
			}
			if d, err := l.Peek(ctx, key); err != nil || d.Remaining != 0 {
				t.Errorf("%d shards: key %s at the end: %+v, %v; want drained", shards, key, d, err)
			}
		}
	}
}

// TestSharedPathAcrossVersionsAdmitsExactlyBurst races takes and peeks on
// two versions of one limit (each a Lineage reading through the other, so
// every take on the other version moves the key's state from one namespace
// to the other) on a few keys, on a clock that does not move: the
// conversion keeps a key's whole tokens (the burst is the same), so each
// key must admit exactly its burst across both versions.
func TestSharedPathAcrossVersionsAdmitsExactlyBurst(t *testing.T) {
	const burst = 2_000
	clk := storetest.NewClock(t0)
	s := newStore(t, memstore.WithClock(clk), memstore.WithShards(1), memstore.WithSweepInterval(0))
	ctx := context.Background()
	var lims [2]*store.Limiter
	var prev []algo.Algorithm
	for v, rate := range []floodgate.Rate{floodgate.PerSecond(1), floodgate.PerSecond(3)} {
		base, err := bucket.Config{Name: "v", Rate: rate, Burst: burst}.Algorithm()
		if err != nil {
			t.Fatal(err)
		}
		lg, err := algo.Succeed(base, prev)
		if err != nil {
			t.Fatal(err)
		}
		prev = []algo.Algorithm{lg}
		if lims[v], err = store.NewLimiter(s, lg); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"k0", "k1", "k2"}
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3 * burst {
				k := (g + i) % len(keys)
				l := lims[(i/7+g)%2] // runs on one version, then the other
				if i%5 == 0 {
					if _, err := l.Peek(ctx, keys[k]); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				d, err := l.Take(ctx, keys[k], 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k, key := range keys {
		if got := admitted[k].Load(); got != burst {
			t.Errorf("key %s admitted %d across both versions, want %d", key, got, burst)
		}
	}
}

// TestSharedPathWithEvictionAndClose races takes and peeks on hot keys
// (the shared path) with new keys that make a one-shard store at its
// MaxKeys evict (new keys drained as the hot keys are, so that the hot keys are evicted too), then closes the store
// under them: a hot key evicted restarts from full, so it admits at most
// its burst once more per eviction; every decision keeps the invariants;
// after Close returns, every call is refused with ErrClosed.
func TestSharedPathWithEvictionAndClose(t *testing.T) {
	const burst = 50
	clk := storetest.NewClock(t0)
	s, err := memstore.New(memstore.WithClock(clk), memstore.WithShards(1), memstore.WithMaxKeys(8), memstore.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	l := keyed(t, s, bucket.Config{Rate: floodgate.PerSecond(1), Burst: burst})
	ctx := context.Background()
	var admitted atomic.Int64
	var closed atomic.Bool
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				after := closed.Load()
				key := fmt.Sprint("hot", i%2)
				if g == 2 {
					key = fmt.Sprint("new", i) // each one evicts
				}
				var d floodgate.Decision
				var err error
				switch {
				case g == 2:
					// Drained as the hot keys are: as close to full as
					// they are, so the sample evicts them too.
					d, err = l.Take(ctx, key, burst)
				case i%4 == 0:
					d, err = l.Peek(ctx, key)
				default:
					d, err = l.Take(ctx, key, 1)
				}
				if after {
					if !errors.Is(err, floodgate.ErrClosed) {
						t.Errorf("after Close: %+v, %v; want ErrClosed", d, err)
					}
					return
				}
				if errors.Is(err, floodgate.ErrClosed) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed != (d.RetryAfter == 0) || d.Remaining < 0 || d.Remaining > burst || d.Limit != burst {
					t.Errorf("decision %+v breaks an invariant", d)
					return
				}
				if g < 2 && i%4 != 0 && d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	s.Close()
	closed.Store(true)
	wg.Wait()
	st := s.Stats() // Close keeps the counters
	t.Logf("%d admitted on the hot keys, %d evictions", admitted.Load(), st.Evictions)
	// Each hot key admits its burst, then once more per eviction of it.
	if max := 2*burst + burst*int64(st.Evictions); admitted.Load() > max {
		t.Errorf("hot keys admitted %d with %d evictions, want at most %d", admitted.Load(), st.Evictions, max)
	}
}
