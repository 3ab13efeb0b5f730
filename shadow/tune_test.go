package shadow_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// service simulates a protected origin behind the policy: 100 keys with
// log-normal demand, a capacity in requests per window above which the
// origin fails the excess.
type service struct {
	t        *testing.T
	clk      *fakeClock
	live     *policy.Live
	rec      *shadow.Recorder
	wl       *workload
	evs      []event
	capacity int
	next     int64 // start of the next window
	errRate  float64
	changes  []policy.Change
	mu       sync.Mutex
}

const simWindow = time.Second

func newService(t *testing.T, start int64, capacity int) *service {
	clk := newFakeClock()
	s := &service{t: t, clk: clk, capacity: capacity}
	var err error
	s.rec, err = shadow.New(shadow.Config{Clock: clk, MinObservation: 5 * simWindow})
	require.NoError(t, err)
	t.Cleanup(func() { s.rec.Close() })
	mem, err := memstore.New(memstore.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	st, err := s.rec.Store(mem)
	require.NoError(t, err)
	s.live, err = policy.NewLive(policy.Config{
		Policies:    []policy.Policy{{Name: "api", Rate: floodgate.Rate{N: start, Per: simWindow}}},
		DefaultPlan: "api",
	}, st, policy.WithOnChange(func(c policy.Change) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.changes = append(s.changes, c)
	}))
	require.NoError(t, err)
	s.wl = newWorkload(11, 100, 0, 20, 0.5)
	s.evs = s.wl.window(simWindow)
	s.next = (clk.Now().UnixNano()/int64(simWindow) + 1) * int64(simWindow)
	return s
}

// window runs one window of traffic and sets the origin's error rate.
func (s *service) window() {
	ctx := context.Background()
	admitted := 0
	for _, ev := range s.evs {
		s.clk.Set(s.next + ev.at)
		d, err := s.live.Take(ctx, s.wl.keys[ev.key], 1)
		require.NoError(s.t, err)
		if d.Allowed {
			admitted++
		}
	}
	s.errRate = 0
	if admitted > s.capacity {
		s.errRate = float64(admitted-s.capacity) / float64(admitted)
	}
	s.next += int64(simWindow)
	s.clk.Set(s.next)
}

func (s *service) healthy(context.Context) bool { return s.errRate < 0.01 }

func (s *service) limit() int64 {
	p, _ := s.live.Set().Policy("api")
	return p.Rate.N
}

