package window

import (
	"testing"
	"time"
)

func TestFixedTable(t *testing.T) {
	alg, err := Config{Limit: 3, Window: time.Second}.FixedAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	S := second
	runTable(t, alg, 3, []step{
		{at: 0, n: 1, allowed: true, rem: 2, rset: S},
		{at: 100, n: 2, allowed: true, rem: 0, rset: S - 100},
		{at: 200, n: 1, rem: 0, retry: S - 200, rset: S - 200},
		{at: S - 1, n: 1, rem: 0, retry: 1, rset: 1},
		{at: S - 1, n: 0, allowed: true, rem: 0, rset: 1}, // peek
		// The window ends on the second (aligned to the epoch): all of it back.
		{at: S, n: 3, allowed: true, rem: 0, rset: S},
		{at: S + S/2, n: -2, allowed: true, rem: 2, rset: S / 2}, // refund
		{at: S + S/2, n: -5, allowed: true, rem: 3},              // never beyond full
		{at: S + S/2, n: 0, allowed: true, rem: 3},
		// Burst at a boundary: 3 at the end of one window, 3 at the start of
		// the next (the known weakness of the fixed window).
		{at: 3*S - 1, n: 3, allowed: true, rem: 0, rset: 1},
		{at: 3 * S, n: 3, allowed: true, rem: 0, rset: S},
		// The clock goes back 1h: the count moves to the window holding now
		// (credits nothing), the key is full one window later.
		{at: 3*S - hour, n: 1, rem: 0, retry: S, rset: S},
		{at: 4*S - hour, n: 3, allowed: true, rem: 0, rset: S},
		// +10 years: everything long expired.
		{at: 10 * year, n: 1, allowed: true, rem: 2, rset: S},
	})
}

func TestFixedAlignedToEpoch(t *testing.T) {
	alg, err := Config{Limit: 1, Window: time.Minute}.FixedAlgorithm()
	if err != nil {
		t.Fatal(err)
	}
	// Two nodes that start at different times agree on the window edges.
	now := time.Date(2026, 11, 29, 18, 0, 42, 0, time.UTC).UnixMicro()
	_, d := alg.Step(zeroState(), now, 1)
	if d.ResetAfter != 18*time.Second {
		t.Fatalf("reset after %v, want 18s (the minute ends at :01:00)", d.ResetAfter)
	}
}
