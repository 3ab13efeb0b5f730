package window

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/store/memstore"
	"github.com/floodgate-go/floodgate/store/storetest"
)

// versionConfigs are one limit ("api") under several limits and windows.
var versionConfigs = []Config{
	{Name: "api", Limit: 100, Window: time.Second},
	{Name: "api", Limit: 200, Window: time.Second},
	{Name: "api", Limit: 30, Window: time.Second},
	{Name: "api", Limit: 100, Window: time.Minute},
	{Name: "api", Limit: 7, Window: 300 * time.Millisecond},
	{Name: "api", Limit: 1, Window: time.Hour},
}

// versionsOf returns the versions of one algorithm ("fixed", "log",
// "counter").
func versionsOf(t *testing.T, name string) []algo.Algorithm {
	t.Helper()
	var out []algo.Algorithm
	for _, c := range versionConfigs {
		out = append(out, algs(t, c)[name])
	}
	return out
}

func TestConvertRule(t *testing.T) {
	for _, name := range []string{"fixed", "log", "counter"} {
		t.Run(name, func(t *testing.T) { storetest.RunConverter(t, versionsOf(t, name)...) })
	}
}

func TestConvertThroughMemstore(t *testing.T) {
	for _, name := range []string{"fixed", "log", "counter"} {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(time.UnixMicro(t0))
			storetest.RunConversion(t, func(t *testing.T) store.Store {
				s, err := memstore.New(memstore.WithClock(clk), memstore.WithSweepInterval(0))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}, versionsOf(t, name), storetest.WithClock(clk))
		})
	}
}

// In every window algorithm, 50 of 100 left stay 50 after a raise to 200
// and become 30 after a lowering to 30; a drained key stays drained.
func TestConvertKeepsWhatIsLeft(t *testing.T) {
	for _, name := range []string{"fixed", "log", "counter"} {
		t.Run(name, func(t *testing.T) {
			v := versionsOf(t, name)
			p100, p200, p30 := v[0], v[1], v[2]
			now := t0 + 400_000
			var s algo.State
			for range 50 {
				s, _ = p100.Step(s, now, 1)
			}
			peek := func(a algo.Algorithm, s algo.State) int64 {
				_, d := a.Step(s, now, 0)
				return d.Remaining
			}
			if got := peek(p200, p200.(algo.Converter).Convert(s, now, p100)); got != 50 {
				t.Fatalf("50 of 100 left, raised to 200: %d left, want 50", got)
			}
			if got := peek(p30, p30.(algo.Converter).Convert(s, now, p100)); got != 30 {
				t.Fatalf("50 of 100 left, lowered to 30: %d left, want 30", got)
			}
			for range 50 {
				s, _ = p100.Step(s, now, 1)
			}
			for _, to := range []algo.Algorithm{p200, p30, v[3], v[4]} {
				if got := peek(to, to.(algo.Converter).Convert(s, now, p100)); got != 0 {
					t.Fatalf("drained, changed to %v: %d left, want 0", to.Spec().Lua.Params, got)
				}
			}
		})
	}
}
