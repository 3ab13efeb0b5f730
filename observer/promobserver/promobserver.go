package promobserver

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
)

// labels are the label names of both metrics, in this order.
var labels = []string{"policy", "tier", "route", "class", "outcome", "source"}

// defaultBuckets are the latency histogram's default upper bounds, in
// seconds: 1µs to about 0.26s by factors of 4, which covers an in-memory
// decision (a microsecond or less) and a Redis round trip (a millisecond or
// more) alike.
var defaultBuckets = prometheus.ExponentialBuckets(1e-6, 4, 10)

// Option configures [New]. An option given a value it cannot use makes New
// return an error wrapping [floodgate.ErrInvalidConfig].
// The zero Option is refused.
type Option struct{ apply func(*config) error }

type config struct {
	namespace, subsystem string
	buckets              []float64
	constLabels          prometheus.Labels
}

// WithNamespace sets the metric name prefix; the default is "floodgate".
// An empty namespace drops the prefix.
func WithNamespace(ns string) Option {
	return Option{func(c *config) error { c.namespace = ns; return nil }}
}

// WithSubsystem sets the part of the metric names between the namespace and
// the name ("floodgate_<subsystem>_decisions_total"); the default is none.
func WithSubsystem(s string) Option {
	return Option{func(c *config) error { c.subsystem = s; return nil }}
}

// WithBuckets sets the latency histogram's upper bounds in seconds; they
// must be strictly increasing. The default is 10 exponential buckets from
// 1µs, each 4 times the last (up to about 0.26 s).
func WithBuckets(b []float64) Option {
	return Option{func(c *config) error {
		if len(b) == 0 {
			return fmt.Errorf("%w: promobserver: no buckets", floodgate.ErrInvalidConfig)
		}
		for i := 1; i < len(b); i++ {
			if !(b[i] > b[i-1]) {
				return fmt.Errorf("%w: promobserver: buckets not strictly increasing at %d", floodgate.ErrInvalidConfig, i)
			}
		}
		c.buckets = append([]float64(nil), b...)
		return nil
	}}
}

// WithConstLabels adds labels with fixed values to both metrics (for
// example the service name).
func WithConstLabels(l prometheus.Labels) Option {
	return Option{func(c *config) error {
		c.constLabels = make(prometheus.Labels, len(l))
		for k, v := range l {
			c.constLabels[k] = v
		}
		return nil
	}}
}

// Observer is a [floodgate.Observer] that counts decisions and records their
// latency in Prometheus metrics:
//
//   - floodgate_decisions_total (counter): one per decision.
//   - floodgate_decision_duration_seconds (histogram): how long the limiter
//     took to decide.
//
// Both carry the labels policy, tier, route, class, outcome and source, in
// this order. Keep the limiter, tier and route values to a small fixed set (route classes,
// not raw URLs): every combination is a time series.
//
// Config changes ([floodgate.SourceConfig] events, from a policy set's
// reloads) are not decisions; they go to two metrics of their own, as
// Prometheus reports its own reloads:
//
//   - floodgate_config_reloads_total (counter), label outcome
//     ("config_applied" or "config_refused"): one per change applied or
//     refused;
//   - floodgate_config_last_reload_successful (gauge): 1 when the last
//     change was applied, 0 when it was refused (the running config is then
//     older than the file: alert on it); absent before the first change.
//
// An Observer is safe for concurrent use; Observe does not block.
type Observer struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	reloads   *prometheus.CounterVec
	lastOK    *prometheus.GaugeVec // no labels: absent until the first change

	mu     sync.RWMutex
	series map[labelSet]series
}

type labelSet struct{ policy, tier, route, class, outcome, source string }

