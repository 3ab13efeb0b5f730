package livetest

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/leaky"
	"github.com/floodgate-go/floodgate/store/algo"
	"github.com/floodgate-go/floodgate/window"
)

// Versions returns, per algorithm family (its Spec.Name), one limit
// ("pro") under six sets of parameters: raised, lowered, other shapes, the
// bounds of the ranges.
func Versions(t testing.TB) map[string][]algo.Algorithm {
	t.Helper()
	out := map[string][]algo.Algorithm{}
	add := func(family string, a algo.Algorithm, err error) {
		if err != nil {
			t.Fatal(err)
		}
		out[family] = append(out[family], a)
	}
	for _, c := range []bucket.Config{
		{Rate: floodgate.PerSecond(100), Burst: 100}, {Rate: floodgate.PerSecond(200), Burst: 200},
		{Rate: floodgate.PerSecond(30), Burst: 30}, {Rate: floodgate.Rate{N: 1, Per: 24 * time.Hour}, Burst: 5000},
		{Rate: floodgate.Rate{N: 3, Per: 7 * time.Millisecond}, Burst: 5}, {Rate: floodgate.PerSecond(1_000_000), Burst: 1},
	} {
		c.Name = "pro"
		a, err := c.Algorithm()
		add("token-bucket", a, err)
	}
	for _, c := range []leaky.Config{
		{Rate: floodgate.PerSecond(100), Burst: 99, NoDelay: true}, {Rate: floodgate.PerSecond(200), Burst: 199},
		{Rate: floodgate.PerSecond(30), Burst: 29, Delay: 10}, {Rate: floodgate.PerMinute(1), Burst: 2},
		{Rate: floodgate.PerSecond(2)}, {Rate: floodgate.PerSecond(1_000_000), Burst: 1_000_000, Delay: 400_000},
	} {
		c.Name = "pro"
		a, err := c.Algorithm()
		add("leaky-bucket", a, err)
	}
	for _, c := range []window.Config{
		{Limit: 100, Window: time.Second}, {Limit: 200, Window: time.Second}, {Limit: 30, Window: time.Second},
		{Limit: 100, Window: time.Minute}, {Limit: 7, Window: 300 * time.Millisecond}, {Limit: 1, Window: time.Hour},
	} {
		c.Name = "pro"
		a, err := c.FixedAlgorithm()
		add("fixed-window", a, err)
		a, err = c.SlidingCounterAlgorithm()
		add("sliding-counter", a, err)
		a, err = c.SlidingLogAlgorithm()
		add("sliding-log", a, err)
	}
	return out
}
