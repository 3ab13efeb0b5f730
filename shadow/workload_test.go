package shadow_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Set(t int64)             { c.ns.Store(t) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// workload is a synthetic demand with a known per-key distribution: each
// normal key asks for a fixed number of requests in every window (drawn
// log-normal), evenly spaced from a random phase; the abusive keys ask
// for 50 times the median.
type workload struct {
	keys   []string
	counts []int // requests per window, per key
	phase  []float64
	abuse  int // the last abuse keys are the abusive ones
}

func newWorkload(seed uint64, normal, abusive int, median, sigma float64) *workload {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &workload{abuse: abusive}
	for i := range normal + abusive {
		c := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
		if i >= normal {
			c = int(50 * median)
			w.keys = append(w.keys, fmt.Sprintf("abuser-%d", i-normal))
		} else {
			w.keys = append(w.keys, fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255))
		}
		w.counts = append(w.counts, max(c, 1))
		w.phase = append(w.phase, rng.Float64())
	}
	return w
}

type event struct {
	at  int64
	key int
}

// window returns the requests of one window, starting at 0, in time
// order (every window repeats it).
func (w *workload) window(win time.Duration) []event {
	var evs []event
	for i, c := range w.counts {
		step := float64(win) / float64(c)
		for j := range c {
			evs = append(evs, event{at: int64((w.phase[i] + float64(j)) * step), key: i})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return int(a.at - b.at) })
	return evs
}

// trueQuantile is the q-quantile of the per-key demand per window of the
// workload (every key asks in every window).
func (w *workload) trueQuantile(q float64) float64 {
	c := slices.Clone(w.counts)
	slices.Sort(c)
	return float64(c[int(q*float64(len(c)-1))])
}

// The acceptance workload: 10,000 keys with log-normal demand and
// 5 abusive keys at 50x, recorded in dry run through a policy.Live on a
// recording store. The recommendation is within 5% of the true p95 x 1.4,
// the abusers top the top-K, and enforcing the recommendation denies them
// and under 5% of the other keys' windows.
func TestRecommendationOnSyntheticWorkload(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() || raceEnabled {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			testSyntheticWorkload(t, seed)
		})
	}
}

func testSyntheticWorkload(t *testing.T, seed uint64) {
	const win = time.Second
	wl := newWorkload(seed, 10000, 5, 20, 0.5)
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: 4 * win})
	require.NoError(t, err)
	defer rec.Close()
	mem, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	defer mem.Close()
	s, err := rec.Store(mem)
	require.NoError(t, err)
	// The policy runs in dry run at a limit far below the abusers' demand.
	cfg := policy.Config{
		Policies:    []policy.Policy{{Name: "api", Rate: floodgate.Rate{N: 100, Per: win}, DryRun: true}},
		DefaultPlan: "api",
	}
	live, err := policy.NewLive(cfg, s)
	require.NoError(t, err)

	ctx := context.Background()
	start := (clk.Now().UnixNano()/int64(win) + 1) * int64(win)
	const windows = 5
	evs := wl.window(win)
	for k := range windows {
		for _, ev := range evs {
			clk.Set(start + int64(k)*int64(win) + ev.at)
			_, err := live.Take(ctx, wl.keys[ev.key], 1)
			require.NoError(t, err)
		}
	}
	clk.Set(start + windows*int64(win))
	d, ok := rec.Demand("api")
	require.True(t, ok)
	rep := d.Report()
	r := rep.Recommendation
	require.True(t, r.OK, r.Reason)
	t.Logf("%s", r)
	t.Logf("demand %+v burst %+v keys %.0f sample %.3f", rep.Demand, rep.Burst, rep.Keys, rep.SampleRate)

	want := wl.trueQuantile(0.95) * 1.4
	assert.InEpsilon(t, want, float64(r.Limit), 0.05, "recommended %d, true p95 x 1.4 = %.1f", r.Limit, want)
	assert.InEpsilon(t, 10005, rep.Keys, 0.1)
	assert.EqualValues(t, 100, r.Current)

	// The 5 abusers are the top of the top-K, above the recommendation.
	require.GreaterOrEqual(t, len(rep.Top), 5)
	for _, k := range rep.Top[:5] {
		assert.Regexp(t, `^abuser-\d$`, k.Key)
		assert.True(t, k.AboveRecommendation)
		assert.Positive(t, k.Refused)
	}
	for _, k := range rep.Top[5:] {
		assert.NotRegexp(t, `^abuser`, k.Key)
	}
	assert.Subset(t, r.KeysAbove, []string{"abuser-0", "abuser-1", "abuser-2", "abuser-3", "abuser-4"})
	assert.Less(t, r.FractionAbove, 0.05)

	// Enforce the recommendation: the abusers are denied in every window,
	// the other keys in under 5% of theirs.
	cfg.Policies[0] = policy.Policy{Name: "api", Rate: floodgate.Rate{N: r.Limit, Per: win}, Burst: max(r.Limit, r.Burst)}
	mem2, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	defer mem2.Close()
	enforced, err := policy.NewLive(cfg, mem2)
	require.NoError(t, err)
	start2 := start + 100*int64(win)
	const checked = 2
	deniedWindows := map[[2]int]bool{}
	for k := range checked {
		for _, ev := range evs {
			clk.Set(start2 + int64(k)*int64(win) + ev.at)
			dec, err := enforced.Take(ctx, wl.keys[ev.key], 1)
			require.NoError(t, err)
			if !dec.Allowed {
				deniedWindows[[2]int{ev.key, k}] = true
			}
		}
	}
	normal := len(wl.keys) - wl.abuse
	others := 0
	for kw := range deniedWindows {
		if kw[0] < normal {
			others++
		}
	}
	for i := normal; i < len(wl.keys); i++ {
		for k := range checked {
			assert.True(t, deniedWindows[[2]int{i, k}], "abuser %d not denied in window %d", i, k)
		}
	}
	frac := float64(others) / float64(normal*checked)
	t.Logf("other keys' windows denied: %d of %d (%.2f%%)", others, normal*checked, 100*frac)
	assert.Less(t, frac, 0.05)
}
