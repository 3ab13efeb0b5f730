package priority_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/priority"
)

// newFixed returns a Shedder of classes on a constant capacity of n.
func newFixed(n int, classes []priority.ClassConfig, opts ...adaptive.Option) (*priority.Shedder, error) {
	alg, err := adaptive.NewConstant(n)
	if err != nil {
		return nil, err
	}
	g, err := adaptive.NewGate(alg, opts...)
	if err != nil {
		return nil, err
	}
	return priority.NewShedder(g, classes...)
}

// fill acquires for class c until it is shed, and returns the tokens.
func fill(t *testing.T, p *priority.Shedder, c priority.Class) []*adaptive.Token {
	t.Helper()
	var toks []*adaptive.Token
	for {
		tok, err := p.Acquire(context.Background(), c)
		if err != nil {
			if !errors.Is(err, adaptive.ErrLimitExceeded) {
				t.Fatalf("class %d: %v", c, err)
			}
			return toks
		}
		toks = append(toks, tok)
	}
}

func TestThresholds(t *testing.T) {
	p := must(newFixed(20, nil))
	// Best-effort fills 85% of 20 = 17, standard up to 95% = 19, critical
	// the last slot.
	be := fill(t, p, priority.BestEffort)
	std := fill(t, p, priority.Standard)
	crit := fill(t, p, priority.Critical)
	if len(be) != 17 || len(std) != 2 || len(crit) != 1 {
		t.Fatalf("admitted best-effort %d, standard %d, critical %d; want 17, 2, 1", len(be), len(std), len(crit))
	}
	// Freeing two slots lets standard in again, not best-effort.
	be[0].Success()
	be[1].Success()
	if _, err := p.Acquire(context.Background(), priority.BestEffort); !errors.Is(err, adaptive.ErrLimitExceeded) {
		t.Fatalf("best-effort at 18/20: %v", err)
	}
	if _, err := p.Acquire(context.Background(), priority.Standard); err != nil {
		t.Fatalf("standard at 18/20: %v", err)
	}
	st := p.Stats()
	if st[0] != (priority.ClassStats{Name: "best-effort", Admitted: 17, Shed: 2}) ||
		st[1] != (priority.ClassStats{Name: "standard", Admitted: 3, Shed: 1}) ||
		st[2] != (priority.ClassStats{Name: "critical", Admitted: 1, Shed: 1}) {
		t.Fatalf("stats = %+v", st)
	}
	if st := p.Capacity().Stats(); st.InFlight != 19 || st.Limit != 20 {
		t.Fatalf("in flight %d, limit %d", st.InFlight, st.Limit)
	}
}

func TestCustomClasses(t *testing.T) {
	rec := &struct{ routes []string }{}
	obs := floodgate.ObserverFunc(func(e floodgate.Event) {
		if e.Outcome == floodgate.OutcomeShed {
			rec.routes = append(rec.routes, e.Class)
		}
	})
	classes := []priority.ClassConfig{{"crawler", 0.1}, {"prefetch", 0.3}, {"search", 0.6}, {"api", 0.9}, {"payments", 1}}
	p := must(newFixed(10, classes, adaptive.WithObserver(obs)))
	want := []int{1, 2, 3, 3, 1} // by class: crawler 1 (10%), prefetch up to 3, search to 6, api to 9, payments to 10
	for c := range classes {
		if got := len(fill(t, p, priority.Class(c))); got != want[c] {
			t.Fatalf("class %s admitted %d, want %d", classes[c].Name, got, want[c])
		}
	}
	if len(rec.routes) != 5 || rec.routes[0] != "crawler" || rec.routes[4] != "payments" {
		t.Fatalf("shed events by route = %v", rec.routes)
	}
	if c, ok := p.Class("prefetch"); !ok || c != 1 {
		t.Fatalf("Class(prefetch) = %d, %v", c, ok)
	}
	if _, ok := p.Class("nope"); ok {
		t.Fatal("Class(nope) found")
	}
	if _, err := p.Acquire(context.Background(), priority.Class(5)); !errors.Is(err, priority.ErrUnknownClass) {
		t.Fatalf("class 5: %v", err)
	}
	p.AcquireFunc(-1, func(_ *adaptive.Token, err error) {
		if !errors.Is(err, priority.ErrUnknownClass) {
			t.Fatalf("AcquireFunc class -1: %v", err)
		}
	})
	if got := p.Classes(); len(got) != 5 || got[2].Name != "search" {
		t.Fatalf("Classes() = %+v", got)
	}
}

