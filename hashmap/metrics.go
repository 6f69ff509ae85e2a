package hashmap

import "sync/atomic"

// The metrics of a map are of two scopes, which a monitoring system
// scraping several processes that share one map must tell apart:
//
//   - Map-wide figures are read from the file: entries, space, tiers, and
//     the counters every process adds to (puts, hits, lock waits, ...).
//     Every process with the map open reports the same values, so they
//     are aggregated over processes with max (or any one process's), never
//     summed. Their counters count since the file was created: they start
//     again from zero only when the file is created anew.
//   - Per-process figures (PerProcess, labelled pid) are this process's
//     own: the lookups it counted since it opened the map, and how much of
//     the file it has mapped in. Summed over processes they describe the
//     processes running now.

// MetricFamily describes one metric that Metrics reports and
// WritePrometheus writes, so that an exporter to another format (such as
// the Collector of module github.com/sharedmap/sharedmap/prometheus) can
// declare the metrics before it reads them.
type MetricFamily struct {
	Name string // the metric's name, following Prometheus's conventions: sharedmap_ prefix, _total for counters, _bytes for sizes
	Help string // what it measures, and its scope, for a HELP line
	// Counter: the value only goes up (a Prometheus counter); false: a
	// gauge.
	Counter bool
	// PerProcess: the figure is this process's own, labelled with its pid;
	// false: a map-wide figure read from the file, the same in every
	// process that has the map open.
	PerProcess bool
}

// Metric is one family's value for one map.
type Metric struct {
	MetricFamily
	Value int64 // never negative
}

// metricDef is a family and where its value comes from: ok is false when
// the map does not keep the figure (a file from before its counters, a
// process with no registry slot).
type metricDef struct {
	MetricFamily
	value func(*metricSource) (v int64, ok bool)
}

// metricSource is what the families' values are read from: one Stats, so
// that the figures agree with one another, and this process's own lookups.
type metricSource struct {
	st        Stats
	tierSpace int64 // entry space of one tier, in bytes
	own       bool  // this process counts its lookups (a writable Open, a file with counters)
	ownHits   int64
	ownMisses int64
}

// The scope sentences end each family's Help.
const (
	mapWide    = " Map-wide, read from the file: every process with the map open reports the same value; aggregate over processes with max, not sum."
	perProcess = " Per process: this process's own figure, labelled with its pid."
)

// gauge and counter build the definitions of metricDefs.
func gauge(name, help string, perProc bool, v func(*metricSource) (int64, bool)) metricDef {
	return metricDef{MetricFamily{name, help + scopeSentence(perProc), false, perProc}, v}
}

func counter(name, help string, perProc bool, v func(*metricSource) (int64, bool)) metricDef {
	return metricDef{MetricFamily{name, help + scopeSentence(perProc), true, perProc}, v}
}

func scopeSentence(perProc bool) string {
	if perProc {
		return perProcess
	}
	return mapWide
}

// always and counted say whether a figure is kept: always, or in a file
// with counters.
func always(v int64) (int64, bool) { return v, true }

func (s *metricSource) counted(v int64) (int64, bool) { return v, s.st.Counters }