// Tuning on a simulated service whose error rate rises above a capacity:
// from a low limit the tuner climbs toward the recommendation in steps of
// at most 30%, rolls back within one interval the step that overloads the
// origin, cools down, bisects, and settles on a healthy limit between
// probes; every change is an event, and every event a config change.
func TestTunerConvergesUnderCapacity(t *testing.T) {
	s := newService(t, 8, 1750)
	var events []shadow.TuneEvent
	tuner, err := shadow.NewTuner(s.live, s.rec, shadow.TuneConfig{
		Policy: "api", Interval: 3 * simWindow, Floor: 5, Ceiling: 500,
		Health: s.healthy, Clock: s.clk,
		OnEvent: func(e shadow.TuneEvent) { events = append(events, e) },
	})
	require.NoError(t, err)

	var limits []int64
	stepped := false
	for i := range 40 { // intervals
		for range 3 {
			s.window()
		}
		sick := !s.healthy(context.Background())
		evs, why := tuner.Step(context.Background())
		t.Logf("interval %2d: limit %3d err %.3f: %s", i, s.limit(), s.errRate, why)
		if i < 1 {
			assert.Empty(t, evs, "no step before the minimum observation time")
		}
		if stepped && sick {
			require.NotEmpty(t, evs, "interval %d", i)
			assert.Equal(t, shadow.RolledBack, evs[0].Kind, "an unhealthy step is rolled back at the next step")
		}
		stepped = len(evs) > 0 && evs[len(evs)-1].Kind == shadow.Applied
		limits = append(limits, s.limit())
	}
	require.NotEmpty(t, events)
	applied, rolled := 0, 0
	for i, e := range events {
		t.Log(e)
		switch e.Kind {
		case shadow.Applied:
			applied++
			ratio := float64(e.After) / float64(e.Before)
			assert.True(t, ratio >= 0.7-1e-9 && ratio <= 1.3+1e-9, "step %d -> %d is more than 30%%", e.Before, e.After)
			assert.True(t, e.Evidence.OK)
			assert.Positive(t, e.Version)
			require.Greater(t, i, 0)
			assert.Equal(t, shadow.Proposed, events[i-1].Kind, "every applied step was proposed")
		case shadow.RolledBack:
			rolled++
			assert.Positive(t, e.Version)
		}
	}
	assert.Positive(t, rolled, "the capacity was hit and a step rolled back")
	assert.GreaterOrEqual(t, applied, 4)
	// Converged: the last ten intervals changed nothing, the origin is
	// healthy, and the limit climbed well above where it started.
	// Between probes (one a cool-down, doubled after each rollback) it
	// sits on a healthy limit.
	final, still := limits[len(limits)-1], 0
	for _, l := range limits[len(limits)-10:] {
		if l == final {
			still++
		}
	}
	assert.GreaterOrEqual(t, still, 9)
	assert.True(t, s.healthy(context.Background()))
	assert.Greater(t, final, int64(15))
	// Every applied change and rollback is one config change of the Live.
	s.mu.Lock()
	defer s.mu.Unlock()
	tunerChanges := 0
	for _, c := range s.changes {
		if c.Source == "shadow-tuner" {
			tunerChanges++
			assert.Equal(t, []string{"api"}, c.Changed)
		}
	}
	assert.Equal(t, applied+rolled, tunerChanges)
}

// A step that makes the origin unhealthy is undone at the very next step:
// within one interval.
func TestTunerRollsBackWithinOneInterval(t *testing.T) {
	s := newService(t, 40, 100000)
	sick := false
	tuner, err := shadow.NewTuner(s.live, s.rec, shadow.TuneConfig{
		Policy: "api", Interval: 2 * simWindow, Floor: 5, Ceiling: 500, Clock: s.clk,
		Health: func(context.Context) bool { return !sick },
	})
	require.NoError(t, err)
	for range 6 {
		s.window()
	}
	evs, why := tuner.Step(context.Background())
	require.Len(t, evs, 2, why)
	require.Equal(t, shadow.Applied, evs[1].Kind)
	assert.EqualValues(t, 52, evs[1].After, "40 x 1.3 toward the recommendation")
	assert.EqualValues(t, 52, s.limit())
	sick = true
	for range 2 {
		s.window()
	}
	evs, why = tuner.Step(context.Background())
	require.Len(t, evs, 1, why)
	assert.Equal(t, shadow.RolledBack, evs[0].Kind)
	assert.EqualValues(t, 52, evs[0].Before)
	assert.EqualValues(t, 40, evs[0].After)
	assert.EqualValues(t, 40, s.limit())
	// Unhealthy with nothing to undo: it holds.
	s.window()
	s.window()
	evs, why = tuner.Step(context.Background())
	assert.Empty(t, evs)
	assert.Contains(t, why, "unhealthy")
}

// In dry run the tuner only proposes: the Live never changes.
func TestTunerDryRunOnlyProposes(t *testing.T) {
	s := newService(t, 200, 100000)
	var events []shadow.TuneEvent
	tuner, err := shadow.NewTuner(s.live, s.rec, shadow.TuneConfig{
		Policy: "api", Interval: simWindow, Floor: 5, Ceiling: 500, Clock: s.clk, DryRun: true,
		OnEvent: func(e shadow.TuneEvent) { events = append(events, e) },
	})
	require.NoError(t, err)
	v := s.live.Version()
	for range 8 {
		s.window()
		tuner.Step(context.Background())
	}
	require.NotEmpty(t, events)
	for _, e := range events {
		assert.Equal(t, shadow.Proposed, e.Kind)
		assert.EqualValues(t, 200, e.Before)
		assert.EqualValues(t, 140, e.After, "200 - 30%")
	}
	assert.Equal(t, v, s.live.Version())
	assert.EqualValues(t, 200, s.limit())
}

