package segment

import (
	"bytes"
	"sync/atomic"
)

// A Clear empties a segment in many stores (every slot, every bitmap word,
// the counts of every tier), and a process may die after any of them.
// Left to rebuild, such a segment would come back with the entries whose
// slots the Clear had not reached yet: neither cleared nor whole. So
// before its first change the Clear writes the segment's clearing word
// (segment header, offset 12: the low 32 bits of the odd sequence it
// changes the segment at), and clears it after its last, before the
// sequence is even again. A recoverer that finds the word naming the odd
// sequence it still finds (finishClear) does the Clear over, whole, from
// the start: every step of it is a store of zero, which a second pass
// repeats harmlessly. So a Clear cut short at any instruction leaves its
// segment cleared once recovered, and one that had not written the word
// leaves it whole.
//
// Tiers linked from the overflow pool stay linked, empty: the pool is a
// counter that hands tiers out and never takes them back (see linkTier),
// so a tier let go could serve no other segment, and the segment that
// keeps it refills without linking again.

// clearingWord is the segment's clearing word.
func (s *Segment) clearingWord() *uint32 {
	l := &s.tb.layout
	return s.tb.region.Uint32(l.SegmentsOff + s.index*segmentHeaderSize + shClearing)
}

// clearingNow reports whether the clearing word names a Clear at the
// segment's present (odd) sequence: one cut short, for recovery to finish.
// Any other value is damage to a reserved word (Check reports it, Repair
// zeroes it) and is not acted on.
func (s *Segment) clearingNow() bool {
	seq := atomic.LoadUint64(s.seq)
	c := atomic.LoadUint32(s.clearingWord())
	return seq&1 != 0 && c == uint32(seq)
}

