package window

import (
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store/algo"
)

func TestSlidingLogTable(t *testing.T) {
	alg, err := Config{Limit: 3, Window: time.Second}.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	S := second
	runTable(t, alg, 3, []step{
		{at: 0, n: 1, allowed: true, rem: 2, rset: S},
		{at: 100, n: 1, allowed: true, rem: 1, rset: S + 100 - 100},
		// Needs 2 with 1 left: admitted when the entry of t=0 expires.
		{at: 200, n: 2, rem: 1, retry: S - 200, rset: S - 100},
		{at: 200, n: 1, allowed: true, rem: 0, rset: S},
		// An entry of t counts during [t, t+window): the one of t=0 is gone
		// at exactly 1s, not at the aligned second.
		{at: S - 1, n: 1, rem: 0, retry: 1, rset: 201},
		{at: S, n: 1, allowed: true, rem: 0, rset: S},
		{at: S + 50, n: 1, rem: 0, retry: 50, rset: S - 50},
		{at: S + 50, n: 3, rem: 0, retry: S - 50, rset: S - 50},
		{at: S + 100, n: 1, allowed: true, rem: 0, rset: S},
		// A refund removes the newest entries, never beyond full.
		{at: S + 100, n: -1, allowed: true, rem: 1, rset: S - 100},
		{at: S + 100, n: 0, allowed: true, rem: 1, rset: S - 100},
		{at: S + 100, n: -9, allowed: true, rem: 3},
		// No boundary burst: 3 at the end of a second, nothing at the start
		// of the next.
		{at: 3*S - 1, n: 3, allowed: true, rem: 0, rset: S},
		{at: 3 * S, n: 1, rem: 0, retry: S - 1, rset: S - 1},
		// The clock goes back 1h: entries from the future move to now
		// (credits nothing), full one window later.
		{at: 3*S - hour, n: 1, rem: 0, retry: S, rset: S},
		{at: 4*S - hour, n: 2, allowed: true, rem: 1, rset: S},
		{at: 10 * year, n: 3, allowed: true, rem: 0, rset: S},
	})
}

func TestSlidingLogCostRecordsUnits(t *testing.T) {
	alg, err := Config{Limit: 5, Window: time.Second}.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := alg.Step(algo.State{}, t0, 2)
	s, _ = alg.Step(s, t0+10, 3)
	want := []int64{t0, t0, t0 + 10, t0 + 10, t0 + 10}
	if len(s.Log) != len(want) {
		t.Fatalf("log %v, want %v", s.Log, want)
	}
	for i := range want {
		if s.Log[i] != want[i] {
			t.Fatalf("log %v, want %v", s.Log, want)
		}
	}
	if s.W[0] != t0+10+second {
		t.Fatalf("W[0] = %d, want %d", s.W[0], t0+10+second)
	}
}

func TestSlidingLogDoesNotWriteItsInput(t *testing.T) {
	alg, err := Config{Limit: 4, Window: time.Second}.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	// A log with spare capacity, and one from the future (clock went back).
	in := algo.State{Log: make([]int64, 2, 8)}
	in.Log[0], in.Log[1] = t0, t0+5
	in.W[0] = t0 + 5 + second
	snapshot := append([]int64(nil), in.Log...)
	for _, c := range []struct{ now, n int64 }{{t0 + 10, 2}, {t0 + 10, -1}, {t0 - 100, 1}, {t0 + second, 1}, {t0 + second + 5, 4}} {
		out, _ := alg.Step(in, c.now, c.n)
		if !slices.Equal(in.Log, snapshot) {
			t.Fatalf("step(%d, %d) wrote into its input: %v -> %v", c.now, c.n, snapshot, in.Log)
		}
		if c.n > 0 && len(out.Log) > 0 && out.Log[len(out.Log)-1] != c.now {
			t.Fatalf("step(%d, %d): log %v", c.now, c.n, out.Log)
		}
	}
}

// TestSlidingLogAmortised checks that a long run of admissions allocates
// rarely (the log grows like append) and keeps its memory bounded.
func TestSlidingLogAmortised(t *testing.T) {
	const limit = 1000
	alg, err := Config{Limit: limit, Window: time.Millisecond}.SlidingLogAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	var s algo.State
	now := t0
	allocs := testing.AllocsPerRun(20_000, func() {
		now++
		s, _ = alg.Step(s, now, 1)
	})
	if allocs > 0.01 {
		t.Fatalf("%.4f allocations per admission", allocs)
	}
	if len(s.Log) != limit || cap(s.Log) > 4*limit {
		t.Fatalf("log of %d entries, capacity %d", len(s.Log), cap(s.Log))
	}
}
