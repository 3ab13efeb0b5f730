package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/floodgate-go/floodgate/store/algo"
)

// checkRH verifies the table's invariants: every entry is reachable from its
// home slot without crossing an empty slot, no entry is more than one step
// further from home than its predecessor (Robin Hood order), and the count
// matches.
func checkRH(t *testing.T, tb *table) {
	t.Helper()
	live := 0
	for i := uint64(0); i < tb.size; i++ {
		id := tb.slots[i*tb.stride]
		if id == 0 {
			continue
		}
		live++
		d := tb.dist(id, i)
		prev := i
		for k := uint64(0); k < d; k++ {
			if prev == 0 {
				prev = tb.size
			}
			prev--
			if tb.slots[prev*tb.stride] == 0 {
				t.Fatalf("slot %d (dist %d) is cut from its home by empty slot %d", i, d, prev)
			}
		}
		if d > 0 {
			p := (i + tb.size - 1) % tb.size
			if pd := tb.dist(tb.slots[p*tb.stride], p); pd+1 < d {
				t.Fatalf("slot %d dist %d after slot %d dist %d: Robin Hood order broken", i, d, p, pd)
			}
		}
	}
	if live != tb.n {
		t.Fatalf("table counts %d entries, holds %d", tb.n, live)
	}
}

// TestTableOracle runs random inserts, updates, removals and sweeps against a
// Go map, with ids drawn from a small set so that equal ids with different
// check hashes (64-bit collisions) are frequent.
func TestTableOracle(t *testing.T) {
	for _, words := range []int{1, 3, algo.MaxWords} {
		for _, withLog := range []bool{false, true} {
			r := rand.New(rand.NewPCG(uint64(words), 7))
			type key struct{ id, chk uint64 }
			oracle := map[key]int64{}
			var tb table
			tb.init(words, withLog)
			for step := range 20000 {
				k := key{id: 1 + r.Uint64N(300)*0x9e3779b97f4a7c15, chk: r.Uint64N(3)}
				if k.id == 0 {
					k.id = 1
				}
				i := tb.find(k.id, k.chk)
				want, ok := oracle[k]
				if ok != (i >= 0) {
					t.Fatalf("step %d: find(%v) = %d, oracle has it: %v", step, k, i, ok)
				}
				if ok {
					var s algo.State
					tb.load(i, &s)
					if s.W[0] != want || s.W[words-1] != want+int64(words)-1 {
						t.Fatalf("step %d: state %v, want %d", step, s.W, want)
					}
					if withLog && (len(s.Log) != 1 || s.Log[0] != want) {
						t.Fatalf("step %d: log %v, want [%d]", step, s.Log, want)
					}
				}
				switch op := r.IntN(10); {
				case op < 5 && !ok:
					v := r.Int64N(1000)
					s := algo.State{}
					for w := range words {
						s.W[w] = v + int64(w)
					}
					if withLog {
						s.Log = []int64{v}
					}
					tb.insert(k.id, k.chk, &s)
					oracle[k] = v
				case op < 7 && ok:
					v := r.Int64N(1000)
					s := algo.State{}
					for w := range words {
						s.W[w] = v + int64(w)
					}
					if withLog {
						s.Log = []int64{v}
					}
					tb.store(i, &s)
					oracle[k] = v
				case op < 9 && ok:
					tb.remove(uint64(i))
					delete(oracle, k)
				case op == 9 && step%50 == 0:
					cut := r.Int64N(1000)
					removed := tb.sweep(cut)
					n := 0
					for k, v := range oracle {
						if v <= cut {
							delete(oracle, k)
							n++
						}
					}
					if removed != n {
						t.Fatalf("step %d: sweep removed %d, want %d", step, removed, n)
					}
				}
				if step%500 == 0 {
					checkRH(t, &tb)
				}
			}
			checkRH(t, &tb)
			if tb.n != len(oracle) {
				t.Fatalf("table has %d, oracle %d", tb.n, len(oracle))
			}
		}
	}
}

func TestTableVictimPrefersFull(t *testing.T) {
	var tb table
	tb.init(1, false)
	for i := range 6 {
		tb.insert(uint64(i+1)*0x9e3779b97f4a7c15, 0, &algo.State{W: [algo.MaxWords]int64{int64(100 + i)}})
	}
	// At now=102 entries 100..102 are full: the victim must be one of them.
	i, full, _ := tb.victim(12345, 102, 16, nil)
	if !full || tb.full0(i) > 102 {
		t.Fatalf("victim %d (full at %d, full=%v), want an entry full at <= 102", i, tb.full0(i), full)
	}
	// At now=0 none is full: the victim is the one closest to full.
	i, full, _ = tb.victim(12345, 0, 16, nil)
	if full || tb.full0(i) != 100 {
		t.Fatalf("victim full at %d (full=%v), want the entry full at 100", tb.full0(i), full)
	}
}