// metricDefs lists every family, in the order Metrics and WritePrometheus
// give them.
var metricDefs = [...]metricDef{
	gauge("sharedmap_stored_entries", "Entries stored in the map. In a cache map it includes expired entries not yet reclaimed: telling them apart reads every entry's expiry, which a scrape does not.", false,
		func(s *metricSource) (int64, bool) { return always(int64(s.st.Entries)) }),
	gauge("sharedmap_capacity_entries", "Entries the map was created for (Options.Entries); it takes up to MaxBloatFactor times as many.", false,
		func(s *metricSource) (int64, bool) { return always(int64(s.st.Capacity)) }),
	gauge("sharedmap_free_entries", "Entries the map can still take before Put fails with ErrFull (a cache map evicts instead): the slots not in use of the linked tiers and of the overflow tiers left, counting those a map that grows may still add up to its MaxSize. An upper bound, since an entry needs room in a tier of its own segment.", false,
		func(s *metricSource) (int64, bool) {
			return always(max(0, int64(s.st.TiersLimit)*int64(s.st.EntriesPerTier)-int64(s.st.Entries)))
		}),
	gauge("sharedmap_used_bytes", "Entry space in use, in bytes.", false,
		func(s *metricSource) (int64, bool) { return always(s.st.BytesUsed) }),
	gauge("sharedmap_free_bytes", "Entry space not in use, in bytes, in the linked tiers and in the overflow tiers left (to MaxSize, in a map that grows): an upper bound of what Puts can still store before ErrFull, since an entry needs room in a tier of its own segment.", false,
		func(s *metricSource) (int64, bool) {
			return always(max(0, int64(s.st.TiersLimit)*s.tierSpace-s.st.BytesUsed))
		}),
	gauge("sharedmap_overflow_tiers", "Overflow tiers taken from the pool and linked to a segment that outgrew its first tier.", false,
		func(s *metricSource) (int64, bool) { return always(int64(s.st.TiersInUse - s.st.Segments)) }),
	gauge("sharedmap_free_overflow_tiers", "Overflow tiers left in the pool, counting those a map that grows may still add up to its MaxSize. At 0, a Put that needs room in a segment whose tiers are full fails with ErrFull (a cache map evicts instead): alert before it.", false,
		func(s *metricSource) (int64, bool) { return always(int64(max(0, s.st.TiersLimit-s.st.TiersInUse))) }),
	counter("sharedmap_hits_total", "Lookups (Get, GetMany keys, Contains) that found the key, by every process that opened the map for writing.", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.Hits) }),
	counter("sharedmap_misses_total", "Lookups that did not find the key, by every process that opened the map for writing.", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.Misses) }),
	counter("sharedmap_puts_total", "Entries stored, by every process.", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.Puts) }),
	counter("sharedmap_deletes_total", "Entries removed, by every process.", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.Deletes) }),
	counter("sharedmap_evictions_total", "Entries evicted to make room (cache maps).", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.Evictions) }),
	counter("sharedmap_expired_total", "Expired entries reclaimed (cache maps).", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.Expired) }),
	counter("sharedmap_lock_waits_total", "Operations that found their segment's lock taken and waited.", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.LockWaits) }),
	counter("sharedmap_lock_timeouts_total", "Segment lock waits that ran out LockTimeout, whether the recovery pass after it let the operation in or not.", false,
		func(s *metricSource) (int64, bool) { return s.counted(s.st.LockTimeouts) }),
	counter("sharedmap_compactions_total", "Tiers compacted to join their free space.", false,
		func(s *metricSource) (int64, bool) { return s.st.Compactions, s.st.MovesCounted }),
	counter("sharedmap_relocations_total", "Values moved because they outgrew their place.", false,
		func(s *metricSource) (int64, bool) { return s.st.Relocations, s.st.MovesCounted }),
	counter("sharedmap_process_hits_total", "Lookups that found the key, by this process since it opened the map for writing; summed over processes, by those running now.", true,
		func(s *metricSource) (int64, bool) { return s.ownHits, s.own }),
	counter("sharedmap_process_misses_total", "Lookups that did not find the key, by this process since it opened the map for writing.", true,
		func(s *metricSource) (int64, bool) { return s.ownMisses, s.own }),
	gauge("sharedmap_process_resident_bytes", "Bytes of the map file this process has mapped in. The pages are shared: a sum over processes is not the memory the map takes.", true,
		func(s *metricSource) (int64, bool) { return always(s.st.Resident) }),
	gauge("sharedmap_process_huge_page_bytes", "Of the bytes this process has mapped in, those mapped with 2 MiB pages.", true,
		func(s *metricSource) (int64, bool) { return always(s.st.HugePageBytes) }),
}

// MetricFamilies lists every metric family that Metrics can report, in
// the order it reports them: the declaration an exporter makes before it
// reads any map. A map reports a subset (see Metrics).
func MetricFamilies() []MetricFamily {
	out := make([]MetricFamily, len(metricDefs))
	for i, d := range metricDefs {
		out[i] = d.MetricFamily
	}
	return out
}

// Metrics reads the map's metrics, the figures WritePrometheus writes: a
// subset of MetricFamilies, in that order, read from one Stats (as costly;
// see Stats). It leaves out what the map does not keep:
// the counters in a file from before them, and this process's lookups
// when it opened the map read-only (such a process does not count them).
// A closed map has none.
func (m *Map) Metrics() []Metric {
	c, err := m.enterAny(false)
	if err != nil {
		return nil
	}
	defer c.Leave()
	src := metricSource{st: m.stats(), tierSpace: m.layout.Chunks * m.layout.ChunkSize}
	src.ownHits, src.ownMisses, src.own = m.ownLookups()
	out := make([]Metric, 0, len(metricDefs))
	for _, d := range metricDefs {
		if v, ok := d.value(&src); ok {
			out = append(out, Metric{d.MetricFamily, max(0, v)})
		}
	}
	return out
}

// ownLookups sums the hits and misses this process counted since it
// joined the map: its registry slot's counters less what they held when
// it joined (a slot's counters go on from its previous process's). ok is
// false when it counts none.
func (m *Map) ownLookups() (hits, misses int64, ok bool) {
	c, base := m.counters, m.baseCounts
	if len(c) == 0 || len(base) != len(c) {
		return 0, 0, false
	}
	for i := 0; i+1 < len(c); i += 2 {
		hits += int64(atomic.LoadUint64(&c[i]) - base[i])
		misses += int64(atomic.LoadUint64(&c[i+1]) - base[i+1])
	}
	return hits, misses, true
}

// joinCounters makes c, the counters of the registry slot this process
// just joined, its own, and notes what they hold already.
func (m *Map) joinCounters(c []uint64) {
	m.counters = c
	m.baseCounts = make([]uint64, len(c))
	for i := range c {
		m.baseCounts[i] = atomic.LoadUint64(&c[i])
	}
}
