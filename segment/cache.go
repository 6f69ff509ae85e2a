package segment

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// A cache map stores, before each value, the time it expires (Unix
// nanoseconds, 0 = never). Expired entries are invisible at once to every
// reader and are reclaimed lazily: by the eviction hand, by a Put or Delete
// of the same key. When a segment has no room and no overflow tier is left,
// the CLOCK hand sweeps its slots: an entry read since the hand last passed
// (its slot's reference bit) gets a second chance, one that was not is
// evicted, and an expired one is reclaimed first.

// SetClock replaces the clock (Unix nanoseconds) that cache maps compare
// expiry times with: for tests, and for simulations. Set it before use.
func (tb *Table) SetClock(now func() int64) { tb.now = now }

// Now is the table's clock, in Unix nanoseconds.
func (tb *Table) Now() int64 { return tb.now() }

// storedValue is what an entry holds for value: value itself, or in a cache
// map the expiry prefix and value, built in a pooled buffer that the caller
// gives back with releaseValue once the entry is written.
func (tb *Table) storedValue(value []byte, expiry int64) ([]byte, *[]byte) {
	if !tb.layout.Cache {
		return value, nil
	}
	bp, _ := tb.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := binary.LittleEndian.AppendUint64((*bp)[:0], uint64(expiry))
	*bp = append(b, value...)
	return *bp, bp
}

// copyValue copies v into a pooled buffer, given back with releaseValue.
func (tb *Table) copyValue(v []byte) ([]byte, *[]byte) {
	bp, _ := tb.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = append((*bp)[:0], v...)
	return *bp, bp
}

func (tb *Table) releaseValue(bp *[]byte) {
	if bp != nil && cap(*bp) <= 1<<16 {
		tb.bufs.Put(bp)
	}
}

// userValue returns the caller's part of a stored value and whether it is
// visible now (not expired). ok is false when a cache map's value is too
// short to hold its prefix: a torn read, or damage.
func (tb *Table) userValue(stored []byte) (value []byte, live, ok bool) {
	if !tb.layout.Cache {
		return stored, true, true
	}
	exp, ok := expiryOf(stored)
	if !ok {
		return nil, false, false
	}
	if exp != 0 && exp <= tb.now() {
		return nil, false, true
	}
	return stored[metaSize:], true, true
}

// expiryOf reads a cache map's stored value's expiry (0: never); ok is
// false when the value is too short to hold it.
func expiryOf(stored []byte) (exp int64, ok bool) {
	if len(stored) < metaSize {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(stored)), true
}

// reference sets the CLOCK reference bit of the slot at p, read as slot, if
// it is clear: a CAS, so that a slot a writer changed meanwhile is left
// alone (the bit is a hint; losing one costs an entry a second chance).
func (tb *Table) reference(p *uint64, slot uint64) {
	if tb.layout.Cache && slot&refBit == 0 && !tb.readOnly {
		atomic.CompareAndSwapUint64(p, slot, slot|refBit)
	}
}

// evictedCount and expiredCount count the segment's entries evicted for room
// and its expired entries reclaimed, since the map was created.
func (s *Segment) evictedCount() int64 { return int64(atomic.LoadUint64(s.evicted)) }

// expiredCount: see evictedCount.
func (s *Segment) expiredCount() int64 { return int64(atomic.LoadUint64(s.expired)) }

// chainTiers lists the tiers of the segment's chain, first tier first.
func (s *Segment) chainTiers() ([]tier, error) {
	tb := s.tb
	var out []tier
	t := s.index
	for hops := int64(0); hops < tb.Present(); hops++ {
		tv := s.tb.tier(t)
		out = append(out, tv)
		next := tv.next()
		if next == 0 {
			return out, nil
		}
		if _, ok := tb.overflowLink(next); !ok {
			return nil, s.corrupt(t, "tier link out of range")
		}
		t = int64(next - 1)
	}
	return nil, s.corrupt(s.index, "a cycle in the tier chain")
}

// testHookEvictStep, set only by tests, runs before each step of the
// eviction hand.
var testHookEvictStep func()

// evictFor makes room for a run of n chunks in a cache map's segment that
// has none and can link no more tiers, by sweeping the CLOCK hand over the
// chain's slots. moving, if set, is an entry being relocated, which is
// never evicted. Second chances are given on the hand's first lap only:
// readers set reference bits without the lock, and readers on other cores
// touching every entry as fast as the hand clears them would otherwise
// keep it from evicting anything, and the Put would fail with ErrFull,
// which a cache never returns. Caller holds the update lock; this takes
// write.
func (s *Segment) evictFor(w *writer, n int64, moving *location) (tier, int64, error) {
	tb := s.tb
	l := &tb.layout
	chain, err := s.chainTiers()
	if err != nil {
		return tier{}, 0, err
	}
	if err := w.modify("evict"); err != nil {
		return tier{}, 0, err
	}
	now := tb.now()
	total := uint64(len(chain)) * uint64(l.Slots)
	for steps := uint64(0); steps < 3*total; steps++ {
		if testHookEvictStep != nil {
			testHookEvictStep()
		}
		h := atomic.LoadUint64(s.hand) % total
		atomic.StoreUint64(s.hand, h+1)
		tv := &chain[h/uint64(l.Slots)]
		pos := int64(h % uint64(l.Slots))
		slot := atomic.LoadUint64(&tv.slots[pos])
		if slot == 0 {
			continue
		}
		c := slotChunk(slot)
		if moving != nil && tv.index == moving.tier.index && c == moving.chunk {
			continue
		}
		klen, vlen, nch, ok := tb.entryAt(tv, c)
		if !ok {
			return tier{}, 0, s.corrupt(tv.index, "undecodable entry during eviction")
		}
		exp, _ := expiryOf(tb.entryValue(tv, c, klen, vlen))
		expired := exp != 0 && exp <= now
		if !expired && slot&refBit != 0 && steps < total {
			atomic.StoreUint64(&tv.slots[pos], slot&^refBit) // a second chance
			continue
		}
		if !tb.slotsEndAfter(tv, pos) {
			return tier{}, 0, s.corrupt(tv.index, errNoHole)
		}
		tb.removeSlot(tv, pos)
		tv.free(c, nch)
		tv.addEntries(-1)
		atomic.AddUint64(s.entries, ^uint64(0))
		if expired {
			atomic.AddUint64(s.expired, 1)
		} else {
			atomic.AddUint64(s.evicted, 1)
		}
		atomic.StoreUint64(s.hand, h) // a later slot may have shifted into pos
		if int64(tv.entries()) >= l.MaxTierEntries && (moving == nil || tv.index != moving.tier.index) {
			continue
		}
		if c := tv.alloc(n, l.Chunks); c >= 0 {
			return *tv, c, nil
		}
		if l.Chunks-int64(tv.usedChunks()) >= n {
			if err := s.compact(tv); err != nil {
				return tier{}, 0, err
			}
			if c := tv.alloc(n, l.Chunks); c >= 0 {
				return *tv, c, nil
			}
		}
	}
	return tier{}, 0, fmt.Errorf("%w: segment %d: the eviction hand found no room for %d chunks", ErrFull, s.index, n)
}
