package promobserver_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observer/promobserver"
)

// Decisions reported by a limiter show up as two metric families. In a
// program the observer is handed to a middleware (grpclimit.WithObserver,
// httplimit.WithObserver) and reg is the registry /metrics serves.
func Example() {
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		panic(err)
	}
	for _, o := range []floodgate.Outcome{floodgate.OutcomeAllowed, floodgate.OutcomeAllowed, floodgate.OutcomeDenied} {
		obs.Observe(floodgate.Event{Policy: "per-peer", Route: "/search", Outcome: o, Latency: 800 * time.Nanosecond})
	}

	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" {
					labels += " " + l.GetName() + "=" + l.GetValue()
				}
			}
			switch {
			case m.GetCounter() != nil:
				fmt.Printf("%s%s: %v\n", mf.GetName(), labels, m.GetCounter().GetValue())
			case m.GetHistogram() != nil:
				fmt.Printf("%s%s: %d samples\n", mf.GetName(), labels, m.GetHistogram().GetSampleCount())
			}
		}
	}
	// Output:
	// floodgate_decision_duration_seconds outcome=allowed policy=per-peer route=/search source=request: 2 samples
	// floodgate_decision_duration_seconds outcome=denied policy=per-peer route=/search source=request: 1 samples
	// floodgate_decisions_total outcome=allowed policy=per-peer route=/search source=request: 2
	// floodgate_decisions_total outcome=denied policy=per-peer route=/search source=request: 1
}
