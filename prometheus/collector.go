// Package prometheus exports the metrics of sharedmap maps to a
// client_golang registry: a Collector of the figures that
// hashmap.WritePrometheus writes, for programs that already serve
// their metrics with github.com/prometheus/client_golang. It is a module
// of its own, so that the sharedmap module itself depends on no
// Prometheus library; a program without client_golang uses
// hashmap.WritePrometheus instead.
//
// # Metrics
//
// The metrics are those of hashmap.MetricFamilies, each labelled
// map="name" with the name the program gives the map, and the
// per-process ones (sharedmap_process_*) pid="this process's pid" too.
// Counters are Prometheus counters, the other figures gauges.
//
// # Several processes
//
// Every process that has a map open reports the same map-wide figures,
// read from the file: a Prometheus scraping N such processes holds N
// copies of each, one per instance, to aggregate with max, never sum:
//
//	max by (map) (rate(sharedmap_puts_total[5m]))
//	max by (map) (sharedmap_free_overflow_tiers) < 10
//
// The per-process figures add up over processes:
//
//	sum by (map) (rate(sharedmap_process_hits_total[5m]))
//
// Name a map alike in every process, so that its series line up. See
// hashmap.WritePrometheus for more.
package prometheus

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/sharedmap/sharedmap/hashmap"
)

// Collector is a prometheus.Collector of the metrics of a fixed set of
// maps. It reads them afresh at each Collect (hashmap.Map.Metrics, about a
// millisecond a map); a map closed since NewCollector reports nothing. It
// is safe for concurrent use.
type Collector struct {
	names []string       // the maps' names, sorted
	maps  []*hashmap.Map // maps[i] is named names[i]
	descs map[string]*prom.Desc
	kinds map[string]prom.ValueType
	pid   string
}

// NewCollector returns a Collector of the maps in named, each labelled
// map="its key". Register it once, with every map the process exports:
//
//	c, err := prometheus.NewCollector(map[string]*hashmap.Map{"sessions": sessions})
//	if err != nil { ... }
//	registry.MustRegister(c)
//
// A nil map is an error.
func NewCollector(named map[string]*hashmap.Map) (*Collector, error) {
	c := &Collector{
		names: slices.Sorted(maps.Keys(named)),
		descs: make(map[string]*prom.Desc),
		kinds: make(map[string]prom.ValueType),
		pid:   strconv.Itoa(os.Getpid()),
	}
	for _, name := range c.names {
		m := named[name]
		if m == nil {
			return nil, fmt.Errorf("new sharedmap collector: map %q is nil", name)
		}
		c.maps = append(c.maps, m)
	}
	for _, f := range hashmap.MetricFamilies() {
		labels := []string{"map"}
		if f.PerProcess {
			labels = append(labels, "pid")
		}
		c.descs[f.Name] = prom.NewDesc(f.Name, f.Help, labels, nil)
		c.kinds[f.Name] = prom.GaugeValue
		if f.Counter {
			c.kinds[f.Name] = prom.CounterValue
		}
	}
	return c, nil
}

// Describe sends the description of every metric the maps can report
// (hashmap.MetricFamilies), whether or not they report it.
func (c *Collector) Describe(ch chan<- *prom.Desc) {
	for _, f := range hashmap.MetricFamilies() {
		ch <- c.descs[f.Name]
	}
}

// Collect reads every map's metrics and sends them.
func (c *Collector) Collect(ch chan<- prom.Metric) {
	for i, m := range c.maps {
		for _, v := range m.Metrics() {
			desc, ok := c.descs[v.Name]
			if !ok { // not in MetricFamilies: a bug of hashmap's, reported to the registry
				ch <- prom.NewInvalidMetric(prom.NewDesc(v.Name, v.Help, nil, nil), fmt.Errorf("sharedmap metric %s is not among hashmap.MetricFamilies", v.Name))
				continue
			}
			labels := []string{c.names[i]}
			if v.PerProcess {
				labels = append(labels, c.pid)
			}
			metric, err := prom.NewConstMetric(desc, c.kinds[v.Name], float64(v.Value), labels...)
			if err != nil {
				metric = prom.NewInvalidMetric(desc, err)
			}
			ch <- metric
		}
	}
}
