package shadowprom_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shadow"
	"github.com/floodgate-go/floodgate/shadow/shadowprom"
)

// Ten keys ask 10, 20, ... 100 units in each of three windows of "api"
// (the three heaviest refused); the gauges show the distribution and the
// recommendation.
func Example() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	rec, err := shadow.New(shadow.Config{Clock: floodgate.ClockFunc(func() time.Time { return now }), MinObservation: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	d, err := rec.Track("api", time.Second, 50)
	if err != nil {
		panic(err)
	}
	for w := range 3 {
		now = t0.Add(time.Duration(w) * time.Second)
		for k := range 10 {
			d.Observe(fmt.Sprint("key", k), int64(10*(k+1)), k >= 7)
		}
	}
	now = t0.Add(3 * time.Second)

	reg := prometheus.NewRegistry()
	if err := shadowprom.Register(reg, rec); err != nil {
		panic(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "floodgate_shadow_demand", "floodgate_shadow_limit", "floodgate_shadow_recommended_limit":
			for _, m := range mf.GetMetric() {
				labels := ""
				for _, l := range m.GetLabel() {
					labels += " " + l.GetName() + "=" + l.GetValue()
				}
				fmt.Printf("%s%s: %.0f\n", mf.GetName(), labels, m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// floodgate_shadow_demand policy=api quantile=0.5: 50
	// floodgate_shadow_demand policy=api quantile=0.9: 89
	// floodgate_shadow_demand policy=api quantile=0.95: 100
	// floodgate_shadow_demand policy=api quantile=0.99: 100
	// floodgate_shadow_demand policy=api quantile=1: 100
	// floodgate_shadow_limit policy=api: 50
	// floodgate_shadow_recommended_limit policy=api: 140
}
