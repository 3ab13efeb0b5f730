package memstore

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/bind"
	"github.com/floodgate-go/floodgate/store/algo"
)

// TestLookupWordDuringChurn reads keys without the lock while a writer
// inserts, updates and removes other keys of the same table (Robin Hood
// displacement, backward shifts, growth, sweeps): every read lookupWord
// reports as consistent must be the key's own word, never another key's
// or a torn one.
func TestLookupWordDuringChurn(t *testing.T) {
	var (
		mu    sync.Mutex
		tb    table
		stop  atomic.Bool
		wg    sync.WaitGroup
		fixed = []uint64{11, 22, 33, 44} // keys always present; word = key*1000
	)
	tb.init(1, false)
	word := func(id uint64) int64 { return int64(id) * 1000 }
	// The fixed keys' home is the middle slot; the churn keys' the one
	// before: each insertion of one displaces the fixed keys, and each
	// removal shifts them back.
	idOf := func(k uint64) uint64 {
		if k >= 1000 {
			return 1<<63 - (k-999)<<20
		}
		return 1<<63 | k<<20
	}
	mu.Lock()
	for _, id := range fixed {
		tb.insert(idOf(id), id, stateOf(word(id)))
	}
	mu.Unlock()
	wg.Go(func() {
		defer stop.Store(true)
		for round := range 3000 {
			mu.Lock()
			for k := range 16 {
				id := uint64(1000 + k)
				tb.insert(idOf(id), id, stateOf(1))
			}
			// Update the fixed keys in place: the same value, so readers
			// can check it, written as a real update is.
			for _, id := range fixed {
				if i := tb.find(idOf(id), id); i >= 0 {
					tb.setWord0(i, word(id))
				}
			}
			mu.Unlock()
			mu.Lock()
			if round%3 == 0 {
				tb.sweep(10) // every churn key (word 1) is full at 10
			} else {
				for k := range 16 {
					id := uint64(1000 + k)
					if i := tb.find(idOf(id), id); i >= 0 {
						tb.remove(uint64(i))
					}
				}
			}
			mu.Unlock()
		}
	})
	var found atomic.Int64
	for range 2 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				id := fixed[n%len(fixed)]
				_, w, _, ok := tb.lookupWord(idOf(id), id)
				if !ok {
					continue
				}
				if w != word(id) {
					t.Errorf("key %d read %d, want %d", id, w, word(id))
					return
				}
				found.Add(1)
			}
		})
	}
	wg.Wait()
	if found.Load() == 0 {
		t.Fatal("no read without the lock succeeded: the test proves nothing")
	}
}

// stateOf returns a one-word state holding w.
func stateOf(w int64) *algo.State { return &algo.State{W: [algo.MaxWords]int64{w}} }

// TestTokenBucketTakesTheSharedPath: the token bucket implements
// wordDecider, or Apply would lock the shard for every decision, and
// store.NewLimiter finds memstore's bound Take for it.
func TestTokenBucketTakesTheSharedPath(t *testing.T) {
	alg, err := bucket.Config{Rate: floodgate.PerSecond(10), Burst: 5}.Algorithm()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := alg.(wordDecider); !ok {
		t.Fatal("the token bucket does not implement wordDecider")
	}
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if bind.Find(s, alg) == nil {
		t.Fatal("no bound Take for the token bucket on a *Store: store.Limiter would call Apply")
	}
	if bind.Find(struct{}{}, alg) != nil {
		t.Fatal("memstore bound a Take for a store that is not a *Store")
	}
}

// TestLookupWordWaitsOutAStructuralChange: while a structural change is
// under way (seq odd), no read succeeds without the lock; after it, the
// read succeeds again, at a new seq.
func TestLookupWordWaitsOutAStructuralChange(t *testing.T) {
	var tb table
	tb.init(1, false)
	tb.insert(42, 7, stateOf(99))
	_, w, seq, ok := tb.lookupWord(42, 7)
	if !ok || w != 99 {
		t.Fatalf("lookupWord = %d, %v, want 99, true", w, ok)
	}
	tb.begin()
	if _, _, _, ok := tb.lookupWord(42, 7); ok {
		t.Fatal("lookupWord succeeded during a structural change")
	}
	tb.end()
	_, w, seq2, ok := tb.lookupWord(42, 7)
	if !ok || w != 99 || seq2 == seq {
		t.Fatalf("after the change: %d, seq %d (was %d), %v", w, seq2, seq, ok)
	}
	i := tb.find(42, 7)
	tb.setWord0(i, 100)
	if _, w, seq3, ok := tb.lookupWord(42, 7); !ok || w != 100 || seq3 == seq2 {
		t.Fatalf("after an update in place: %d, seq %d (was %d), %v", w, seq3, seq2, ok)
	}
	if _, _, _, ok := tb.lookupWord(43, 7); ok {
		t.Fatal("lookupWord found a key never inserted")
	}
	tb.reset()
	if _, _, _, ok := tb.lookupWord(42, 7); ok {
		t.Fatal("lookupWord found a key after reset")
	}
}
