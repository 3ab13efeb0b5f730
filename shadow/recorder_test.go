package shadow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/middleware"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func TestConfigErrors(t *testing.T) {
	for _, c := range []shadow.Config{
		{Quantile: 1}, {Quantile: -0.1}, {BurstQuantile: 1.5}, {Headroom: -1}, {Headroom: 11},
		{MinObservation: time.Millisecond}, {Slots: 100}, {Slots: 3000}, {Slots: 1 << 20},
		{TopK: 65}, {TopK: -1}, {MaxPolicies: 5000}, {Resolution: time.Nanosecond},
		{Clock: (*fakeClock)(nil)},
	} {
		_, err := shadow.New(c)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%+v", c)
	}
	rec, err := shadow.New(shadow.Config{MaxPolicies: 1})
	require.NoError(t, err)
	defer rec.Close()
	_, err = rec.Store(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = rec.Store((*memstore.Store)(nil))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	for _, tr := range []struct {
		name  string
		win   time.Duration
		limit int64
	}{{"", time.Second, 1}, {"a", 0, 1}, {"a", time.Second, -1}} {
		_, err := rec.Track(tr.name, tr.win, tr.limit)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
	_, err = rec.Track("a", time.Second, 1)
	require.NoError(t, err)
	_, err = rec.Track("b", time.Second, 1)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "beyond MaxPolicies")
	require.NoError(t, rec.Close())
	require.NoError(t, rec.Close())
}

// No recommendation before the minimum observation time, nor before a
// window with demand has ended.
func TestRecommendationRefusedEarly(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: 10 * time.Second})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	r := d.Report().Recommendation
	assert.False(t, r.OK)
	assert.Contains(t, r.Reason, "observed 0s of the 10s required")
	for range 9 {
		d.Observe("k", 5, false)
		clk.Advance(time.Second)
	}
	assert.False(t, d.Report().Recommendation.OK)
	clk.Advance(time.Second)
	r = d.Report().Recommendation
	require.True(t, r.OK, r.Reason)
	assert.EqualValues(t, 7, r.Limit, "5 x 1.4")
	assert.EqualValues(t, 10, r.Windows)

	rec2, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second})
	require.NoError(t, err)
	defer rec2.Close()
	d2, err := rec2.Track("api", time.Minute, 10)
	require.NoError(t, err)
	clk.Advance(2 * time.Second)
	d2.Observe("k", 1, false)
	r = d2.Report().Recommendation
	assert.False(t, r.OK)
	assert.Equal(t, "no window with demand has ended yet", r.Reason)
}

