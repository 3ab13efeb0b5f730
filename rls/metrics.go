package rls

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
)

// Metrics are the Prometheus counters of a Service, named as the
// reference's statsd names come out of its Prometheus mapping:
//
//	ratelimit_service_rate_limit_total_hits{domain, key}    hits of every limited descriptor
//	ratelimit_service_rate_limit_within_limit{domain, key}  hits admitted (charged: a descriptor within its limit whose request another descriptor refused counts in total_hits only)
//	ratelimit_service_rate_limit_near_limit{domain, key}    hits above the near-limit ratio, up to the limit (not counted for leased limits: a node sees its lease, not the global bucket)
//	ratelimit_service_rate_limit_over_limit{domain, key}    hits beyond the limit
//	ratelimit_service_rate_limit_shadow_mode{domain, key}   over_limit hits of shadow-mode descriptors
//	ratelimit_service_rate_limit_over_limit_with_local_cache{domain, key}  over_limit hits answered by the over-limit cache (WithOverLimitCache)
//	ratelimit_service_rate_limit_refused_by_other{domain, key}  hits of a descriptor within its limits, not charged because another descriptor refused the request
//	ratelimit_service_config_load_success                   configs applied
//	ratelimit_service_config_load_error                     configs refused
//	ratelimit_service_should_rate_limit_error{err_type}     calls the store could not decide (redis_error)
//	floodgate_rls_store_unavailable_total{failure_mode}     calls answered by a failure mode: error, open, closed (the store returned an error, or redisstore's FailOpen/FailClosed answered), local (redisstore's local fallback decided)
//
// Every counted hit (hits_addend above 0) lands in total_hits and in one
// of within_limit, over_limit, refused_by_other, or (the share below the
// limit of a refused hits_addend that crosses it, as the reference counts)
// near_limit: with hits of 1, total_hits = within_limit + over_limit +
// refused_by_other for every descriptor, the parent of a nested
// descriptor included.
//
// key is the descriptor's path in the config without the domain
// ("destination_cluster_image-origin.prod.source_service"), or the request's
// own entries for a detailed_metric descriptor. The reference's mapping
// splits the path into key1 and key2 at dots, which values with dots
// break; key keeps it whole.
type Metrics struct {
	totalHits, withinLimit, nearLimit, overLimit, shadowMode *prometheus.CounterVec
	overLocal, refusedOther                                  *prometheus.CounterVec
	loadSuccess, loadError                                   prometheus.Counter
	callError                                                *prometheus.CounterVec
	unavailable                                              *prometheus.CounterVec
	// counters caches each (domain, key)'s counters: a label lookup per
	// call is the dearest part of counting.
	counters sync.Map // string -> *keyCounters
}

type keyCounters struct {
	total, within, near, over, shadow, overLocal, refusedOther prometheus.Counter
}

func (m *Metrics) of(domain, key string) *keyCounters {
	id := domain + "\x00" + key
	if c, ok := m.counters.Load(id); ok {
		return c.(*keyCounters)
	}
	c := &keyCounters{m.totalHits.WithLabelValues(domain, key), m.withinLimit.WithLabelValues(domain, key),
		m.nearLimit.WithLabelValues(domain, key), m.overLimit.WithLabelValues(domain, key), m.shadowMode.WithLabelValues(domain, key),
		m.overLocal.WithLabelValues(domain, key), m.refusedOther.WithLabelValues(domain, key)}
	got, _ := m.counters.LoadOrStore(id, c)
	return got.(*keyCounters)
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: rls: nil registerer", floodgate.ErrInvalidConfig)
	}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, []string{"domain", "key"})
	}
	m := &Metrics{
		totalHits:    vec("total_hits", "Hits of every limited descriptor."),
		withinLimit:  vec("within_limit", "Hits admitted."),
		nearLimit:    vec("near_limit", "Hits above the near-limit ratio of the limit, up to it."),
		overLimit:    vec("over_limit", "Hits beyond the limit."),
		shadowMode:   vec("shadow_mode", "Hits beyond the limit of shadow-mode descriptors."),
		overLocal:    vec("over_limit_with_local_cache", "Hits beyond the limit answered by the over-limit cache."),
		refusedOther: vec("refused_by_other", "Hits within the limits of a descriptor whose request another descriptor refused (not charged)."),
		loadSuccess:  prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success", Help: "Configs applied."}),
		loadError:    prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error", Help: "Configs refused."}),
		callError: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
			Help: "Calls the store could not decide."}, []string{"err_type"}),
		unavailable: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_rls_store_unavailable_total",
			Help: "Calls answered by a failure mode (error, open, closed, local) because the store could not decide."}, []string{"failure_mode"}),
	}
	for _, c := range []prometheus.Collector{m.totalHits, m.withinLimit, m.nearLimit, m.overLimit, m.shadowMode, m.overLocal, m.refusedOther, m.loadSuccess, m.loadError, m.callError, m.unavailable} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) configLoad(ok bool) {
	if ok {
		m.loadSuccess.Inc()
	} else {
		m.loadError.Inc()
	}
}

func (m *Metrics) storeError() { m.callError.WithLabelValues("redis_error").Inc() }

func (m *Metrics) storeUnavailable(mode string) { m.unavailable.WithLabelValues(mode).Inc() }

// record counts one descriptor's hits as the reference does: with before
// the units used before the request and after = before + hits, hits past
// the limit are over_limit, hits past the near-limit threshold and within
// the limit near_limit. charged: the descriptor's hits were charged when
// within its limits (false: another descriptor refused the request).
func (m *Metrics) record(domain string, d *dstatus, j int, ratio float64, charged bool) {
	key := d.stats
	if len(key) > len(domain) && key[:len(domain)] == domain && key[len(domain)] == '.' {
		key = key[len(domain)+1:]
	}
	c := m.of(domain, key)
	c.total.Add(float64(d.hits))
	l, dec := &d.lm.lims[j], d.checks[j].Decision
	limit := l.limit
	if dec.Limit > 0 {
		limit = dec.Limit
	}
	near := int64(float64(limit) * ratio)
	hits := int64(d.hits)
	switch {
	case !dec.Allowed:
		// pick returns a refusing check when there is one.
		before := limit - dec.Remaining
		c.countOver(before, before+hits, limit, near, hits, d)
	case !charged:
		c.refusedOther.Add(float64(hits)) // refused by another descriptor: nothing charged
	default:
		c.within.Add(float64(hits))
		after := limit - dec.Remaining
		if l.leased == nil && after > near {
			// A leased decision's Remaining is what this node's lease
			// holds, not what the global bucket has: how near the fleet is
			// to the limit is not known there.
			c.near.Add(float64(min(hits, after-max(near, after-hits))))
		}
	}
}

// countOver counts a descriptor over its limit: the hits past the limit
// as over_limit (and shadow_mode, and over_limit_with_local_cache when the
// cache answered), the share between the near-limit threshold and the
// limit as near_limit.
func (c *keyCounters) countOver(before, after, limit, near, hits int64, d *dstatus) {
	o := after - max(limit, before)
	if o <= 0 {
		o = hits
	}
	c.over.Add(float64(o))
	if before < limit {
		c.near.Add(float64(limit - max(near, before)))
	}
	if d.lm.shadow {
		c.shadow.Add(float64(o))
	}
	if d.cached {
		c.overLocal.Add(float64(o))
	}
}
