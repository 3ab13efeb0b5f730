package adaptive

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

const ms = time.Millisecond

// step is one window fed to an algorithm and the limit expected after it,
// computed by hand from the update rule in the type's documentation.
type step struct {
	s     Sample
	limit int     // returned limit
	exact float64 // internal estimate, when the algorithm keeps a float (0: unchecked)
}

func TestAIMDTable(t *testing.T) {
	a, err := asAIMD(NewAIMD(AIMDConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, a, nil, []step{
		{s: Sample{RTT: 10 * ms, InFlight: 10, Count: 10}, limit: 21},             // 2*10 >= 20: +1
		{s: Sample{RTT: 10 * ms, InFlight: 10, Count: 10}, limit: 21},             // 2*10 < 21: app-limited
		{s: Sample{RTT: 10 * ms, InFlight: 11, Count: 10}, limit: 22},             // 2*11 >= 21: +1
		{s: Sample{RTT: 10 * ms, InFlight: 22, Dropped: 1, Count: 10}, limit: 20}, // floor(22*0.9)=19 -> min 20
	})
	b, _ := asAIMD(NewAIMD(AIMDConfig{InitialLimit: 100, MinLimit: 1, Backoff: 0.5, Timeout: time.Second}))
	run(t, b, nil, []step{
		{s: Sample{Dropped: 10, Count: 10}, limit: 50},                    // floor(100*0.5)
		{s: Sample{RTT: 1500 * ms, InFlight: 50, Count: 10}, limit: 25},   // mean RTT above the timeout is a drop
		{s: Sample{RTT: time.Second, InFlight: 25, Count: 10}, limit: 26}, // at the timeout is not
		{s: Sample{Dropped: 1, Count: 10}, limit: 13},                     // floor(26*0.5)
		{s: Sample{Dropped: 1, Count: 10}, limit: 6},                      // floor(13*0.5)
		{s: Sample{Dropped: 1, Count: 10}, limit: 3}, {s: Sample{Dropped: 1, Count: 10}, limit: 1},
		{s: Sample{Dropped: 1, Count: 10}, limit: 1}, // never below MinLimit
	})
	c, _ := asAIMD(NewAIMD(AIMDConfig{InitialLimit: 199}))
	run(t, c, nil, []step{
		{s: Sample{RTT: ms, InFlight: 199, Count: 10}, limit: 200},
		{s: Sample{RTT: ms, InFlight: 200, Count: 10}, limit: 200}, // MaxLimit
	})
}

func TestGradient2Table(t *testing.T) {
	g, err := asGradient2(NewGradient2(Gradient2Config{}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, g, func() float64 { return g.limit }, []step{
		// Baseline 100ms; gradient = min(1, 1.5*100/100) = 1: target 20+4,
		// limit = 0.8*20 + 0.2*24 = 20.8.
		{s: Sample{RTT: 100 * ms, InFlight: 20, Count: 10}, limit: 20, exact: 20.8},
		// 0.8*20.8 + 0.2*24.8 = 21.6
		{s: Sample{RTT: 100 * ms, InFlight: 20, Count: 10}, limit: 21, exact: 21.6},
		// A slower window with room (20 < 21) joins the warm-up mean:
		// baseline = (100+100+250)/3 = 150ms; gradient = 1.5*150/250 = 0.9;
		// no queue added; 0.8*21.6 + 0.2*(0.9*21.6) = 21.168.
		{s: Sample{RTT: 250 * ms, InFlight: 20, Count: 10}, limit: 21, exact: 21.168},
		// A drop: 0.8*21.168 + 0.2*(21.168/2) = 19.0512 -> MinLimit 20.
		{s: Sample{RTT: 100 * ms, InFlight: 21, Dropped: 1, Count: 10}, limit: 20, exact: 20},
		// App-limited (9 < 20/2): unchanged. Baseline (100+100+250+50)/4
		// = 125ms, and 125/50 > 2 cuts it (and the warm-up sum) by 5%:
		// sum 475ms.
		{s: Sample{RTT: 50 * ms, InFlight: 9, Count: 10}, limit: 20, exact: 20},
		// Gradient floor (a window with room, 19 < 20): baseline
		// (475+1000)/5 = 295; 1.5*295/1000 = 0.4425 -> 0.5:
		// 0.8*20 + 0.2*10 = 18 -> MinLimit 20.
		{s: Sample{RTT: 1000 * ms, InFlight: 19, Count: 10}, limit: 20, exact: 20},
	})
	if got := g.Baseline(); math.Abs(got-float64(295*ms)) > 1 {
		t.Fatalf("baseline = %v, want 295ms", time.Duration(got))
	}

	// Smoothing 1, no minimum: the rule without smoothing, and the recovery
	// of the baseline when latency falls back (long/short > 2).
	h, _ := asGradient2(NewGradient2(Gradient2Config{InitialLimit: 100, MinLimit: 1, Smoothing: 1, RTTTolerance: 1, QueueSize: 2}))
	run(t, h, func() float64 { return h.limit }, []step{
		{s: Sample{RTT: 100 * ms, InFlight: 100, Count: 10}, limit: 102, exact: 102}, // gradient 1: +2
		{s: Sample{RTT: 200 * ms, InFlight: 100, Count: 10}, limit: 76, exact: 76.5}, // baseline 150: gradient 0.75
		// baseline (100+200+20)/3 = 106.67; long/short = 5.33 > 2 -> *0.95
		// = 101.33; gradient = min(1, 101.33/20) = 1: 76.5 + 2
		{s: Sample{RTT: 20 * ms, InFlight: 76, Count: 10}, limit: 78, exact: 78.5},
	})
	if got, want := h.Baseline(), float64(320*ms)/3*0.95; math.Abs(got-want) > 1 {
		t.Fatalf("baseline = %v, want %v", time.Duration(got), time.Duration(want))
	}
}

// TestGradient2BaselineIgnoresSelfInflictedLatency: after the warm-up, a
// slower RTT from a window in which the gate was full does not move the
// baseline; one from a window with room does.
func TestGradient2BaselineIgnoresSelfInflictedLatency(t *testing.T) {
	g, _ := asGradient2(NewGradient2(Gradient2Config{LongWindow: 9})) // EMA factor 0.2
	for range gradientWarmup {
		g.Update(Sample{RTT: 100 * ms, InFlight: 5, Count: 10})
	}
	g.Update(Sample{RTT: 200 * ms, InFlight: int(g.limit), Count: 10})
	if got := g.Baseline(); got != float64(100*ms) {
		t.Fatalf("baseline after a full window = %v, want 100ms", time.Duration(got))
	}
	g.Update(Sample{RTT: 200 * ms, InFlight: int(g.limit) - 1, Count: 10})
	if got, want := g.Baseline(), float64(120*ms); math.Abs(got-want) > 1 {
		t.Fatalf("baseline after a window with room = %v, want 120ms", time.Duration(got))
	}
	g.Update(Sample{RTT: 60 * ms, InFlight: int(g.limit), Count: 10})
	if got, want := g.Baseline(), float64(108*ms); math.Abs(got-want) > 1 {
		t.Fatalf("baseline after a faster full window = %v, want 108ms", time.Duration(got))
	}
}

// TestGradient2ColdStartUnderOverload starts Gradient2 on a server that is
// already saturated: every window is full and the RTT grows with the limit
// (10ms per request in flight, a server with a fixed throughput). Only the
// first window may set the baseline; the slower, self-inflicted RTTs of the
// full windows that follow must not raise it, in the warm-up as after it.
// The limit may then grow only by the RTT tolerance over that first window
// (1.5 x 20 = 30 requests, where the RTT reaches 1.5 x 200ms), and stay
// there. Learning the full windows in the warm-up lifted the baseline to
// their mean (232ms) and the limit to 35.
func TestGradient2ColdStartUnderOverload(t *testing.T) {
	g, _ := asGradient2(NewGradient2(Gradient2Config{}))
	limit, peak := g.InitialLimit(), 0
	for w := range 300 {
		limit = g.Update(Sample{RTT: 10 * ms * time.Duration(limit), InFlight: limit, Count: 50})
		peak = max(peak, limit)
		if got := g.Baseline(); got != float64(200*ms) {
			t.Fatalf("window %d: baseline = %v, want the first window's 200ms", w, time.Duration(got))
		}
	}
	if peak > 31 || limit < 30 {
		t.Fatalf("limit peaked at %d and ended at %d, want the tolerance bound 30 (31 with the queue step) and no creep", peak, limit)
	}
	// A window with room still teaches the baseline a slower RTT (the
	// server got slower for everyone), and a faster full one always does.
	h, _ := asGradient2(NewGradient2(Gradient2Config{}))
	h.Update(Sample{RTT: 100 * ms, InFlight: 20, Count: 50})
	h.Update(Sample{RTT: 400 * ms, InFlight: 20, Count: 50}) // full, slower: skipped
	h.Update(Sample{RTT: 400 * ms, InFlight: 19, Count: 50}) // room: (100+400)/2
	if got := h.Baseline(); got != float64(250*ms) {
		t.Fatalf("baseline = %v, want 250ms", time.Duration(got))
	}
	h.Update(Sample{RTT: 100 * ms, InFlight: 20, Count: 50}) // full, faster: (100+400+100)/3
	if got := h.Baseline(); got != float64(200*ms) {
		t.Fatalf("baseline = %v, want 200ms", time.Duration(got))
	}
}

// TestGradient2WarmupDecayKept: when latency falls to under half the
// baseline in the warm-up, the 5% cut of the baseline lasts: the next
// window's mean starts from the cut sum instead of undoing it.
func TestGradient2WarmupDecayKept(t *testing.T) {
	g, _ := asGradient2(NewGradient2(Gradient2Config{}))
	g.Update(Sample{RTT: 300 * ms, InFlight: 19, Count: 50})
	g.Update(Sample{RTT: 300 * ms, InFlight: 19, Count: 50})
	g.Update(Sample{RTT: 60 * ms, InFlight: 19, Count: 50}) // mean 220, 220/60 > 2: 209
	if got, want := g.Baseline(), 0.95*float64(220*ms); math.Abs(got-want) > 1 {
		t.Fatalf("baseline = %v, want %v", time.Duration(got), time.Duration(want))
	}
	g.Update(Sample{RTT: 60 * ms, InFlight: 19, Count: 50}) // (0.95*660+60)/4 = 171.75, 171.75/60 > 2: *0.95
	if got, want := g.Baseline(), 0.95*(0.95*float64(660*ms)+float64(60*ms))/4; math.Abs(got-want) > 1 {
		t.Fatalf("baseline = %v, want %v", time.Duration(got), time.Duration(want))
	}
}

func TestVegasTable(t *testing.T) {
	v, err := asVegas(NewVegas(VegasConfig{Rand: rand.New(rand.NewPCG(1, 1))}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, v, func() float64 { return v.limit }, []step{
		{s: Sample{RTT: 100 * ms, InFlight: 20, Count: 10}, limit: 20}, // first RTT: the no-load RTT
		// queue = ceil(20*(1-100/100)) = 0 <= threshold lg(20)=1: +beta = +6
		{s: Sample{RTT: 100 * ms, InFlight: 20, Count: 10}, limit: 26},
		// queue = ceil(26*(1-100/125)) = ceil(5.2) = 6: alpha 3 <= 6 <= beta 6: stays
		{s: Sample{RTT: 125 * ms, InFlight: 26, Count: 10}, limit: 26},
		// queue = ceil(26*0.5) = 13 > beta: -lg = -1
		{s: Sample{RTT: 200 * ms, InFlight: 26, Count: 10}, limit: 25},
		// queue = ceil(25*(1-100/105)) = ceil(1.19) = 2: threshold 1 < 2 < alpha 3: +lg
		{s: Sample{RTT: 105 * ms, InFlight: 25, Count: 10}, limit: 26},
		// A drop lowers the limit even with a new minimum RTT (the reference
		// would take the new minimum and keep 26).
		{s: Sample{RTT: 50 * ms, InFlight: 26, Dropped: 3, Count: 10}, limit: 25},
		{s: Sample{RTT: 90 * ms, InFlight: 25, Count: 10}, limit: 25},  // new minimum
		{s: Sample{RTT: 180 * ms, InFlight: 12, Count: 10}, limit: 25}, // 2*12 < 25: app-limited
	})
	if got := v.NoLoadRTT(); got != float64(90*ms) {
		t.Fatalf("no-load RTT = %v, want 90ms", time.Duration(got))
	}

	// Above 100 lg is 2: alpha 6, beta 12, threshold 2; smoothing 0.5.
	w, _ := asVegas(NewVegas(VegasConfig{InitialLimit: 150, Smoothing: 0.5, Rand: rand.New(rand.NewPCG(1, 1))}))
	run(t, w, func() float64 { return w.limit }, []step{
		{s: Sample{RTT: 100 * ms, InFlight: 150, Count: 10}, limit: 150},
		// queue 0: target 150+12, smoothed 0.5*150 + 0.5*162 = 156
		{s: Sample{RTT: 100 * ms, InFlight: 150, Count: 10}, limit: 156, exact: 156},
		// queue = ceil(156*(1-100/200)) = 78 > 12: target 154, smoothed 155
		{s: Sample{RTT: 200 * ms, InFlight: 156, Count: 10}, limit: 155, exact: 155},
	})

	// ProbeMultiplier 1 at limit 1: every measured window is a probe, so the
	// no-load RTT follows the latest RTT, up as well as down.
	p, _ := asVegas(NewVegas(VegasConfig{InitialLimit: 1, MaxLimit: 1, ProbeMultiplier: 1, Rand: rand.New(rand.NewPCG(1, 1))}))
	p.Update(Sample{RTT: 100 * ms, InFlight: 1, Count: 10})
	p.Update(Sample{RTT: 200 * ms, InFlight: 1, Count: 10})
	if got := p.NoLoadRTT(); got != float64(200*ms) {
		t.Fatalf("probed no-load RTT = %v, want 200ms", time.Duration(got))
	}
}

func TestLog10Root(t *testing.T) {
	for _, c := range []struct{ x, want int }{{0, 1}, {1, 1}, {9, 1}, {10, 1}, {99, 1}, {100, 2}, {999, 2}, {1000, 31}, {4000, 63}} {
		if got := log10Root(c.x); got != c.want {
			t.Errorf("log10Root(%d) = %d, want %d", c.x, got, c.want)
		}
	}
}

func TestFixed(t *testing.T) {
	f, err := NewConstant(7)
	if err != nil {
		t.Fatal(err)
	}
	if f.InitialLimit() != 7 || f.Update(Sample{Dropped: 10, Count: 10}) != 7 {
		t.Fatal("fixed limit moved")
	}
	if _, err := NewConstant(0); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("NewConstant(0) err = %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []error{
		AIMDConfig{Backoff: 1}.validate(),
		AIMDConfig{Backoff: 0.4}.validate(),
		AIMDConfig{MinLimit: 50, MaxLimit: 10}.validate(),
		AIMDConfig{InitialLimit: 5}.validate(), // below the default minimum 20
		AIMDConfig{Timeout: -1}.validate(),
		Gradient2Config{Smoothing: 1.5}.validate(),
		Gradient2Config{RTTTolerance: 0.5}.validate(),
		Gradient2Config{LongWindow: -1}.validate(),
		Gradient2Config{QueueSize: -1}.validate(),
		Gradient2Config{InitialLimit: 500}.validate(),
		Gradient2Config{Smoothing: math.NaN()}.validate(),
		VegasConfig{Smoothing: -1}.validate(),
		VegasConfig{ProbeMultiplier: -1}.validate(),
		VegasConfig{InitialLimit: 2000}.validate(),
		VegasConfig{MaxLimit: -3}.validate(),
	}
	for i, err := range bad {
		if !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("case %d: err = %v, want ErrInvalidConfig", i, err)
		}
	}
	for i, err := range []error{AIMDConfig{}.validate(), Gradient2Config{}.validate(), VegasConfig{}.validate()} {
		if err != nil {
			t.Errorf("defaults %d: %v", i, err)
		}
	}
}

func run(t *testing.T, a Controller, exact func() float64, steps []step) {
	t.Helper()
	for i, st := range steps {
		if got := a.Update(st.s); got != st.limit {
			t.Fatalf("step %d: limit = %d, want %d", i, got, st.limit)
		}
		if st.exact != 0 && exact != nil {
			if got := exact(); math.Abs(got-st.exact) > 1e-9 {
				t.Fatalf("step %d: estimate = %v, want %v", i, got, st.exact)
			}
		}
	}
}

// TestGradient2StableTimeouts is the reference's known failure (Netflix
// concurrency-limits issue 137): every request times out at the same RTT, so
// the RTT is stable and the reference's gradient stays 1 while the limit
// climbs to the maximum. Reported as drops (as Gate.Do does for
// context.DeadlineExceeded), the timeouts drive the limit to the minimum.
func TestGradient2StableTimeouts(t *testing.T) {
	g, _ := asGradient2(NewGradient2(Gradient2Config{InitialLimit: 100}))
	for range 30 {
		g.Update(Sample{RTT: 0, InFlight: int(g.limit), Dropped: 50, Count: 50})
	}
	if got := int(g.limit); got != 20 {
		t.Fatalf("limit after 30 windows of timeouts = %d, want the minimum 20", got)
	}
	// The same windows reported as successes at a stable 5s RTT look like a
	// healthy server to any gradient: the limit grows. Drops must be
	// reported as drops.
	h, _ := asGradient2(NewGradient2(Gradient2Config{InitialLimit: 100}))
	for range 30 {
		h.Update(Sample{RTT: 5 * time.Second, InFlight: int(h.limit), Count: 50})
	}
	if got := int(h.limit); got <= 100 {
		t.Fatalf("limit = %d, want growth: the RTT alone cannot tell stable timeouts from health", got)
	}
}

// asGradient2, asVegas and asAIMD give the tests the controllers' state.
func asGradient2(c Controller, err error) (*gradient2, error) {
	g, _ := c.(*gradient2)
	return g, err
}

func asVegas(c Controller, err error) (*vegas, error) {
	v, _ := c.(*vegas)
	return v, err
}

func asAIMD(c Controller, err error) (*aimd, error) {
	a, _ := c.(*aimd)
	return a, err
}