// Run steps once per interval, on a fake clock (testing/synctest).
func TestTunerRunSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, err := shadow.New(shadow.Config{Clock: floodgate.ClockFunc(time.Now), MinObservation: time.Second})
		require.NoError(t, err)
		defer rec.Close()
		mem, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(time.Now)), memstore.WithSweepInterval(0))
		require.NoError(t, err)
		defer mem.Close()
		st, err := rec.Store(mem)
		require.NoError(t, err)
		live, err := policy.NewLive(policy.Config{
			Policies: []policy.Policy{{Name: "api", Rate: floodgate.PerSecond(100)}}, DefaultPlan: "api",
		}, st)
		require.NoError(t, err)
		var mu sync.Mutex
		var at []time.Time
		tuner, err := shadow.NewTuner(live, rec, shadow.TuneConfig{
			Policy: "api", Interval: 10 * time.Second, Floor: 1, Ceiling: 1000, Clock: floodgate.ClockFunc(time.Now),
			OnEvent: func(e shadow.TuneEvent) {
				if e.Kind == shadow.Applied {
					mu.Lock()
					at = append(at, e.At)
					mu.Unlock()
				}
			},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- tuner.Run(ctx) }()
		t0 := time.Now()
		// Ten keys asking 10 a second each: the recommendation is 14, and
		// the tuner walks 100 -> 70 -> 49 -> 35 -> 25 -> 18 -> 14.
		for range 70 {
			for k := range 10 {
				for range 10 {
					_, err := live.Take(ctx, fmt.Sprint("k", k), 1)
					require.NoError(t, err)
				}
			}
			time.Sleep(time.Second)
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		p, _ := live.Set().Policy("api")
		assert.EqualValues(t, 14, p.Rate.N)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, at, 6)
		for i, a := range at {
			assert.Equal(t, time.Duration(i+1)*10*time.Second, a.Sub(t0), "step %d", i)
		}
	})
}

