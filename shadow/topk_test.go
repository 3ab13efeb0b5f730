package shadow_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shadow"
)

// A weekly batch job (the shape): 5,000 keys ask log-normal demand
// (median 30, sigma 0.5) in each of 24 windows, and nine batch keys ask
// 620 units each, 31 a decision, in window 2 only. Long after their window
// ended, every key whose true peak exceeds the K-th heaviest true peak by
// more than the documented error (the largest Overcount of the listed
// keys) is listed, the batch keys among them; three workloads.
func TestTopKKeepsOneWindowBurst(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { oneWindowBurst(t, seed) })
	}
}

func oneWindowBurst(t *testing.T, seed uint64) {
	const (
		keys      = 5000
		windows   = 8
		burst     = 620
		burstW    = 2
		batches   = 9
		batchCost = 31 // units per decision of a batch key
		median    = 30
	)
	rng := rand.New(rand.NewPCG(22, seed))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	now := t0
	rec, err := shadow.New(shadow.Config{Clock: floodgate.ClockFunc(func() time.Time { return time.Unix(0, now) }), MinObservation: time.Second})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 100)
	require.NoError(t, err)

	names := make([]string, keys+batches)
	for i := range keys {
		names[i] = fmt.Sprintf("10.0.%d.%d", i>>8, i&255)
	}
	for b := range batches {
		names[keys+b] = fmt.Sprint("batch-", b)
	}
	peak := make([]int, keys+batches)
	for w := range windows {
		var evs []int // one entry per unit, shuffled
		for k := range keys {
			c := max(1, int(math.Round(median*math.Exp(0.5*rng.NormFloat64()))))
			peak[k] = max(peak[k], c)
			for range c {
				evs = append(evs, k)
			}
		}
		if w == burstW {
			for b := range batches {
				for range burst / batchCost {
					evs = append(evs, keys+b)
				}
				peak[keys+b] = burst
			}
		}
		rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		for i, k := range evs {
			at := t0 + int64(w)*int64(time.Second) + int64(i)*int64(time.Second)/int64(len(evs))
			n := int64(1)
			if k >= keys {
				n = batchCost
			}
			d.ObserveAt(at, names[k], n, false)
		}
	}
	now = t0 + windows*int64(time.Second)
	rep := d.Report()
	k := rec.Config().TopK
	require.Len(t, rep.Top, k)
	sorted := slices.Clone(peak)
	slices.Sort(sorted)
	slices.Reverse(sorted)
	kth := sorted[k-1]
	var maxOver uint64
	listed := map[string]shadow.Key{}
	for _, e := range rep.Top {
		maxOver = max(maxOver, e.Overcount)
		listed[e.Key] = e
	}
	t.Logf("K-th true peak %d, largest overcount %d; listed: %+v", kth, maxOver, rep.Top)
	for i, p := range peak {
		if uint64(p) > uint64(kth)+maxOver {
			e, ok := listed[names[i]]
			if assert.True(t, ok, "%s: true peak %d > K-th %d + error %d, not listed", names[i], p, kth, maxOver) {
				assert.LessOrEqual(t, e.Peak, uint64(p), "%s: Peak is a lower bound", names[i])
			}
		}
	}
	for b := range batches {
		_, ok := listed[fmt.Sprint("batch-", b)]
		assert.True(t, ok, "batch-%d is listed", b)
	}
}
