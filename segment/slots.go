package segment

import "sync/atomic"

// slot packing: the high 32 bits are the tag, the 32 hash bits above the
// segment bits, whose low bits are also the home slot (so backward-shift
// deletion can find an entry's home without its key); the low 32 bits are
// the entry's first chunk + 1, so no full slot is 0.
func makeSlot(tag uint32, chunk int64) uint64 { return uint64(tag)<<32 | uint64(chunk+1) }

func slotTag(s uint64) uint32 { return uint32(s >> 32) }

func slotChunk(s uint64) int64 { return int64(uint32(s)&^refBit) - 1 }

// placeSlot stores a slot at the first empty position from the tag's home.
// Caller checked that the tier has room (entries < MaxTierEntries < Slots),
// so it reports false, having stored nothing, only when damage filled
// every slot while the tier's entry count says otherwise.
func (tb *Table) placeSlot(t *tier, tag uint32, c int64) bool {
	mask := int64(tb.layout.slotMask)
	for pos, n := int64(tag)&mask, len(t.slots); n > 0; pos, n = (pos+1)&mask, n-1 {
		if atomic.LoadUint64(&t.slots[pos]) == 0 {
			atomic.StoreUint64(&t.slots[pos], makeSlot(tag, c))
			return true
		}
	}
	return false
}

// errNoSlot is what a writer reports when placeSlot found no empty slot.
const errNoSlot = "every slot is taken although the tier's entry count leaves room"

// errNoHole is what a remover reports when the slot table has no empty
// slot to end its shift at.
const errNoHole = "every slot is taken, so a removal's shift has no end"

// slotsEndAfter reports whether an empty slot follows pos in t's slot
// table, where removeSlot's shift ends: always, unless damage filled the
// table (the tier's entry count keeps a free slot). It looks along pos's
// probe run only, a slot or two as a rule.
func (tb *Table) slotsEndAfter(t *tier, pos int64) bool {
	mask := int64(tb.layout.slotMask)
	for n, j := int64(0), (pos+1)&mask; n < mask; n, j = n+1, (j+1)&mask {
		if atomic.LoadUint64(&t.slots[j]) == 0 {
			return true
		}
	}
	return false
}

// removeSlot deletes the slot at pos by shifting later slots of the same
// probe run back, so lookups never need tombstones. Caller holds write,
// and has made sure of an empty slot after pos (slotsEndAfter); without
// one the shift stops after a lap of the table.
func (tb *Table) removeSlot(t *tier, pos int64) {
	mask := int64(tb.layout.slotMask)
	hole := pos
	for n, j := int64(0), (pos+1)&mask; n < mask; n, j = n+1, (j+1)&mask {
		s := atomic.LoadUint64(&t.slots[j])
		if s == 0 {
			break
		}
		home := int64(slotTag(s)) & mask
		// The entry at j may fill the hole unless its home lies cyclically
		// in (hole, j]: then it would move before its home and be lost.
		var stays bool
		if hole <= j {
			stays = hole < home && home <= j
		} else {
			stays = hole < home || home <= j
		}
		if stays {
			continue
		}
		atomic.StoreUint64(&t.slots[hole], s)
		hole = j
	}
	atomic.StoreUint64(&t.slots[hole], 0)
}

// renameSlot makes the slot at p name chunk c, keeping its tag and
// reference bit.
func renameSlot(p *uint64, c int64) {
	slot := atomic.LoadUint64(p)
	atomic.StoreUint64(p, makeSlot(slotTag(slot), c)|slot&refBit)
}
