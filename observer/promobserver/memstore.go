package promobserver

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memstore"
)

// memStoreCollector exports one memory store's Stats at each scrape.
type memStoreCollector struct {
	s                    *memstore.Store
	keys, max, evictions *prometheus.Desc
}

// RegisterMemStore registers with reg the key counts of the memory store
// s, labelled store=name (a fixed name of your choosing, e.g. "local"):
//
//   - floodgate_memstore_keys (gauge): keys held now;
//   - floodgate_memstore_max_keys (gauge): the bound on them
//     ([memstore.WithMaxKeys]);
//   - floodgate_memstore_evictions_total (counter): keys dropped at the
//     bound before their state was full, which restarted them from full
//     capacity (see [memstore.Stats]).
//
// Each scrape reads [memstore.Store.Stats], which locks each shard in turn.
// Several stores register under different names. RegisterMemStore returns
// an error when reg or s is nil (wrapping [floodgate.ErrInvalidConfig]) or
// reg refuses the metrics (a store of the same name already registered).
func RegisterMemStore(reg prometheus.Registerer, name string, s *memstore.Store) error {
	if reg == nil || s == nil {
		return fmt.Errorf("%w: promobserver: nil registerer or store", floodgate.ErrInvalidConfig)
	}
	l := prometheus.Labels{"store": name}
	c := &memStoreCollector{
		s:         s,
		keys:      prometheus.NewDesc("floodgate_memstore_keys", "Keys a memory store holds.", nil, l),
		max:       prometheus.NewDesc("floodgate_memstore_max_keys", "The bound on the keys of a memory store.", nil, l),
		evictions: prometheus.NewDesc("floodgate_memstore_evictions_total", "Keys a memory store dropped at its bound before their state was full (they restarted from full capacity).", nil, l),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("promobserver: registering memory store %q: %w", name, err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *memStoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.max
	ch <- c.evictions
}

// Collect implements prometheus.Collector.
func (c *memStoreCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(st.MaxKeys))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
}
