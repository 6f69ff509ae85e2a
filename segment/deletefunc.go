package segment

import (
	"slices"
	"sync/atomic"
)

// DeleteFunc takes the
// segment's update lock, so no other writer in any process changes the
// segment until it is done, and calls fn on each live entry in turn,
// with copies of its key and value (a cache map's value without its
// expiry) in buffers reused for the next entry: valid only while fn
// runs. Readers still read meanwhile. Then it takes the write lock and
// removes the entries fn chose, all of them before any reader sees the
// segment again. fn sees what Get would return; it does not verify
// checksums. Expired entries of a cache map are not passed to fn, and
// stay until reclaimed.
//
// fn runs under the update lock: it must not write to the map (such a
// write to this segment waits for the lock fn's caller holds and fails
// with ErrTimeout, after up to twice LockTimeout). A panic in fn ends
// the call with nothing removed from this segment and its lock
// released.
//
// Each removal is a Delete's (slot first, then its chunks), so a
// process killed in the middle leaves every entry removed or whole,
// and recovery finds the segment consistent. A tier chain that cannot
// be followed, or an entry that does not decode, is an error matching
// ErrCorrupt before anything is removed.

// DeleteFunc removes every live entry of the segment for which fn returns
// true and returns how many it removed. fn runs under the update lock on
// copies valid only during the call, and must not write to the map. A panic
// in fn removes nothing from this segment.
func (s *Segment) DeleteFunc(fn func(key, value []byte) bool) (int64, error) {
	return s.DeleteFuncLarge(fn, nil)
}

// DeleteFuncLarge is DeleteFunc in a file with LargeValues: it passes
// neither parts nor descriptors to fn, but calls large (if not nil) with
// a copy of each key whose value is large, for the caller to decide on
// after the segment's lock is released.
func (s *Segment) DeleteFuncLarge(fn func(key, value []byte) bool, large func(key []byte)) (int64, error) {
	n, _, err := s.DeleteFuncLargeSeen(fn, large)
	return n, err
}

// DeleteFuncLargeSeen is DeleteFuncLarge that also returns the segments
// in use (Table.Segments) as read while it held the segment's lock, when
// no split of this segment can run: with it, a pass over the whole map
// tells the keys a split moved out of the segment after its visit, which
// it meets again in the segment they moved to (0 when the lock was not
// taken).
func (s *Segment) DeleteFuncLargeSeen(fn func(key, value []byte) bool, large func(key []byte)) (int64, int64, error) {
	tb := s.tb
	w, err := s.beginUpdate("delete")
	if err != nil {
		return 0, 0, err
	}
	seen := tb.Segments()
	n, err := s.deleteFuncHeld(w, fn, large)
	return n, seen, err
}

// deleteFuncHeld is DeleteFuncLarge once it holds the update lock (w),
// which it lets go of.
func (s *Segment) deleteFuncHeld(w writer, fn func(key, value []byte) bool, large func(key []byte)) (int64, error) {
	tb := s.tb
	defer func() { w.endOrAbandon(recover()) }()
	chain, err := s.chainTiers()
	if err != nil {
		return 0, err
	}
	now := int64(0)
	if tb.layout.Cache {
		now = tb.now()
	}
	doomed := newDoomedSlots(chain)
	var key, value []byte
	for e := range tb.occupiedSlots(chain) {
		if !e.ok {
			return 0, s.corrupt(e.tier.index, "undecodable entry during DeleteFunc")
		}
		switch tb.kindAt(e.tier, e.chunk) {
		case kindPart:
			continue
		case kindDescriptor:
			if large != nil {
				large(append([]byte(nil), tb.entryKey(e.tier, e.chunk, e.klen)...))
			}
			continue
		}
		v := tb.entryValue(e.tier, e.chunk, e.klen, e.vlen)
		if tb.layout.Cache {
			exp, ok := expiryOf(v)
			if !ok {
				return 0, s.corrupt(e.tier.index, "an entry too short for its expiry during DeleteFunc")
			}
			if exp != 0 && exp <= now {
				continue
			}
			v = v[metaSize:]
		}
		key = append(key[:0], tb.entryKey(e.tier, e.chunk, e.klen)...)
		value = append(value[:0], v...)
		if fn(key, value) {
			doomed.add(e)
		}
	}
	return s.removeDoomed(&w, chain, doomed, "delete")
}

// removeSlots removes from tier t every entry whose slot (without the
// reference bit) doomed names, frees its run of doomed[slot] chunks, and
// returns how many it removed, counted off the tier's and the segment's
// entries as it goes.
// The walk starts after an empty slot, so a backward shift only ever moves
// into pos a slot not yet walked (as rebuild's removeUnkept). Caller holds
// the write lock, with the sequence odd, and has made sure t has an empty
// slot.
func (s *Segment) removeSlots(t *tier, doomed map[uint64]int64) int64 {
	tb := s.tb
	mask := int64(tb.layout.slotMask)
	start := int64(slices.Index(t.slots, 0))
	var removed int64
	for n := int64(1); n <= int64(len(t.slots)); n++ {
		pos := (start + n) & mask
		for {
			slot := atomic.LoadUint64(&t.slots[pos]) &^ refBit
			nch, ok := doomed[slot]
			if slot == 0 || !ok {
				break
			}
			delete(doomed, slot)
			tb.removeSlot(t, pos) // a later slot may now sit at pos: look again
			testStep()
			t.free(slotChunk(slot), nch)
			t.addEntries(-1)
			atomic.AddUint64(s.entries, ^uint64(0))
			removed++
		}
	}
	return removed
}
