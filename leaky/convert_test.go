package leaky_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// versions are one limit ("api") under several parameters, every mode.
func versions(t *testing.T) []algo.Algorithm {
	t.Helper()
	var out []algo.Algorithm
	for _, c := range []leaky.Config{
		{Name: "api", Rate: floodgate.PerSecond(100), Burst: 99, NoDelay: true},
		{Name: "api", Rate: floodgate.PerSecond(200), Burst: 199, NoDelay: true},
		{Name: "api", Rate: floodgate.PerSecond(50), Burst: 49},
		{Name: "api", Rate: floodgate.PerSecond(30), Burst: 29, Delay: 10},
		{Name: "api", Rate: floodgate.PerMinute(1), Burst: 3},
		{Name: "api", Rate: floodgate.PerSecond(2)},
	} {
		out = append(out, mustAlg(t, c))
	}
	return out
}

func TestConvertRule(t *testing.T) {
	storetest.RunConverter(t, versions(t)...)
}

func TestConvertThroughMemstore(t *testing.T) {
	clk := storetest.NewClock(time.UnixMicro(t0))
	storetest.RunConversion(t, func(t *testing.T) store.Store { return newMemstore(t, clk) }, versions(t), storetest.WithClock(clk))
}

// What a key has left is kept, capped: 50 of 100 stay 50 after a raise to
// 200 and become 30 after a lowering to 30; a drained key stays drained,
// then leaks at the new rate.
func TestConvertKeepsWhatIsLeft(t *testing.T) {
	v := versions(t)
	p100, p200, p30 := v[0], v[1], v[3]
	now := t0
	var s algo.State
	for range 50 {
		s, _ = p100.Step(s, now, 1)
	}
	peek := func(a algo.Algorithm, s algo.State, at int64) int64 {
		_, d := a.Step(s, at, 0)
		return d.Remaining
	}
	if got := peek(p200, p200.(algo.Converter).Convert(s, now, p100), now); got != 50 {
		t.Fatalf("50 of 100 left, raised to 200: %d left, want 50", got)
	}
	if got := peek(p30, p30.(algo.Converter).Convert(s, now, p100), now); got != 30 {
		t.Fatalf("50 of 100 left, lowered to 30: %d left, want 30", got)
	}
	for range 50 {
		s, _ = p100.Step(s, now, 1)
	}
	if got := peek(p100, s, now); got != 0 {
		t.Fatalf("drained: %d left", got)
	}
	up := p200.(algo.Converter).Convert(s, now, p100)
	if got := peek(p200, up, now); got != 0 {
		t.Fatalf("drained, raised to 200: %d left, want 0", got)
	}
	if got := peek(p200, up, now+5_000); got != 1 {
		t.Fatalf("5 ms after the raise: %d left, want 1 (200/s)", got)
	}
	down := p30.(algo.Converter).Convert(s, now, p100)
	if got := peek(p30, down, now+33_000); got != 0 {
		t.Fatalf("33 ms after the lowering: %d left, want 0 (30/s)", got)
	}
	if got := peek(p30, down, now+34_000); got != 1 {
		t.Fatalf("34 ms after the lowering: %d left, want 1 (30/s)", got)
	}
}
