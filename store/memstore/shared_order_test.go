package memstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/algo"
)

// stampAlg is a one-word algorithm that takes the shared path (it
// implements wordDecider) and writes, on every n > 0, the time it decided
// at (plus stampAhead, so that the state is never full): every decision
// checks that its time is not before that of the state it steps, which
// holds when each state's writer read the clock before any later decision
// read the state.
type stampAlg struct {
	early *atomic.Int64
}

const stampAhead = int64(1) << 40

func (a stampAlg) Spec() algo.Spec { return algo.Spec{Name: "stamp", Words: 1, Capacity: 1} }
func (a stampAlg) Layout() (uint64, int, int, int64) {
	return 0x57a3, 1, 0, 1
}
func (a stampAlg) Step(s algo.State, now, n int64) (algo.State, floodgate.Decision) {
	var d floodgate.Decision
	s.W[0] = a.StepWord(s.W[0], now, n, &d)
	return s, d
}
func (a stampAlg) StepWord(w0, now, n int64, d *floodgate.Decision) int64 {
	next, _, _, _, _ := a.DecideWord(w0, now, n)
	d.Allowed, d.Limit = true, 1
	return next
}
func (a stampAlg) DecideWord(w0, now, n int64) (next, limit, remaining int64, retryAfter, resetAfter time.Duration) {
	if w0 != 0 && now < w0-stampAhead {
		a.early.Add(1)
	}
	if n > 0 {
		return now + stampAhead, 1, 1, 0, 0
	}
	return w0, 1, 1, 0, 0
}

// TestSharedPathTimeNeverGoesBack: on a clock that moves on at every read,
// no decision, with or without the lock, steps a state written at a later
// time than its own (the clock is read after the state, and a write
// commits only if no other write came after that read).
func TestSharedPathTimeNeverGoesBack(t *testing.T) {
	var tick atomic.Int64
	clk := floodgate.ClockFunc(func() time.Time { return time.UnixMicro(1_700_000_000_000_000 + tick.Add(1)) })
	s, err := New(WithClock(clk), WithShards(1), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var early atomic.Int64
	alg := stampAlg{early: &early}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20_000 {
				n := int64(i % 2) // peeks (lock-free) and writes
				if _, err := s.Apply(ctx, fmt.Sprint("k", (g+i)%3), alg, n); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := early.Load(); n > 0 {
		t.Errorf("%d decisions stepped a state written at a later time than theirs", n)
	}
}