func TestTunerConfigErrors(t *testing.T) {
	s := newService(t, 10, 100)
	for _, c := range []shadow.TuneConfig{
		{Floor: 1, Ceiling: 2},
		{Policy: "nope", Floor: 1, Ceiling: 2},
		{Policy: "api", Floor: 0, Ceiling: 2},
		{Policy: "api", Floor: 3, Ceiling: 2},
		{Policy: "api", Floor: 1, Ceiling: 2, MaxStep: 1.5},
		{Policy: "api", Floor: 1, Ceiling: 2, Interval: time.Nanosecond},
	} {
		_, err := shadow.NewTuner(s.live, s.rec, c)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%+v", c)
	}
	_, err := shadow.NewTuner(nil, s.rec, shadow.TuneConfig{Policy: "api", Floor: 1, Ceiling: 2})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

// Whatever the health func says (random here, seeded), the tuner keeps its
// guards: every applied step is within 30% and within the floor and the
// ceiling, applied changes are at least an interval apart, a step followed
// by an unhealthy check is rolled back to exactly the limit before it, and
// nothing moves while the service is unhealthy without a step to undo.
func TestTunerGuardsUnderRandomHealth(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			s := newService(t, 300, 1<<30)
			healthy := true
			var events []shadow.TuneEvent
			tuner, err := shadow.NewTuner(s.live, s.rec, shadow.TuneConfig{
				Policy: "api", Interval: 2 * simWindow, Floor: 20, Ceiling: 250, Clock: s.clk,
				Health:  func(context.Context) bool { return healthy },
				OnEvent: func(e shadow.TuneEvent) { events = append(events, e) },
			})
			require.NoError(t, err)
			var lastChange time.Time
			pending := false
			for i := range 60 {
				s.window()
				healthy = rng.IntN(4) != 0
				before := s.limit()
				evs, why := tuner.Step(context.Background())
				switch {
				case pending && !healthy:
					require.NotEmpty(t, evs, "interval %d: %s", i, why)
					assert.Equal(t, shadow.RolledBack, evs[0].Kind)
				case !healthy:
					assert.Empty(t, evs, "interval %d: unhealthy, nothing to undo: %s", i, why)
					assert.Equal(t, before, s.limit())
				}
				pending = false
				for _, e := range evs {
					switch e.Kind {
					case shadow.Applied:
						ratio := float64(e.After) / float64(e.Before)
						assert.True(t, ratio >= 0.7-1e-9 && ratio <= 1.3+1e-9, "%s", e)
						pending = true
						fallthrough
					case shadow.RolledBack:
						if e.Kind == shadow.Applied && !lastChange.IsZero() {
							assert.GreaterOrEqual(t, e.At.Sub(lastChange), 2*simWindow, "%s", e)
						}
						lastChange = e.At
					}
					if e.Kind == shadow.Applied {
						// Within the bounds, or on its way into them from a
						// limit set outside them.
						inside := e.After >= 20 && e.After <= 250
						inward := (e.Before > 250 && e.After < e.Before) || (e.Before < 20 && e.After > e.Before)
						assert.True(t, inside || inward, "%s", e)
					}
				}
			}
			// The rollbacks restored the limit the step started from.
			for i, e := range events {
				if e.Kind == shadow.RolledBack {
					var step shadow.TuneEvent
					for j := i - 1; j >= 0; j-- {
						if events[j].Kind == shadow.Applied {
							step = events[j]
							break
						}
					}
					assert.Equal(t, step.After, e.Before)
					assert.Equal(t, step.Before, e.After)
				}
			}
			t.Logf("%d events, final %d", len(events), s.limit())
		})
	}
}

// After a rollback the tuner does not hold for good: it holds through the
// cool-down (on the tuner's clock), then moves toward the recommendation
// again in bounded steps, past the limit that was rolled back once the
// service stays healthy.
func TestTunerResumesAfterCoolDown(t *testing.T) {
	s := newService(t, 40, 100000)
	sick := false
	tuner, err := shadow.NewTuner(s.live, s.rec, shadow.TuneConfig{
		Policy: "api", Interval: 2 * simWindow, CoolDown: 10 * simWindow, Floor: 5, Ceiling: 500, Clock: s.clk,
		Health: func(context.Context) bool { return !sick },
	})
	require.NoError(t, err)
	for range 6 {
		s.window()
	}
	evs, why := tuner.Step(context.Background())
	require.Len(t, evs, 2, why)
	require.EqualValues(t, 52, s.limit())
	sick = true
	s.window()
	s.window()
	evs, _ = tuner.Step(context.Background())
	require.Len(t, evs, 1)
	require.Equal(t, shadow.RolledBack, evs[0].Kind)
	rolled := s.clk.Now()
	sick = false
	var limits []int64
	for range 20 {
		s.window()
		s.window()
		evs, why := tuner.Step(context.Background())
		if s.clk.Now().Sub(rolled) < 10*simWindow {
			assert.Empty(t, evs, "cooling down")
			assert.Contains(t, why, "cool-down")
		}
		for _, e := range evs {
			if e.Kind == shadow.Applied {
				r := float64(e.After) / float64(e.Before)
				assert.True(t, r <= 1.3+1e-9 && r >= 0.7-1e-9, "bounded step %d -> %d", e.Before, e.After)
			}
		}
		limits = append(limits, s.limit())
	}
	t.Log(limits)
	assert.Greater(t, s.limit(), int64(52), "past the rolled-back limit, toward the recommendation")
}
