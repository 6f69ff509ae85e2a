package hashmap

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
)

// Statistics live in the file, so that any process can read them while
// others use the map: counters written under a segment's lock (puts,
// deletes, evictions, lock waits) sit in the segment's line of counters;
// hits and misses, which readers count, sit in each reader's own registry
// slot, so that readers in different processes never write a shared cache
// line. Slot counters are never cleared: a process that takes over a slot
// (of one that closed the map or died) counts on from where it stopped, so
// the sum over the slots is the total since the map was created.

// ledgersPerSlot is the count of a process's ledger words: one per
// segment lock, and as many fast ledgers after them in files with them
// (segment.Layout.FastLedgers).
func ledgersPerSlot(segments int64, fast bool) int {
	if fast {
		return int(2 * segments)
	}
	return int(segments)
}

// fastLedger is the fast ledger of segment i in registry slot slot: after
// the slot's ledgers, in files with fast ledgers.
func (m *Map) fastLedger(slot, i int) *uint64 {
	return m.reg.Ledger(slot, int(m.layout.Segments)+i)
}

// countersPerSlot is the size of a process's own counters: a hit and a
// miss count per segment, in files with statistics.
func countersPerSlot(segments int64, stats bool) int {
	if !stats {
		return 0
	}
	return int(2 * segments)
}

// countLookup counts a lookup of a key hashed to h as a hit or a miss in
// this process's counters. Their line is not requested before the lookup
// any more: a 16-byte pair per segment mostly stays in the CPU's caches,
// and on a CPU that overlaps consecutive lookups the extra instructions
// cost more than the early request saved (see segment.Table.Get).
func (m *Map) countLookup(h uint64, found bool) {
	if c := m.counters; c != nil {
		i := 2 * (h & m.segMask)
		if !found {
			i++
		}
		atomic.AddUint64(&c[i], 1)
	}
}

// lookups sums, for segment i, the hits and misses every process counted.
func (m *Map) lookups(i int, slots [][]uint64) (hits, misses int64) {
	for _, c := range slots {
		if 2*i+1 < len(c) {
			hits += int64(atomic.LoadUint64(&c[2*i]))
			misses += int64(atomic.LoadUint64(&c[2*i+1]))
		}
	}
	return hits, misses
}

// slotCounters lists every registry slot's counters, whatever the slot's
// state.
func (m *Map) slotCounters() [][]uint64 {
	if m.reg == nil || m.reg.Layout().Counters == 0 {
		return nil
	}
	out := make([][]uint64, m.reg.Layout().Slots)
	for i := range out {
		out[i] = m.reg.Counters(i)
	}
	return out
}

// WritePrometheus writes the map's counters and sizes in the Prometheus
// text exposition format, labelled map="name", for a /metrics handler of
// the embedding program. It needs no Prometheus library.
func (m *Map) WritePrometheus(w io.Writer, name string) error {
	st := m.Stats()
	label := `{map="` + promLabelValue(name) + `"}`
	var b []byte
	metric := func(kind, metricName, help string, v float64) {
		b = fmt.Appendf(b, "# HELP sharedmap_%s %s\n# TYPE sharedmap_%s %s\nsharedmap_%s%s %g\n",
			metricName, help, metricName, kind, metricName, label, v)
	}
	metric("gauge", "entries", "Entries stored now.", float64(st.Entries))
	metric("gauge", "capacity", "Entries the map was sized for.", float64(st.Capacity))
	metric("gauge", "tiers_in_use", "First tiers and linked overflow tiers.", float64(st.TiersInUse))
	metric("gauge", "bytes_used", "Entry space in use, in bytes.", float64(st.BytesUsed))
	metric("counter", "hits_total", "Lookups that found the key (processes with the map open for writing).", float64(st.Hits))
	metric("counter", "misses_total", "Lookups that did not find the key.", float64(st.Misses))
	metric("counter", "puts_total", "Entries stored.", float64(st.Puts))
	metric("counter", "deletes_total", "Entries removed.", float64(st.Deletes))
	metric("counter", "evictions_total", "Entries evicted to make room (cache maps).", float64(st.Evictions))
	metric("counter", "expired_total", "Expired entries reclaimed (cache maps).", float64(st.Expired))
	metric("counter", "lock_waits_total", "Operations that waited for a segment lock.", float64(st.LockWaits))
	metric("counter", "lock_timeouts_total", "Segment lock waits that ran out LockTimeout, recovered after or not.", float64(st.LockTimeouts))
	metric("gauge", "resident_bytes", "Bytes of the map file this process has mapped in.", float64(st.Resident))
	metric("gauge", "huge_page_bytes", "Of the resident bytes, those mapped with 2 MiB pages.", float64(st.HugePageBytes))
	_, err := w.Write(b)
	return err
}

// promLabelValue is name as a label value of the Prometheus text format:
// UTF-8 (other bytes become U+FFFD) with only backslash, double quote and
// newline escaped, which is all that format knows (Go's %q would write
// escapes such as \t and \x00 that Prometheus rejects).
func promLabelValue(name string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(strings.ToValidUTF8(name, "\uFFFD"))
}
