package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
)

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// recorder is an observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []floodgate.Event
}

func (r *recorder) Observe(e floodgate.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) last() floodgate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[len(r.events)-1]
}

func (r *recorder) count(o floodgate.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Outcome == o {
			n++
		}
	}
	return n
}

// script is an algorithm that records the samples it gets and answers with
// a scripted sequence of limits.
type script struct {
	initial int
	next    []int
	got     []adaptive.Sample
}

func (s *script) InitialLimit() int { return s.initial }
func (s *script) Update(x adaptive.Sample) int {
	s.got = append(s.got, x)
	if len(s.next) == 0 {
		return s.initial
	}
	n := s.next[0]
	s.next = s.next[1:]
	return n
}

func TestAcquireRejectsAtLimit(t *testing.T) {
	rec := &recorder{}
	l := must(adaptive.NewGate(must(adaptive.NewConstant(2)), adaptive.WithObserver(rec), adaptive.WithName("api")))
	ctx := context.Background()
	a := must(l.Acquire(ctx))
	b := must(l.Acquire(ctx))
	if e := rec.last(); e.Outcome != floodgate.OutcomeAllowed || e.Policy != "api" || e.Decision.Remaining != 0 || e.Decision.Limit != 2 {
		t.Fatalf("admission event = %+v", e)
	}
	c, err := l.Acquire(ctx)
	if c != nil || !errors.Is(err, adaptive.ErrLimitExceeded) {
		t.Fatalf("third Acquire = %v, %v; want ErrLimitExceeded", c, err)
	}
	e := rec.last()
	if e.Outcome != floodgate.OutcomeShed || e.Decision.Allowed || e.Decision.RetryAfter <= 0 || e.Decision.Remaining != 0 {
		t.Fatalf("rejection event = %+v", e)
	}
	a.Success()
	if _, err := l.Acquire(ctx); err != nil {
		t.Fatalf("Acquire after a release: %v", err)
	}
	b.Ignore()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Acquire(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done context = %v", err)
	}
	st := l.Stats()
	if st.Admitted != 3 || st.Rejected != 1 || st.InFlight != 1 || st.Succeeded != 1 || st.Ignored != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestTokenIdempotent(t *testing.T) {
	l := must(adaptive.NewGate(must(adaptive.NewConstant(5))))
	tok := must(l.Acquire(context.Background()))
	tok.Success()
	tok.Success()
	tok.Dropped()
	tok.Ignore()
	var nilTok *adaptive.Token
	nilTok.Success() // no-op
	nilTok.Ignore()
	st := l.Stats()
	if st.InFlight != 0 || st.Succeeded != 1 || st.Dropped != 0 || st.Ignored != 0 {
		t.Fatalf("stats after repeated ends = %+v", st)
	}
}

func TestWindowSample(t *testing.T) {
	clk := newFakeClock()
	alg := &script{initial: 20, next: []int{30}}
	var changes []adaptive.LimitChange
	l := must(adaptive.NewGate(alg, adaptive.WithClock(clk), adaptive.OnLimitChange(func(c adaptive.LimitChange) { changes = append(changes, c) })))
	var toks []*adaptive.Token
	for range 12 {
		toks = append(toks, must(l.Acquire(context.Background())))
	}
	clk.Advance(50 * time.Microsecond)
	toks[0].Success() // 50µs: below the minimum RTT, not counted
	clk.Advance(10*time.Millisecond - 50*time.Microsecond)
	for _, tok := range toks[1:9] {
		tok.Success() // 8 x 10ms
	}
	toks[9].Dropped()
	toks[10].Ignore()
	clk.Advance(990 * time.Millisecond)
	// 1s after the first counted sample: the window is not yet 1s old
	// (it opened at 10ms).
	if len(alg.got) != 0 {
		t.Fatalf("window closed early: %+v", alg.got)
	}
	clk.Advance(20 * time.Millisecond)
	toks[11].Success() // RTT 1.02s closes the window
	want := adaptive.Sample{RTT: (8*10*time.Millisecond + 1020*time.Millisecond) / 9, MinRTT: 10 * time.Millisecond, InFlight: 12, Dropped: 1, Count: 10}
	if len(alg.got) != 1 || alg.got[0] != want {
		t.Fatalf("samples = %+v, want [%+v]", alg.got, want)
	}
	if l.Limit() != 30 || len(changes) != 1 || changes[0].Old != 20 || changes[0].New != 30 || changes[0].Sample != want {
		t.Fatalf("limit %d, changes %+v", l.Limit(), changes)
	}
	// A window of fewer than 10 samples is discarded.
	for range 5 {
		tok := must(l.Acquire(context.Background()))
		clk.Advance(300 * time.Millisecond)
		tok.Success()
	}
	if len(alg.got) != 1 {
		t.Fatalf("a 5-sample window reached the algorithm: %+v", alg.got[1:])
	}
	if st := l.Stats(); st.Windows != 1 || st.InFlight != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestLeakedTokenIsReclaimed(t *testing.T) {
	clk := newFakeClock()
	var leaks []adaptive.Leak
	l := must(adaptive.NewGate(must(adaptive.NewConstant(2)), adaptive.WithClock(clk),
		adaptive.WithMaxAge(time.Minute), adaptive.OnLeak(func(lk adaptive.Leak) { leaks = append(leaks, lk) })))
	ctx := context.Background()
	leaked := must(l.AcquireRequest(ctx, adaptive.Request{Label: "batch"}))
	clk.Advance(30 * time.Second)
	second := must(l.Acquire(ctx))
	if _, err := l.Acquire(ctx); !errors.Is(err, adaptive.ErrLimitExceeded) {
		t.Fatalf("limit 2 with 2 in flight admitted a third: %v", err)
	}
	clk.Advance(31 * time.Second)
	// The next Acquire reclaims the 61s-old token and takes its slot.
	third, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after the leak's max age: %v", err)
	}
	if len(leaks) != 1 || leaks[0].Age != 61*time.Second || leaks[0].Label != "batch" {
		t.Fatalf("leaks = %+v", leaks)
	}
	leaked.Success() // late: does nothing
	st := l.Stats()
	if st.Leaked != 1 || st.Late != 1 || st.InFlight != 2 || st.Succeeded != 0 {
		t.Fatalf("stats = %+v", st)
	}
	second.Success()
	third.Success()
	clk.Advance(time.Hour)
	if st := l.Stats(); st.InFlight != 0 || st.Leaked != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestStatsFindsLeaksWithoutTraffic(t *testing.T) {
	clk := newFakeClock()
	l := must(adaptive.NewGate(must(adaptive.NewConstant(2)), adaptive.WithClock(clk), adaptive.WithMaxAge(time.Second)))
	must(l.Acquire(context.Background()))
	clk.Advance(2 * time.Second)
	if st := l.Stats(); st.Leaked != 1 || st.InFlight != 0 {
		t.Fatalf("stats = %+v", st)
	}
	noDetect := must(adaptive.NewGate(must(adaptive.NewConstant(2)), adaptive.WithClock(clk), adaptive.WithMaxAge(0)))
	must(noDetect.Acquire(context.Background()))
	clk.Advance(1000 * time.Hour)
	if st := noDetect.Stats(); st.Leaked != 0 || st.InFlight != 1 {
		t.Fatalf("max age 0: stats = %+v", st)
	}
}

func TestDo(t *testing.T) {
	l := must(adaptive.NewGate(must(adaptive.NewConstant(1))))
	ctx := context.Background()
	other := errors.New("bad request")
	for _, err := range []error{nil, adaptive.ErrDropped, context.DeadlineExceeded, other} {
		if got := l.Do(ctx, func(context.Context) error { return err }); got != err {
			t.Fatalf("Do returned %v, want %v", got, err)
		}
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = l.Do(ctx, func(context.Context) error { panic("boom") })
	}()
	st := l.Stats()
	if st.InFlight != 0 || st.Succeeded != 1 || st.Dropped != 2 || st.Ignored != 2 {
		t.Fatalf("stats = %+v", st)
	}
	// At the limit, Do returns the rejection without calling fn.
	hold := must(l.Acquire(ctx))
	if err := l.Do(ctx, func(context.Context) error { t.Fatal("fn ran"); return nil }); !errors.Is(err, adaptive.ErrLimitExceeded) {
		t.Fatalf("Do at the limit = %v", err)
	}
	hold.Success()
}

func TestOptionsValidation(t *testing.T) {
	fixed := must(adaptive.NewConstant(1))
	for i, opt := range []adaptive.Option{
		adaptive.WithClock(nil), adaptive.WithObserver(nil), adaptive.WithWindow(0, time.Second),
		adaptive.WithWindow(10, 0), adaptive.WithMinRTT(-1), adaptive.WithMaxAge(-1),
		adaptive.WithQueue(0, adaptive.FIFO), adaptive.WithQueue(1, adaptive.Order(9)),
	} {
		if _, err := adaptive.NewGate(fixed, opt); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("option %d: err = %v", i, err)
		}
	}
	if _, err := adaptive.NewGate(nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("nil algorithm: err = %v", err)
	}
	if _, err := adaptive.NewGate(&script{initial: 0}); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("initial limit 0: err = %v", err)
	}
}