// The recording store records every path to the store: Take, TakeAll
// (ApplyAll committing), a refused evaluation, and a policy set's
// descriptors; refunds and peeks are not demand, unnamed limits are not
// recorded.
func TestRecordingStorePaths(t *testing.T) {
	clk := newFakeClock()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	rec, err := shadow.New(shadow.Config{Clock: clk, MinObservation: time.Second})
	require.NoError(t, err)
	defer rec.Close()
	mem, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	defer mem.Close()
	s, err := rec.Store(mem)
	require.NoError(t, err)
	ctx := context.Background()

	a, err := bucket.NewKeyed(s, bucket.Config{Name: "a", Rate: floodgate.PerSecond(10), Burst: 10})
	require.NoError(t, err)
	b, err := bucket.NewKeyed(s, bucket.Config{Name: "b", Rate: floodgate.PerSecond(3), Burst: 3})
	require.NoError(t, err)
	anon, err := bucket.NewKeyed(s, bucket.Config{Rate: floodgate.PerSecond(3), Burst: 3})
	require.NoError(t, err)

	_, err = a.Take(ctx, "k", 2)
	require.NoError(t, err)
	require.NoError(t, a.Refund(ctx, "k", 1))
	_, err = a.Peek(ctx, "k")
	require.NoError(t, err)
	_, err = anon.Take(ctx, "k", 1)
	require.NoError(t, err)
	for range 4 { // the fourth is refused by b: nothing is charged on a
		_, err = floodgate.TakeAll(ctx, []floodgate.Check{{Limiter: a, Key: "k", N: 1}, {Limiter: b, Key: "k", N: 1}})
		require.NoError(t, err)
	}
	// An evaluation (commit false) that refuses is recorded; one that
	// admits is not (its commit will be).
	ops := []store.Op{{Key: "k", Alg: b.Algorithm(), N: 1}}
	out := make([]floodgate.Decision, 1)
	ok, err := s.ApplyAll(ctx, ops, out, false)
	require.NoError(t, err)
	require.False(t, ok)
	ops[0].Alg = a.Algorithm()
	ok, err = s.ApplyAll(ctx, ops, out, false)
	require.NoError(t, err)
	require.True(t, ok)

	clk.Advance(2 * time.Second)
	da, ok := rec.Demand("a")
	require.True(t, ok)
	ra := da.Report()
	assert.EqualValues(t, 5, ra.Decisions, "Take + 4 TakeAll")
	assert.EqualValues(t, 6, ra.Units)
	assert.EqualValues(t, 0, ra.Refused)
	assert.EqualValues(t, 10, ra.Limit)
	assert.Equal(t, time.Second, ra.Window)
	assert.Equal(t, 6.0, ra.Demand.Max)
	db, ok := rec.Demand("b")
	require.True(t, ok)
	rb := db.Report()
	assert.EqualValues(t, 5, rb.Decisions, "4 TakeAll + a refused evaluation")
	assert.EqualValues(t, 2, rb.Refused)
	_, ok = rec.Demand("")
	assert.False(t, ok)
	assert.Len(t, rec.Reports(), 2)

	// Descriptors through a policy set, a dry-run policy among them: the
	// keys the store sees are recorded, credential entries as their hash.
	live, err := policy.NewLive(policy.Config{
		Domain: "d",
		Policies: []policy.Policy{
			{Name: "per-token", Rate: floodgate.PerSecond(2)},
			{Name: "per-route", Rate: floodgate.PerSecond(1), DryRun: true},
		},
		Rules: []policy.Rule{{Key: "token", Policy: "per-token"}, {Key: "route", Policy: "per-route"}},
	}, s)
	require.NoError(t, err)
	for range 3 {
		checks, enforcing, err := live.Match(ctx, []middleware.Descriptor{
			{{Key: "token", Value: "secret-token-1", Credential: true}},
			{{Key: "route", Value: "/img"}},
		}, 1, nil)
		require.NoError(t, err)
		require.Equal(t, 1, enforcing)
		_, err = floodgate.TakeAll(ctx, checks[:enforcing])
		require.NoError(t, err)
		_, err = floodgate.TakeAll(ctx, checks[enforcing:])
		require.NoError(t, err)
	}
	clk.Advance(time.Second)
	dt, _ := rec.Demand("per-token")
	rt := dt.Report()
	assert.EqualValues(t, 3, rt.Decisions)
	assert.EqualValues(t, 1, rt.Refused)
	require.Len(t, rt.Top, 1)
	assert.NotContains(t, rt.Top[0].Key, "secret-token-1", "a credential reaches the recording hashed")
	assert.Contains(t, rt.Top[0].Key, "cred#")
	dr, _ := rec.Demand("per-route")
	rr := dr.Report()
	assert.EqualValues(t, 3, rr.Decisions, "the dry-run policy is recorded")
	assert.EqualValues(t, 2, rr.Refused, "would have refused")
}

// HideKeys keeps only hashes in the top-K.
func TestHideKeys(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, HideKeys: true})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	d.Observe("api-key-in-clear", 3, false)
	rep := d.Report()
	require.Len(t, rep.Top, 1)
	assert.Empty(t, rep.Top[0].Key)
	assert.Len(t, rep.Top[0].Hash, 16)
}

