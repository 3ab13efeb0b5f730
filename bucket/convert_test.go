package bucket_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// versions are one limit ("pro") under several parameters.
func versions(t *testing.T) []algo.Algorithm {
	t.Helper()
	var out []algo.Algorithm
	for _, c := range []bucket.Config{
		{Name: "pro", Rate: floodgate.PerSecond(100), Burst: 100},
		{Name: "pro", Rate: floodgate.PerSecond(200), Burst: 200},
		{Name: "pro", Rate: floodgate.PerSecond(50), Burst: 50},
		{Name: "pro", Rate: floodgate.PerSecond(30), Burst: 30},
		{Name: "pro", Rate: floodgate.PerSecond(1), Burst: 500},
		{Name: "pro", Rate: floodgate.Rate{N: 7, Per: 3 * time.Millisecond}, Burst: 3},
	} {
		out = append(out, mustKeyedAlg(t, c))
	}
	return out
}

func TestConvertRule(t *testing.T) {
	storetest.RunConverter(t, versions(t)...)
}

func TestConvertThroughMemstore(t *testing.T) {
	clk := storetest.NewClock(time.UnixMicro(keyedEpoch))
	storetest.RunConversion(t, func(t *testing.T) store.Store {
		s, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, versions(t), storetest.WithClock(clk))
}

// remaining is what a peek of alg reports on s at now.
func remaining(alg algo.Algorithm, s algo.State, now int64) int64 {
	_, d := alg.Step(s, now, 0)
	return d.Remaining
}

// take steps alg n times with cost 1 at now.
func takeN(alg algo.Algorithm, s algo.State, now int64, n int) algo.State {
	for range n {
		s, _ = alg.Step(s, now, 1)
	}
	return s
}

// The cases: 50 left of 100 keep 50 after a raise to 200 and are 30
// after a lowering to 30; a drained key stays drained either way, then
// refills at the new rate.
func TestConvertKeepsTokensNotFillRatio(t *testing.T) {
	v := versions(t)
	p100, p200, p30 := v[0], v[1], v[3]
	now := keyedEpoch
	half := takeN(p100, algo.State{}, now, 50)
	if got := remaining(p200, p200.(algo.Converter).Convert(half, now, p100), now); got != 50 {
		t.Fatalf("50 of 100 left, raised to 200: %d left, want 50", got)
	}
	if got := remaining(p30, p30.(algo.Converter).Convert(half, now, p100), now); got != 30 {
		t.Fatalf("50 of 100 left, lowered to 30: %d left, want 30", got)
	}
	drained := takeN(p100, algo.State{}, now, 100)
	up := p200.(algo.Converter).Convert(drained, now, p100)
	if got := remaining(p200, up, now); got != 0 {
		t.Fatalf("drained, raised to 200: %d left, want 0", got)
	}
	// From the change on, 200/s: one token per 5 ms, and no more.
	if got := remaining(p200, up, now+5_000); got != 1 {
		t.Fatalf("5 ms after the raise: %d left, want 1", got)
	}
	if got := remaining(p200, up, now+500_000); got != 100 {
		t.Fatalf("500 ms after the raise: %d left, want 100", got)
	}
	down := p30.(algo.Converter).Convert(drained, now, p100)
	if got := remaining(p30, down, now); got != 0 {
		t.Fatalf("drained, lowered to 30: %d left, want 0", got)
	}
	// The token in progress keeps its time (10 ms at 100/s), the next come
	// at 30/s.
	if got := remaining(p30, down, now+10_000); got != 1 {
		t.Fatalf("10 ms after the lowering: %d left, want 1", got)
	}
	if got := remaining(p30, down, now+10_000+33_334); got != 2 {
		t.Fatalf("one interval later: %d left, want 2", got)
	}
}

// Reservations queued beyond the burst are a debt: it stays one, in whole
// tokens at the new interval.
func TestConvertKeepsDebt(t *testing.T) {
	v := versions(t)
	p100, p200, p50 := v[0], v[1], v[2]
	now := keyedEpoch
	s := takeN(p100, algo.State{}, now, 100)
	s, d := p100.(algo.Reservable).Reserve(int64(time.Minute/time.Microsecond)).Step(s, now, 20)
	if !d.Allowed || d.Delay != 200*time.Millisecond {
		t.Fatalf("reservation of 20 behind a drained burst: %+v", d)
	}
	for _, tc := range []struct {
		to   algo.Algorithm
		wait time.Duration // until one token is there again
	}{{p200, 20*5*time.Millisecond + 5*time.Millisecond}, {p50, 20*20*time.Millisecond + 10*time.Millisecond}} {
		c := tc.to.(algo.Converter).Convert(s, now, p100)
		_, d := tc.to.Step(c, now, 1)
		if d.Allowed || d.RetryAfter != tc.wait {
			t.Fatalf("%v: a take after the change: %+v, want denied for %v", tc.to.Spec().Lua.Params, d, tc.wait)
		}
	}
}