// queued starts Acquire calls in the given order, each in its own goroutine,
// waiting for each to be parked in the queue before starting the next. The
// returned channel receives each one's name as it gets a token (and then
// releases it at once).
func queued(t *testing.T, l *adaptive.Gate, reqs ...adaptive.Request) <-chan string {
	t.Helper()
	served := make(chan string, len(reqs))
	for _, r := range reqs {
		go func() {
			tok, err := l.AcquireRequest(context.Background(), r)
			if err != nil {
				served <- "rejected " + r.Label
				return
			}
			served <- r.Label
			tok.Success()
		}()
		synctest.Wait()
	}
	return served
}

func drain(ch <-chan string, n int) []string {
	var got []string
	for range n {
		got = append(got, <-ch)
	}
	return got
}

func TestQueueOrder(t *testing.T) {
	for _, c := range []struct {
		order adaptive.Order
		want  []string
	}{
		{adaptive.FIFO, []string{"a", "b", "c"}},
		{adaptive.LIFO, []string{"c", "b", "a"}},
	} {
		synctest.Test(t, func(t *testing.T) {
			l := must(adaptive.NewGate(must(adaptive.NewConstant(1)), adaptive.WithClock(floodgate.ClockFunc(time.Now)), adaptive.WithQueue(5, c.order)))
			hold := must(l.Acquire(context.Background()))
			ch := queued(t, l, adaptive.Request{Label: "a"}, adaptive.Request{Label: "b"}, adaptive.Request{Label: "c"})
			if q := l.Stats().Queued; q != 3 {
				t.Fatalf("queued = %d, want 3", q)
			}
			hold.Success()
			if got := drain(ch, 3); !equal(got, c.want) {
				t.Fatalf("order %d: served %v, want %v", c.order, got, c.want)
			}
		})
	}
}

func TestQueueRankAndEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		l := must(adaptive.NewGate(must(adaptive.NewConstant(1)), adaptive.WithClock(floodgate.ClockFunc(time.Now)),
			adaptive.WithQueue(3, adaptive.FIFO), adaptive.WithObserver(rec)))
		hold := must(l.Acquire(context.Background()))
		ch := queued(t, l,
			adaptive.Request{Label: "low1", Rank: 0}, adaptive.Request{Label: "high", Rank: 2},
			adaptive.Request{Label: "mid", Rank: 1},
			adaptive.Request{Label: "low2", Rank: 0}, // full, does not outrank: rejected
			adaptive.Request{Label: "top", Rank: 3},  // full, evicts low1
		)
		got := drain(ch, 2)
		if !equal(got, []string{"rejected low2", "rejected low1"}) {
			t.Fatalf("rejections = %v", got)
		}
		hold.Success()
		if got := drain(ch, 3); !equal(got, []string{"top", "high", "mid"}) {
			t.Fatalf("served %v, want top, high, mid", got)
		}
		if n := rec.count(floodgate.OutcomeShed); n != 2 {
			t.Fatalf("shed events = %d, want 2", n)
		}
	})
}

func TestQueueNeverPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		l := must(adaptive.NewGate(must(adaptive.NewConstant(1)), adaptive.WithClock(floodgate.ClockFunc(time.Now)),
			adaptive.WithQueue(5, adaptive.FIFO), adaptive.WithObserver(rec)))
		hold := must(l.Acquire(context.Background()))
		defer hold.Success()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		tok, err := l.Acquire(ctx)
		if tok != nil || !errors.Is(err, adaptive.ErrLimitExceeded) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v, %v", tok, err)
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Fatalf("waited %v, want exactly the 50ms to the deadline", waited)
		}
		e := rec.last()
		if e.Outcome != floodgate.OutcomeShed || !errors.Is(e.Err, context.DeadlineExceeded) || e.Latency != 50*time.Millisecond {
			t.Fatalf("event = %+v", e)
		}
		if st := l.Stats(); st.Queued != 0 || st.Rejected != 1 {
			t.Fatalf("stats = %+v", st)
		}
	})
}

