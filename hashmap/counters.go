package hashmap

import "sync/atomic"

// Statistics live in the file, so that any process can read them while
// others use the map: counters written under a segment's lock (puts,
// deletes, evictions, lock waits) sit in the segment's line of counters;
// hits and misses, which readers count, sit in each reader's own registry
// slot, so that readers in different processes never write a shared cache
// line. Slot counters are never cleared: a process that takes over a slot
// (of one that closed the map or died) counts on from where it stopped, so
// the sum over the slots is the total since the map was created.

// ledgersPerSlot is the count of a process's ledger words: one per
// segment lock (of every segment a map may split into), and as many fast ledgers after them in files with them
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
	return m.reg.Ledger(slot, int(m.layout.MaxSegments)+i)
}

// countersPerSlot is the size of a process's own counters: a hit and a
// miss count per segment the map was created with, in files with
// statistics. A map that splits counts the lookups of a segment split
// into with the creation segment it descends from (creationSegment), so
// that only the ledgers, which locks need, scale with MaxSegments.
func countersPerSlot(segments int64, stats bool) int {
	if !stats {
		return 0
	}
	return int(2 * segments)
}

// creationSegment is the segment, of those the map was created with, that
// segment i was split from (i itself in a map that does not split): a
// split moves keys only to segments whose low bits are their parent's.
func (m *Map) creationSegment(i int64) int64 { return i & (m.layout.Segments - 1) }

// countLookup counts a lookup of a key hashed to h as a hit or a miss in
// this process's counters. Their line is not requested before the lookup
// any more: a 16-byte pair per segment mostly stays in the CPU's caches,
// and on a CPU that overlaps consecutive lookups the extra instructions
// cost more than the early request saved (see segment.Table.Get).
func (m *Map) countLookup(h uint64, found bool) {
	if c := m.counters; c != nil {
		i := 2 * uint64(m.creationSegment(m.table.SegmentOf(h)))
		if !found {
			i++
		}
		atomic.AddUint64(&c[i], 1)
	}
}

// lookups sums, for segment i, the hits and misses every process counted:
// those of its descendants too for a segment the map was created with,
// none for one split into (they are counted with its creation segment).
func (m *Map) lookups(i int, slots [][]uint64) (hits, misses int64) {
	if int64(i) >= m.layout.Segments {
		return 0, 0
	}
	for _, c := range slots {
		if 2*i+1 < len(c) {
			hits += int64(atomic.LoadUint64(&c[2*i]))
			misses += int64(atomic.LoadUint64(&c[2*i+1]))
		}
	}
	return hits, misses
}

// slotCounters lists the counters of every registry slot ever claimed,
// whatever the slot's state: those past the high-water mark were never
// written.
func (m *Map) slotCounters() [][]uint64 {
	if m.reg == nil || m.reg.Layout().Counters == 0 {
		return nil
	}
	out := make([][]uint64, m.reg.InUse())
	for i := range out {
		out[i] = m.reg.Counters(i)
	}
	return out
}
