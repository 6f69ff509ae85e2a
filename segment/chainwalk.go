package segment

import (
	"iter"
	"slices"
	"sync/atomic"
)

// slotEntry is an occupied slot of a tier in a chain, with what its entry
// header says. Clear, DeleteFunc and a split each walk a chain this way
// and then act on what they chose.
type slotEntry struct {
	i     int    // the tier's place in the chain
	tier  *tier  // the tier, &chain[i]
	slot  uint64 // the slot, without the reference bit readers set
	chunk int64  // the entry's first chunk

	// The entry's key and value lengths and its run of chunks, when it
	// decodes (ok); zero when it does not.
	klen, vlen, nch int64
	ok              bool
}

// occupiedSlots yields every occupied slot of the chain's tiers, tier by
// tier and position by position, decoded as entryAt decodes it. Caller
// holds a lock that keeps the chain and its entries from changing (the
// reference bit aside).
func (tb *Table) occupiedSlots(chain []tier) iter.Seq[slotEntry] {
	return func(yield func(slotEntry) bool) {
		for i := range chain {
			tv := &chain[i]
			for pos := range tv.slots {
				slot := atomic.LoadUint64(&tv.slots[pos]) &^ refBit
				if slot == 0 {
					continue
				}
				e := slotEntry{i: i, tier: tv, slot: slot, chunk: slotChunk(slot)}
				e.klen, e.vlen, e.nch, e.ok = tb.entryAt(tv, e.chunk)
				if !yield(e) {
					return
				}
			}
		}
	}
}

// doomedSlots collects, per tier of a chain, the slots (without the
// reference bit) of the entries to remove and their runs of chunks, for
// removeDoomed.
type doomedSlots struct {
	byTier []map[uint64]int64
	n      int
}

// newDoomedSlots is an empty doomedSlots for chain.
func newDoomedSlots(chain []tier) doomedSlots {
	return doomedSlots{byTier: make([]map[uint64]int64, len(chain))}
}

// add dooms the entry e names.
func (d *doomedSlots) add(e slotEntry) {
	if d.byTier[e.i] == nil {
		d.byTier[e.i] = make(map[uint64]int64)
	}
	d.byTier[e.i][e.slot] = e.nch
	d.n++
}

// removeDoomed removes every doomed entry of the chain at once, under the
// write lock it takes from the update lock w holds (op names the change
// for the undo record), and counts them as deletes. It changes nothing
// and reports the tier as damaged when a tier with doomed entries has no
// empty slot, since removeSlots walks from one.
func (s *Segment) removeDoomed(w *writer, chain []tier, d doomedSlots, op string) (int64, error) {
	if d.n == 0 {
		return 0, nil
	}
	for i := range chain {
		if d.byTier[i] != nil && !slices.Contains(chain[i].slots, 0) {
			return 0, s.corrupt(chain[i].index, errNoHole)
		}
	}
	if err := w.modify(op); err != nil {
		return 0, err
	}
	var removed int64
	for i := range chain {
		if d.byTier[i] != nil {
			removed += s.removeSlots(&chain[i], d.byTier[i])
		}
	}
	s.count(stDeletes, uint64(removed))
	return removed, nil
}