func TestQueueServedByLimitIncrease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := floodgate.ClockFunc(time.Now)
		alg := &script{initial: 1, next: []int{3}}
		l := must(adaptive.NewGate(alg, adaptive.WithClock(clk), adaptive.WithQueue(5, adaptive.FIFO), adaptive.WithWindow(1, time.Millisecond)))
		first := must(l.Acquire(context.Background()))
		time.Sleep(10 * time.Millisecond) // simulated time: an RTT to measure
		first.Success()                   // opens a window
		hold := must(l.Acquire(context.Background()))
		served := make(chan *adaptive.Token, 2)
		for range 2 {
			go func() { served <- must(l.Acquire(context.Background())) }()
		}
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		hold.Success() // closes the window: limit 1 -> 3, both waiters fit
		a, b := <-served, <-served
		if l.InFlight() != 2 || l.Limit() != 3 {
			t.Fatalf("in flight %d, limit %d", l.InFlight(), l.Limit())
		}
		a.Success()
		b.Success()
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAcquireFunc(t *testing.T) {
	rec := &recorder{}
	l := must(adaptive.NewGate(must(adaptive.NewConstant(1)), adaptive.WithQueue(1, adaptive.FIFO), adaptive.WithObserver(rec)))
	type result struct {
		tok *adaptive.Token
		err error
	}
	var got []result
	done := func(tok *adaptive.Token, err error) { got = append(got, result{tok, err}) }
	l.AcquireFunc(adaptive.Request{}, done) // admitted at once
	if len(got) != 1 || got[0].err != nil {
		t.Fatalf("first: %+v", got)
	}
	l.AcquireFunc(adaptive.Request{Rank: 0, Label: "low"}, done) // queued
	if len(got) != 1 {
		t.Fatalf("queued request called back: %+v", got)
	}
	l.AcquireFunc(adaptive.Request{Rank: 1, Label: "high"}, done) // evicts "low"
	if len(got) != 2 || !errors.Is(got[1].err, adaptive.ErrLimitExceeded) {
		t.Fatalf("eviction: %+v", got)
	}
	if e := rec.last(); e.Outcome != floodgate.OutcomeShed || e.Class != "low" {
		t.Fatalf("eviction event = %+v", e)
	}
	got[0].tok.Success() // serves "high"
	if len(got) != 3 || got[2].err != nil || got[2].tok == nil {
		t.Fatalf("served: %+v", got)
	}
	got[2].tok.Success()
	noQueue := must(adaptive.NewGate(must(adaptive.NewConstant(1))))
	hold := must(noQueue.Acquire(context.Background()))
	cancel := noQueue.AcquireFunc(adaptive.Request{}, done)
	if len(got) != 4 || !errors.Is(got[3].err, adaptive.ErrLimitExceeded) || cancel() {
		t.Fatalf("without a queue: %+v", got)
	}
	hold.Success()
	if st := l.Stats(); st.InFlight != 0 || st.Admitted != 2 || st.Rejected != 1 {
		t.Fatalf("stats = %+v", st)
	}
}
