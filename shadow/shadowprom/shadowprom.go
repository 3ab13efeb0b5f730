package shadowprom

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shadow"
)

// collector is a prometheus.Collector of a Recorder's reports.
type collector struct {
	rec                                          *shadow.Recorder
	demand, burst, limit, recLimit, recBurst     *prometheus.Desc
	keys, observed, window, above, refused, decs *prometheus.Desc
	keyRefused                                   *prometheus.Desc
}

// newCollector returns the collector of rec's reports.
func newCollector(rec *shadow.Recorder) (*collector, error) {
	if rec == nil {
		return nil, fmt.Errorf("%w: shadowprom: nil Recorder", floodgate.ErrInvalidConfig)
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("floodgate_shadow_"+name, help, append([]string{"policy"}, labels...), nil)
	}
	return &collector{
		rec:      rec,
		demand:   d("demand", "Units a key asks for in one window of the policy, by quantile over key-windows (1 = maximum).", "quantile"),
		burst:    d("burst", "Most units a key asks for within an eighth of a window, by quantile over key-windows.", "quantile"),
		limit:    d("limit", "The policy's current limit per window."),
		recLimit: d("recommended_limit", "The recommended limit per window: the demand quantile plus headroom."),
		recBurst: d("recommended_burst", "The recommended burst: the burst quantile plus headroom."),
		keys:     d("keys", "Distinct keys seen (estimated, 3.3% standard error)."),
		observed: d("observed_seconds", "How long the policy has been observed."),
		window:   d("window_seconds", "The length of the policy's windows."),
		above:    d("key_windows_above_recommendation", "Key-windows whose demand exceeds the recommended limit (estimated)."),
		refused:  d("refused_total", "Decisions the current limit refused (denied, or would have in dry run)."),
		decs:     d("decisions_total", "Decisions recorded."),
		keyRefused: d("top_key_refused_total",
			"Decisions the current limit refused, of each heaviest key (top-K) that had any, by the key's hash (never the key).", "key_hash"),
	}, nil
}

// Register registers the collector of rec's reports with reg: one
// prometheus.Collector (wrap reg with prometheus.WrapRegistererWith to add
// constant labels or a prefix).
func Register(reg prometheus.Registerer, rec *shadow.Recorder) error {
	if reg == nil {
		return fmt.Errorf("%w: shadowprom: nil registerer", floodgate.ErrInvalidConfig)
	}
	c, err := newCollector(rec)
	if err != nil {
		return err
	}
	return reg.Register(c)
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.demand, c.burst, c.limit, c.recLimit, c.recBurst, c.keys, c.observed, c.window, c.above, c.refused, c.decs, c.keyRefused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, rep := range c.rec.Reports() {
		p := rep.Policy
		for _, q := range []struct {
			q       float64
			dem, bu float64
		}{{0.5, rep.Demand.P50, rep.Burst.P50}, {0.9, rep.Demand.P90, rep.Burst.P90}, {0.95, rep.Demand.P95, rep.Burst.P95},
			{0.99, rep.Demand.P99, rep.Burst.P99}, {1, rep.Demand.Max, rep.Burst.Max}} {
			qs := strconv.FormatFloat(q.q, 'f', -1, 64)
			g(c.demand, q.dem, p, qs)
			g(c.burst, q.bu, p, qs)
		}
		g(c.limit, float64(rep.Limit), p)
		g(c.keys, rep.Keys, p)
		g(c.observed, rep.Observed.Seconds(), p)
		g(c.window, rep.Window.Seconds(), p)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(rep.Refused), p)
		ch <- prometheus.MustNewConstMetric(c.decs, prometheus.CounterValue, float64(rep.Decisions), p)
		for _, k := range rep.Top {
			if k.Refused > 0 {
				ch <- prometheus.MustNewConstMetric(c.keyRefused, prometheus.CounterValue, float64(k.Refused), p, k.Hash)
			}
		}
		if r := rep.Recommendation; r.OK {
			g(c.recLimit, float64(r.Limit), p)
			g(c.recBurst, float64(r.Burst), p)
			g(c.above, r.KeyWindowsAbove, p)
		}
	}
}