// Clear removes every entry of the segment under its update then write lock,
// so readers see it whole or empty, and reports how many live entries it
// removed. A chain that cannot be followed is ErrCorrupt, with nothing
// changed.
func (s *Segment) Clear() (removed int64, err error) {
	// Clear removes every entry of the segment and reports how many were
	// live (expired entries of a cache map, and entries that do not
	// decode, go too, uncounted). It takes the update lock as any writer
	// does (ErrTimeout if a live process holds it throughout), then the
	// write lock for the change itself, so every reader sees the segment
	// whole or empty, never part way, in every process. Its overflow tiers
	// stay linked, empty. The removed live entries count as deletes, the
	// expired ones as expired (counters a death in the middle of the Clear
	// may leave short). A tier chain that cannot be followed is an error
	// matching ErrCorrupt, with nothing changed. An empty segment is left
	// untouched: no lock is upgraded and no page written.
	w, err := s.beginUpdate("clear")
	if err != nil {
		return 0, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	chain, err := s.chainTiers()
	if err != nil {
		return 0, err
	}
	return s.clearLocked(&w, chain)
}

// clearLocked is Clear once it holds the update lock and has the chain.
func (s *Segment) clearLocked(w *writer, chain []tier) (removed int64, err error) {
	live, expired, any := s.countForClear(chain)
	if !any {
		return 0, nil
	}
	if err := w.modify("clear"); err != nil {
		return 0, err
	}
	atomic.StoreUint32(s.clearingWord(), uint32(atomic.LoadUint64(s.seq)))
	testStep()
	s.clearTiers(chain)
	s.count(stDeletes, uint64(live))
	if expired > 0 {
		atomic.AddUint64(s.expired, uint64(expired))
	}
	atomic.StoreUint32(s.clearingWord(), 0)
	testStep()
	return live, nil
}

// ClearLarge is Clear for a file with LargeValues (elsewhere it is Clear):
// it removes every entry but the parts of large values, and returns the
// descriptors it removed, with their keys, for the caller to delete their
// parts once the lock is released. A part here may belong to a value a
// large Put has not swapped in yet: taken by a Clear that came after the
// part and before the descriptor, the value would read as damaged once it
// is swapped in. A segment that holds no part (or holds an entry that does
// not decode) is cleared as Clear clears it, parts too. One that holds
// parts is cleared entry by entry under the write lock: readers in every
// process still see it whole or empty, but a process killed in the middle
// leaves each entry removed or whole (as DeleteFunc does), not the segment
// as a whole.
func (s *Segment) ClearLarge() (removed int64, descs []DescriptorEntry, err error) {
	tb := s.tb
	if !tb.layout.LargeValues {
		removed, err = s.Clear()
		return removed, nil, err
	}
	w, err := s.beginUpdate("clear")
	if err != nil {
		return 0, nil, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	chain, err := s.chainTiers()
	if err != nil {
		return 0, nil, err
	}
	// A first walk finds the descriptors, and whether there are parts to
	// spare; a segment without them (the common case) is emptied whole.
	parts, decoded := false, true
	for e := range tb.occupiedSlots(chain) {
		if !e.ok {
			decoded = false
			continue
		}
		switch tb.kindAt(e.tier, e.chunk) {
		case kindPart:
			parts = true
		case kindDescriptor:
			if d, ok := DecodeDescriptor(tb.entryValue(e.tier, e.chunk, e.klen, e.vlen)); ok {
				descs = append(descs, DescriptorEntry{Key: bytes.Clone(tb.entryKey(e.tier, e.chunk, e.klen)), Desc: d})
			}
		}
	}
	if !parts || !decoded {
		if removed, err = s.clearLocked(&w, chain); err != nil {
			return 0, nil, err
		}
		return removed, descs, nil
	}
	// Every entry but the parts goes, as DeleteFunc's chosen ones do.
	doomed := newDoomedSlots(chain)
	for e := range tb.occupiedSlots(chain) {
		if tb.kindAt(e.tier, e.chunk) != kindPart {
			doomed.add(e) // decoded above, under the same lock
		}
	}
	if doomed.n == 0 {
		return 0, nil, nil
	}
	if removed, err = s.removeDoomed(&w, chain, doomed, "clear"); err != nil {
		return 0, nil, err
	}
	return removed, descs, nil
}

// countForClear counts the live and the expired entries of the chain's
// tiers and reports whether there is anything at all to clear: a slot,
// a used chunk, an entry counted. Caller holds the update lock.
func (s *Segment) countForClear(chain []tier) (live, expired int64, any bool) {
	tb := s.tb
	now := int64(0)
	if tb.layout.Cache {
		now = tb.now()
	}
	for i := range chain {
		tv := &chain[i]
		if tv.entries() != 0 || tv.usedChunks() != 0 || atomic.LoadUint64(&tv.header[thMove/8]) != 0 {
			any = true
		}
	}
	for e := range tb.occupiedSlots(chain) {
		any = true
		if !e.ok {
			continue
		}
		if tb.layout.Cache {
			if exp, ok := expiryOf(tb.entryValue(e.tier, e.chunk, e.klen, e.vlen)); ok && exp != 0 && exp <= now {
				expired++
				continue
			}
		}
		live++
	}
	return live, expired, any || atomic.LoadUint64(s.entries) != 0
}

// clearTiers empties every tier of chain and the segment's count of
// entries: slots first (from here on a lookup finds nothing), then the
// allocation bitmaps and the tiers' counts. Every store writes zero, and
// words already zero are not written, so a second pass over a segment
// half cleared (finishClear) repeats nothing that matters and dirties no
// page the first left clean. Caller holds the write lock with the
// sequence odd and the clearing word set.
func (s *Segment) clearTiers(chain []tier) {
	for i := range chain {
		tv := &chain[i]
		half := len(tv.slots) / 2
		for pos := range tv.slots {
			if atomic.LoadUint64(&tv.slots[pos]) != 0 {
				atomic.StoreUint64(&tv.slots[pos], 0)
			}
			if pos == half {
				testStep() // a death with the slot table half cleared
			}
		}
		testStep()
		for w := range tv.bitmap {
			if atomic.LoadUint64(&tv.bitmap[w]) != 0 {
				atomic.StoreUint64(&tv.bitmap[w], 0)
			}
		}
		tv.clearMove()
		atomic.StoreUint64(&tv.header[thEntries/8], 0)
		atomic.StoreUint64(&tv.header[thUsedChunks/8], 0)
		tv.setLowestFree(0)
		testStep()
	}
	atomic.StoreUint64(s.entries, 0)
	if s.tb.layout.Cache || s.tb.layout.LargeValues {
		atomic.StoreUint64(s.hand, 0) // the count of parts, in a store map
	}
}

// finishClear completes a Clear cut short (clearingNow): it clears every
// tier of the segment's chain, as chain finds it, and the clearing word,
// and reports whether it did. Caller holds the write lock taken from a
// dead writer (or for a rebuild), with the sequence still the odd one the
// Clear changed the segment at.
func (s *Segment) finishClear(rep *Recovered) bool {
	if !s.clearingNow() {
		return false
	}
	var chain []tier
	for _, t := range s.chain(rep) {
		chain = append(chain, s.tb.tier(t))
	}
	s.clearTiers(chain)
	atomic.StoreUint32(s.clearingWord(), 0)
	testStep()
	return true
}