// TestUnknownClassIsLeastImportant: the zero Class, and the Class of a name
// the shedder does not know, are the least important class: a caller that
// ignores Class's ok, or never sets a class, sheds such requests first. It
// used to get Class 0 = critical, admitted up to 100% of the capacity.
func TestUnknownClassIsLeastImportant(t *testing.T) {
	p := must(newFixed(20, nil))
	var unset priority.Class
	if unset != priority.BestEffort {
		t.Fatalf("the zero Class is %d, want BestEffort (%d)", unset, priority.BestEffort)
	}
	for _, name := range []string{"bogus", "", "Critical", "best_effort"} {
		c, ok := p.Class(name)
		if ok || c != priority.BestEffort {
			t.Fatalf("Class(%q) = %d, %v; want BestEffort, false", name, c, ok)
		}
	}
	for name, want := range map[string]priority.Class{"best-effort": priority.BestEffort, "standard": priority.Standard, "critical": priority.Critical} {
		if c, ok := p.Class(name); !ok || c != want {
			t.Fatalf("Class(%q) = %d, %v; want %d, true", name, c, ok, want)
		}
	}
	bogus, _ := p.Class("bogus")
	if n := len(fill(t, p, bogus)); n != 17 {
		t.Fatalf("an unknown class was admitted %d times, want best-effort's 17 of 20", n)
	}
	if n := len(fill(t, p, priority.Critical)); n != 3 {
		t.Fatalf("critical was then admitted %d times, want the 3 slots best-effort may not take", n)
	}
	// With classes of one's own, an unknown name is the first listed.
	q := must(newFixed(10, []priority.ClassConfig{{"batch", 0.5}, {"interactive", 1}}))
	if c, ok := q.Class("interactive "); ok || c != 0 || q.Classes()[c].Name != "batch" {
		t.Fatalf("Class(unknown) = %d, %v; want 0 (batch), false", c, ok)
	}
}

func TestValidation(t *testing.T) {
	for i, classes := range [][]priority.ClassConfig{
		{{"a", 1}, {"a", 0.5}},
		{{"", 1}},
		{{"a", 0}},
		{{"a", 1.5}},
		{{"a", 0.9}, {"b", 0.8}}, // a more important class shedding earlier
	} {
		if _, err := newFixed(10, classes); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("case %d: err = %v", i, err)
		}
	}
	if _, err := priority.NewShedder(nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("nil capacity: %v", err)
	}
	if _, err := newFixed(0, nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Errorf("capacity 0: %v", err)
	}
}

// TestQueueServesHigherClassFirst: with a queue, a freed slot goes to the
// most important waiter, whatever the arrival order.
func TestQueueServesHigherClassFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := must(newFixed(1, nil, adaptive.WithQueue(10, adaptive.FIFO), adaptive.WithClock(floodgate.ClockFunc(time.Now))))
		hold := must(p.Acquire(context.Background(), priority.Critical))
		served := make(chan priority.Class, 3)
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, c := range []priority.Class{priority.BestEffort, priority.Standard, priority.Critical} {
			wg.Go(func() {
				tok, err := p.Acquire(context.Background(), c)
				if err != nil {
					t.Errorf("class %d: %v", c, err)
					return
				}
				served <- c
				time.Sleep(time.Millisecond)
				tok.Success()
			})
			synctest.Wait()
		}
		hold.Success()
		got := []priority.Class{<-served, <-served, <-served}
		if got[0] != priority.Critical || got[1] != priority.Standard || got[2] != priority.BestEffort {
			t.Fatalf("served %v, want critical, standard, best-effort", got)
		}
	})
}

// TestAcquireFunc: the asynchronous form admits at once, or waits and is
// served by a release, or is withdrawn by cancel.
func TestAcquireFunc(t *testing.T) {
	p := must(newFixed(1, nil, adaptive.WithQueue(2, adaptive.FIFO)))
	var first *adaptive.Token
	cancel := p.AcquireFunc(priority.Standard, func(tok *adaptive.Token, err error) { first = tok })
	if first == nil || cancel() {
		t.Fatal("not admitted at once")
	}
	var second *adaptive.Token
	var calls int
	p.AcquireFunc(priority.Critical, func(tok *adaptive.Token, err error) { second, calls = tok, calls+1 })
	withdrawn := p.AcquireFunc(priority.BestEffort, func(*adaptive.Token, error) { t.Fatal("withdrawn request called back") })
	if calls != 0 || p.Capacity().Stats().Queued != 2 {
		t.Fatalf("calls %d, stats %+v", calls, p.Capacity().Stats())
	}
	if !withdrawn() || withdrawn() {
		t.Fatal("cancel of a waiting request must report true once")
	}
	first.Success() // hands the slot to the critical waiter, in this call
	if calls != 1 || second == nil {
		t.Fatalf("after the release: calls %d, token %v", calls, second)
	}
	second.Success()
	st := p.Capacity().Stats()
	if st.InFlight != 0 || st.Queued != 0 || st.Rejected != 1 || st.Admitted != 2 {
		t.Fatalf("stats = %+v", st)
	}
}
