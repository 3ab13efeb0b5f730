package shadow_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/shadow"
)

// FuzzObserve drives a recording with arbitrary decisions (key, cost,
// refusal, time steps, going backwards included) and checks its report
// against an exact model: the counts are exact, the quantiles ordered and
// bounded by the true largest key-window, every key-window that ended is
// counted (the keys are few: all of them sampled), and the heaviest keys
// never under-count.
func FuzzObserve(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	f.Add([]byte{0, 255, 0, 255, 17, 3, 200, 1, 1, 1, 1, 90, 90})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice over"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const win = int64(time.Second)
		clk := newFakeClock()
		rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second, TopK: 4})
		require.NoError(t, err)
		defer rec.Close()
		d, err := rec.Track("p", time.Second, 10)
		require.NoError(t, err)
		start := clk.Now().UnixNano()
		now := start
		var decisions, units, refused uint64
		demand := map[[2]int64]uint64{} // (key, window) -> units
		perKey := map[string]uint64{}
		lastWin := map[int64]int64{} // a key's latest window: time never goes back for a key
		for i := 0; i+1 < len(ops); i += 2 {
			a, b := ops[i], ops[i+1]
			switch {
			case a >= 240: // time moves: forward up to 2.3 windows, or a little back
				step := int64(b) * win / 110
				if a == 255 {
					step = -int64(b) * int64(time.Millisecond)
				}
				now = max(now+step, start)
				continue
			}
			key := fmt.Sprint("k", a%23)
			n := int64(b%9) - 1 // -1..7: n <= 0 records nothing
			ref := a&1 == 1
			d.ObserveAt(now, key, n, ref)
			if n > 0 {
				decisions++
				units += uint64(n)
				if ref {
					refused++
				}
				k, w := int64(a%23), now/win
				if lw, ok := lastWin[k]; ok && lw > w {
					w = lw
				}
				lastWin[k] = w
				demand[[2]int64{k, w}] += uint64(n)
				perKey[key] += uint64(n)
			}
		}
		at := now + 3*win
		rep := d.ReportAt(at)
		assert.Equal(t, decisions, rep.Decisions)
		assert.Equal(t, units, rep.Units)
		assert.Equal(t, refused, rep.Refused)
		var trueMax uint64
		for _, u := range demand {
			trueMax = max(trueMax, u)
		}
		q := rep.Demand
		assert.True(t, q.P50 <= q.P90 && q.P90 <= q.P95 && q.P95 <= q.P99 && q.P99 <= q.Max, "%+v", q)
		assert.LessOrEqual(t, q.Max, float64(trueMax))
		if rep.SampleRate == 1 {
			// Every key-window ended by the report is counted once (a
			// decision timed before its key's latest window counts in it).
			assert.Equal(t, float64(len(demand)), rep.KeyWindows)
			assert.Equal(t, float64(trueMax), q.Max)
		}
		r := rep.Recommendation
		if r.OK {
			assert.GreaterOrEqual(t, r.Limit, int64(1))
			assert.True(t, r.FractionAbove >= 0 && r.FractionAbove <= 1)
			assert.GreaterOrEqual(t, float64(r.Limit), r.Basis)
		}
		for i, k := range rep.Top {
			if i > 0 {
				assert.LessOrEqual(t, k.Peak, rep.Top[i-1].Peak)
			}
			assert.LessOrEqual(t, k.Total, perKey[k.Key]+k.Overcount, "%s", k.Key)
			assert.Positive(t, perKey[k.Key], "%s was never asked for", k.Key)
		}
	})
}