// Concurrent decisions, reports and new policies: every decision is
// counted, the heavy key is found, and the race detector is satisfied.
func TestConcurrentRecording(t *testing.T) {
	rec, err := shadow.New(shadow.Config{Slots: 256})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", 50*time.Millisecond, 10)
	require.NoError(t, err)
	const workers, per = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				key := fmt.Sprint("k", (w*per+i)%3000)
				if i%4 == 0 {
					key = "heavy"
				}
				d.Observe(key, 1, i%10 == 0)
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 20 {
			_ = d.Report()
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 20 {
			_, _ = rec.Track(fmt.Sprint("other", i), time.Second, 1)
		}
	}()
	wg.Wait()
	rep := d.Report()
	assert.EqualValues(t, workers*per, rep.Decisions)
	assert.EqualValues(t, workers*per, rep.Units)
	assert.EqualValues(t, workers*per/10, rep.Refused)
	require.NotEmpty(t, rep.Top)
	assert.Equal(t, "heavy", rep.Top[0].Key)
}

// The sample follows the number of keys: it shrinks when they do not fit
// in the table and grows back when they are fewer.
func TestSampleFollowsKeys(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk, Slots: 256})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	base := (clk.Now().UnixNano()/int64(time.Second) + 1) * int64(time.Second)
	window := func(w, keys int) shadow.Report {
		for i := range keys {
			d.ObserveAt(base+int64(w)*int64(time.Second)+int64(i), fmt.Sprint("k", i), 1, false)
		}
		return d.ReportAt(base + int64(w+1)*int64(time.Second))
	}
	var rep shadow.Report
	for w := range 6 {
		rep = window(w, 5000)
	}
	assert.Less(t, rep.SampleRate, 0.1)
	for w := 6; w < 20; w++ {
		rep = window(w, 50)
	}
	assert.Equal(t, 1.0, rep.SampleRate)
}

// Decisions of a few keys from several goroutines within one sub-window
// take the sampled keys' lock-free path: every key-window is counted
// exactly, and so is its largest burst (one sub-window holds them all).
func TestConcurrentSampledCounts(t *testing.T) {
	clk := newFakeClock()
	rec, err := shadow.New(shadow.Config{Clock: clk})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	base := (clk.Now().UnixNano()/int64(time.Second) + 1) * int64(time.Second)
	const workers, per, keys = 4, 3000, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// key k asks for (k+1) units per decision: k's window
				// holds workers*per/keys*(k+1) units.
				k := (w + i) % keys
				d.ObserveAt(base+int64(i), fmt.Sprint("k", k), int64(k+1), false)
			}
		}()
	}
	wg.Wait()
	rep := d.ReportAt(base + int64(time.Second))
	require.Equal(t, 1.0, rep.SampleRate)
	assert.EqualValues(t, workers*per, rep.Decisions)
	assert.Equal(t, float64(keys), rep.KeyWindows)
	perKey := workers * per / keys
	assert.Equal(t, float64(perKey*keys), rep.Demand.Max)
	assert.Equal(t, float64(perKey*keys), rep.Burst.Max, "the window is one sub-window")
	var units uint64
	for k := range keys {
		units += uint64(perKey * (k + 1))
	}
	assert.Equal(t, units, rep.Units)
}

// A window dropped because the table of sampled keys overflowed is
// counted in the report and noted, in JSON and on the page.
func TestDroppedWindowReported(t *testing.T) {
	rec, err := shadow.New(shadow.Config{Clock: newFakeClock(), MinObservation: time.Second, Slots: 256})
	require.NoError(t, err)
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 10)
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 5000 { // far more keys than 256 slots, at level 0
		d.ObserveAt(t0, fmt.Sprint("k", i), 1, false)
	}
	d.ObserveAt(t0+int64(time.Second), "k", 1, false)
	rep := d.ReportAt(t0 + 2*int64(time.Second))
	assert.EqualValues(t, 1, rep.DroppedWindows)
	require.Len(t, rep.Notes, 1)
	assert.Contains(t, rep.Notes[0], "dropped")
}
