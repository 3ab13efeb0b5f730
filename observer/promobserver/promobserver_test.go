package promobserver

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

func ev(limiter, route string, o floodgate.Outcome, lat time.Duration) floodgate.Event {
	return floodgate.Event{Policy: limiter, Tier: "edge", Route: route, Outcome: o, Latency: lat}
}

func TestCountsAndLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg, WithBuckets([]float64{0.001, 0.01}))
	require.NoError(t, err)

	o.Observe(ev("per-peer", "/svc/A", floodgate.OutcomeAllowed, 500*time.Microsecond))
	o.Observe(ev("per-peer", "/svc/A", floodgate.OutcomeAllowed, 5*time.Millisecond))
	o.Observe(ev("per-peer", "/svc/A", floodgate.OutcomeDenied, 20*time.Millisecond))
	o.Observe(ev("per-token", "/svc/B", floodgate.OutcomeShed, 0))

	want := `
# HELP floodgate_decisions_total Rate-limiting decisions, by policy, tier, route class, priority class, outcome and source.
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{class="",outcome="allowed",policy="per-peer",route="/svc/A",source="request",tier="edge"} 2
floodgate_decisions_total{class="",outcome="denied",policy="per-peer",route="/svc/A",source="request",tier="edge"} 1
floodgate_decisions_total{class="",outcome="shed",policy="per-token",route="/svc/B",source="request",tier="edge"} 1
# HELP floodgate_decision_duration_seconds Time the limiter took to decide, by policy, tier, route class, priority class, outcome and source.
# TYPE floodgate_decision_duration_seconds histogram
floodgate_decision_duration_seconds_bucket{class="",outcome="allowed",policy="per-peer",route="/svc/A",source="request",tier="edge",le="0.001"} 1
floodgate_decision_duration_seconds_bucket{class="",outcome="allowed",policy="per-peer",route="/svc/A",source="request",tier="edge",le="0.01"} 2
floodgate_decision_duration_seconds_bucket{class="",outcome="allowed",policy="per-peer",route="/svc/A",source="request",tier="edge",le="+Inf"} 2
floodgate_decision_duration_seconds_sum{class="",outcome="allowed",policy="per-peer",route="/svc/A",source="request",tier="edge"} 0.0055
floodgate_decision_duration_seconds_count{class="",outcome="allowed",policy="per-peer",route="/svc/A",source="request",tier="edge"} 2
floodgate_decision_duration_seconds_bucket{class="",outcome="denied",policy="per-peer",route="/svc/A",source="request",tier="edge",le="0.001"} 0
floodgate_decision_duration_seconds_bucket{class="",outcome="denied",policy="per-peer",route="/svc/A",source="request",tier="edge",le="0.01"} 0
floodgate_decision_duration_seconds_bucket{class="",outcome="denied",policy="per-peer",route="/svc/A",source="request",tier="edge",le="+Inf"} 1
floodgate_decision_duration_seconds_sum{class="",outcome="denied",policy="per-peer",route="/svc/A",source="request",tier="edge"} 0.02
floodgate_decision_duration_seconds_count{class="",outcome="denied",policy="per-peer",route="/svc/A",source="request",tier="edge"} 1
floodgate_decision_duration_seconds_bucket{class="",outcome="shed",policy="per-token",route="/svc/B",source="request",tier="edge",le="0.001"} 1
floodgate_decision_duration_seconds_bucket{class="",outcome="shed",policy="per-token",route="/svc/B",source="request",tier="edge",le="0.01"} 1
floodgate_decision_duration_seconds_bucket{class="",outcome="shed",policy="per-token",route="/svc/B",source="request",tier="edge",le="+Inf"} 1
floodgate_decision_duration_seconds_sum{class="",outcome="shed",policy="per-token",route="/svc/B",source="request",tier="edge"} 0
floodgate_decision_duration_seconds_count{class="",outcome="shed",policy="per-token",route="/svc/B",source="request",tier="edge"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
	assert.Empty(t, lint(t, reg), "promlint finds nothing")
}

func lint(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	var out []string
	for _, p := range problems {
		out = append(out, p.Metric+": "+p.Text)
	}
	return out
}

func TestEveryOutcomeIsALabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg)
	require.NoError(t, err)
	outcomes := []floodgate.Outcome{
		floodgate.OutcomeAllowed, floodgate.OutcomeDenied, floodgate.OutcomeWouldDeny,
		floodgate.OutcomeErrorOpen, floodgate.OutcomeErrorClosed, floodgate.OutcomeFallback,
		floodgate.OutcomeShed, floodgate.OutcomeDelayed,
	}
	for _, oc := range outcomes {
		o.Observe(ev("l", "r", oc, time.Microsecond))
	}
	for _, oc := range outcomes {
		assert.Equal(t, 1.0, testutil.ToFloat64(o.decisions.WithLabelValues("l", "edge", "r", "", oc.String(), "request")), oc.String())
	}
	assert.Equal(t, len(outcomes), testutil.CollectAndCount(o.decisions))
}

// A store's events carry source="store", so that they never add to the
// request counts.
func TestStoreEventsAreLabelledApart(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg)
	require.NoError(t, err)
	o.Observe(floodgate.Event{Policy: "api", Outcome: floodgate.OutcomeFallback})
	o.Observe(floodgate.Event{Source: floodgate.SourceStore, Policy: "api", Outcome: floodgate.OutcomeFallback})
	o.Observe(floodgate.Event{Policy: "api", Class: "critical", Outcome: floodgate.OutcomeShed})
	assert.Equal(t, 1.0, testutil.ToFloat64(o.decisions.WithLabelValues("api", "", "", "", "fallback", "request")))
	assert.Equal(t, 1.0, testutil.ToFloat64(o.decisions.WithLabelValues("api", "", "", "", "fallback", "store")))
	assert.Equal(t, 1.0, testutil.ToFloat64(o.decisions.WithLabelValues("api", "", "", "critical", "shed", "request")))
}

func TestSharedRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(reg)
	require.NoError(t, err)
	b, err := New(reg)
	require.NoError(t, err, "a second observer on the same registry shares the metrics")
	a.Observe(ev("x", "r", floodgate.OutcomeDenied, 0))
	b.Observe(ev("x", "r", floodgate.OutcomeDenied, 0))
	assert.Equal(t, 2.0, testutil.ToFloat64(a.decisions.WithLabelValues("x", "edge", "r", "", "denied", "request")))

	// A clashing metric of another type is an error, and leaves nothing
	// half-registered behind.
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_decision_duration_seconds", Help: "x"}))
	_, err = New(reg2)
	require.Error(t, err)
	_, err = New(reg2, WithSubsystem("grpc"))
	require.NoError(t, err, "the counter of the failed attempt was unregistered")
}

func TestOptions(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg, WithNamespace("app"), WithSubsystem("limits"),
		WithConstLabels(prometheus.Labels{"service": "search"}))
	require.NoError(t, err)
	o.Observe(ev("l", "r", floodgate.OutcomeAllowed, 0))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		got := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, "search", got["service"], "const label on %s", mf.GetName())
	}
	assert.ElementsMatch(t, []string{"app_limits_decisions_total", "app_limits_decision_duration_seconds"}, names)

	for _, bad := range [][]Option{
		{WithBuckets(nil)}, {WithBuckets([]float64{1, 1})}, {WithBuckets([]float64{2, 1})}, {{}},
	} {
		_, err := New(prometheus.NewRegistry(), bad...)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
	_, err = New(nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

func TestConcurrentObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(reg)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				o.Observe(ev("l", []string{"a", "b"}[(g+i)%2], floodgate.OutcomeAllowed, time.Microsecond))
			}
		})
	}
	wg.Wait()
	total := testutil.ToFloat64(o.decisions.WithLabelValues("l", "edge", "a", "", "allowed", "request")) +
		testutil.ToFloat64(o.decisions.WithLabelValues("l", "edge", "b", "", "allowed", "request"))
	assert.Equal(t, 2000.0, total)
}

func BenchmarkObserve(b *testing.B) {
	o, err := New(prometheus.NewRegistry())
	require.NoError(b, err)
	e := ev("per-peer", "/grpc.health.v1.Health/Check", floodgate.OutcomeAllowed, 700*time.Nanosecond)
	b.ReportAllocs()
	for b.Loop() {
		o.Observe(e)
	}
}