type series struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// New returns an Observer whose four metrics (the decisions, their
// duration, the config reloads and the last reload's success) are
// registered with reg. When
// reg already holds metrics of the same names, labels and types (another
// Observer registered them), New shares them instead of failing, so that
// several policies, or several servers in one process, report into the
// same series.
//
// New returns an error when reg is nil, an option is invalid (wrapping
// [floodgate.ErrInvalidConfig]) or reg refuses the metrics.
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: promobserver: nil registerer", floodgate.ErrInvalidConfig)
	}
	c := config{namespace: "floodgate", buckets: defaultBuckets}
	for _, o := range opts {
		if o.apply == nil {
			return nil, fmt.Errorf("%w: promobserver: zero Option", floodgate.ErrInvalidConfig)
		}
		if err := o.apply(&c); err != nil {
			return nil, err
		}
	}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace:   c.namespace,
		Subsystem:   c.subsystem,
		Name:        "decisions_total",
		Help:        "Rate-limiting decisions, by policy, tier, route class, priority class, outcome and source.",
		ConstLabels: c.constLabels,
	}, labels)
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:   c.namespace,
		Subsystem:   c.subsystem,
		Name:        "decision_duration_seconds",
		Help:        "Time the limiter took to decide, by policy, tier, route class, priority class, outcome and source.",
		Buckets:     c.buckets,
		ConstLabels: c.constLabels,
	}, labels)

	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace:   c.namespace,
		Subsystem:   c.subsystem,
		Name:        "config_reloads_total",
		Help:        "Config changes of policy sets, by outcome (config_applied, config_refused).",
		ConstLabels: c.constLabels,
	}, []string{"outcome"})
	lastOK := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace:   c.namespace,
		Subsystem:   c.subsystem,
		Name:        "config_last_reload_successful",
		Help:        "Whether the last config change of a policy set was applied (1) or refused (0).",
		ConstLabels: c.constLabels,
	}, nil)

	var registered []prometheus.Collector
	undo := func(err error) (*Observer, error) {
		for _, c := range registered {
			reg.Unregister(c)
		}
		return nil, err
	}
	decisions, ok, err := register(reg, decisions)
	if err != nil {
		return undo(err)
	}
	if ok {
		registered = append(registered, decisions)
	}
	latency, ok, err = register(reg, latency)
	if err != nil {
		return undo(err)
	}
	if ok {
		registered = append(registered, latency)
	}
	reloads, ok, err = register(reg, reloads)
	if err != nil {
		return undo(err)
	}
	if ok {
		registered = append(registered, reloads)
	}
	lastOK, _, err = register(reg, lastOK)
	if err != nil {
		return undo(err)
	}
	return &Observer{decisions: decisions, latency: latency, reloads: reloads, lastOK: lastOK, series: map[labelSet]series{}}, nil
}

// register registers c with reg, or returns the collector reg already holds
// under the same description. registered reports whether c itself was
// registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (out C, registered bool, err error) {
	err = reg.Register(c)
	if err == nil {
		return c, true, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, false, nil
		}
	}
	return c, false, fmt.Errorf("promobserver: registering metrics: %w", err)
}

// Observe implements [floodgate.Observer].
func (o *Observer) Observe(e floodgate.Event) {
	src := e.Source
	if src == 0 {
		src = floodgate.SourceRequest
	}
	if src == floodgate.SourceConfig {
		o.reloads.WithLabelValues(e.Outcome.String()).Inc()
		if e.Outcome == floodgate.OutcomeConfigApplied {
			o.lastOK.WithLabelValues().Set(1)
		} else {
			o.lastOK.WithLabelValues().Set(0)
		}
		return
	}
	s := o.seriesFor(labelSet{e.Policy, e.Tier, e.Route, e.Class, e.Outcome.String(), src.String()})
	s.count.Inc()
	s.latency.Observe(e.Latency.Seconds())
}

// seriesFor returns the (cached) metrics of one label combination, so that
// the common case is one map lookup instead of two label hashes.
func (o *Observer) seriesFor(k labelSet) series {
	o.mu.RLock()
	s, ok := o.series[k]
	o.mu.RUnlock()
	if ok {
		return s
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.series[k]; ok {
		return s
	}
	s = series{
		count:   o.decisions.WithLabelValues(k.policy, k.tier, k.route, k.class, k.outcome, k.source),
		latency: o.latency.WithLabelValues(k.policy, k.tier, k.route, k.class, k.outcome, k.source),
	}
	o.series[k] = s
	return s
}
