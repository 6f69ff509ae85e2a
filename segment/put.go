package segment

import (
	"fmt"
	"sync/atomic"
)

// PutMode says what Put does when the key is present.
type PutMode int

const (
	Replace  PutMode = iota // store the new value
	IfAbsent                // keep the old value
)

func (s *Segment) checkSize(key, value []byte) error {
	var meta int64
	if s.tb.layout.Cache {
		meta = metaSize
	}
	need := entryHeaderSize + meta + int64(len(key)) + int64(len(value))
	if need > s.tb.layout.MaxEntryBytes() {
		return fmt.Errorf("%w: key %d + value %d bytes, a tier holds at most %d", ErrTooLarge, len(key), len(value), s.tb.layout.MaxEntryBytes()-entryHeaderSize-meta)
	}
	return nil
}

// put stores value under key. It reports whether the key was absent
// (inserted). With IfAbsent a present key is left as it is. In a cache map
// the entry never expires.
func (s *Segment) put(hash uint64, key, value []byte, mode PutMode) (inserted bool, err error) {
	return s.PutExpiring(hash, key, value, 0, mode)
}

// PutExpiring is Put with an expiry time (Unix nanoseconds, 0 = never) for
// cache maps; other maps ignore it. A Replace in a plain map first tries
// the optimistic overwrite (tryOverwriteOptimistic), then PutGeneral.
func (s *Segment) PutExpiring(hash uint64, key, value []byte, expiry int64, mode PutMode) (inserted bool, err error) {
	if mode == Replace && !s.tb.geom.cache && !s.tb.queueLocal && s.tryOverwriteOptimistic(hash, key, value) {
		return false, nil
	}
	return s.PutGeneral(hash, key, value, expiry, mode)
}

// PutGeneral is Put's general path (preview, then update lock), for callers
// whose TryOverwriteFastLedger just failed.
func (s *Segment) PutGeneral(hash uint64, key, value []byte, expiry int64, mode PutMode) (inserted bool, err error) {
	// PutGeneral is Put's general path, which every Put that no fast path
	// completes takes: the preview, then the update lock. PutExpiring ends
	// in it; a caller whose TryOverwriteFastLedger of the same key and
	// value just failed calls it directly, since the optimistic
	// overwrite's probe would only repeat the fast path's (an insert, a
	// value that needs more chunks, the lock held).
	if err := s.checkSize(key, value); err != nil {
		return false, err
	}
	stored, buf := s.tb.storedValue(value, expiry)
	defer s.tb.releaseValue(buf)
	s, p, w, err := s.previewThenLock("put", hash, key)
	if err != nil {
		return false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, err := s.findPreviewed(&p, hash, key)
	if err != nil {
		return false, err
	}
	if !found {
		if err := s.insert(&w, hash, key, stored); err != nil {
			return false, err
		}
		s.countLocked(stPuts)
		return true, nil
	}
	live := s.live(&loc)
	if live && mode == IfAbsent {
		return false, nil
	}
	if err := s.replace(&w, hash, &loc, key, stored); err != nil {
		return false, err
	}
	if !live {
		atomic.AddUint64(s.expired, 1) // reclaimed by the write over it
	}
	s.countLocked(stPuts)
	return !live, nil
}

// live reports whether the entry at loc is visible: always, except an
// expired entry of a cache map.
func (s *Segment) live(loc *location) bool {
	_, live, _ := s.tb.userValue(s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen))
	return live
}

// store writes value, with expiry, under key: over the entry at loc if
// found, else as a new entry. The caller holds w's write lock.
func (s *Segment) store(w *writer, hash uint64, loc *location, found bool, key, value []byte, expiry int64) error {
	if err := s.checkSize(key, value); err != nil {
		return err
	}
	stored, buf := s.tb.storedValue(value, expiry)
	defer s.tb.releaseValue(buf)
	if found {
		return s.replace(w, hash, loc, key, stored)
	}
	return s.insert(w, hash, key, stored)
}

// replace changes the value of an entry: in place when it fits the entry's
// chunks (or the free chunks after them), else by moving the entry. In
// place, the undo record saves the entry first; an entry too large for it
// is moved instead if a free run is at hand, which keeps the old copy whole
// until the slot names the new one, and otherwise rewritten in place
// unsaved: for it, a move that had to compact, link an overflow tier or
// evict would cost more than the risk it saves (or fail, ErrFull, where
// the rewrite in place cannot).
func (s *Segment) replace(w *writer, hash uint64, loc *location, key, value []byte) error {
	tb := s.tb
	nch := tb.chunksFor(len(key), len(value))
	tag := uint32(hash >> tb.layout.tagShift)
	fits := nch <= loc.nch
	grows := !fits && loc.chunk+nch <= tb.layout.Chunks && loc.tier.runFree(loc.chunk+loc.nch, nch-loc.nch)
	if fits || grows {
		save := s.undoHolds(entryHeaderSize + loc.klen + int64(len(value)))
		if !save {
			if nt, c, ok := s.allocFree(tag, nch, loc); ok {
				return s.relocate(w, hash, key, value, nt, c, nch)
			}
		}
		run := max(nch, loc.nch) // a run is never shrunk in place
		prefetchTail(tb.entryBytes(&loc.tier, loc.chunk, loc.klen, value))
		h := tb.kindHeader(run, w.kind, key, value)
		if err := w.modify("put"); err != nil {
			return err
		}
		if grows {
			loc.tier.mark(loc.chunk+loc.nch, nch-loc.nch, true)
			atomic.AddUint64(&loc.tier.header[thUsedChunks/8], uint64(nch-loc.nch))
		}
		rec := unsaved
		if save {
			rec = saveOld
		}
		s.rewriteInPlace(tb.layout.entryByte(loc.tier.index, loc.chunk), &h, loc.klen, value, atomic.LoadUint64(s.seq), rec)
		return nil
	}
	if tb.layout.Cache {
		// Room for the new copy beside the old one, which eviction must
		// keep, may not exist however much else is evicted: the search
		// emptied the segment and still failed with ErrFull. A cache map
		// moves an entry only to a free run at hand, and otherwise drops
		// the old copy first: then an insert always finds room.
		if nt, c, ok := s.allocFree(tag, nch, loc); ok {
			return s.relocate(w, hash, key, value, nt, c, nch)
		}
		if _, err := s.dropEntry(w, loc, "put"); err != nil {
			return err
		}
		return s.insert(w, hash, key, value)
	}
	nt, c, err := s.allocHome(w, tag, nch, loc)
	if err != nil {
		return err
	}
	return s.relocate(w, hash, key, value, nt, c, nch)
}

// relocate moves the entry of key to the n chunks at c of tier nt, taken
// for it, with its new value: it writes the new copy where nobody looks
// yet, then swaps it in by one slot store, then frees the old run.
func (s *Segment) relocate(w *writer, hash uint64, key, value []byte, nt tier, c, nch int64) error {
	tb := s.tb
	s.countMove(&tb.Relocations, stRelocations)
	prefetchTail(tb.entryBytes(&nt, c, int64(len(key)), value))
	h := tb.kindHeader(nch, w.kind, key, value)
	if err := w.modify("put"); err != nil {
		nt.free(c, nch)
		return err
	}
	// Compaction during allocRun may have moved our entry: find it again.
	cur, found, ok := s.find(hash, key)
	if !ok || !found {
		return s.corrupt(nt.index, "entry vanished during relocation")
	}
	if nt.index != cur.tier.index && !tb.slotsEndAfter(&cur.tier, cur.pos) {
		nt.free(c, nch)
		return s.corrupt(cur.tier.index, errNoHole)
	}
	testStep()
	tb.writeEntry(&nt, c, &h, key, value)
	testStep()
	tag := uint32(hash >> tb.layout.tagShift)
	if nt.index == cur.tier.index {
		atomic.StoreUint64(&cur.tier.slots[cur.pos], makeSlot(tag, c))
	} else {
		if !tb.placeSlot(&nt, tag, c) {
			return s.corrupt(nt.index, errNoSlot)
		}
		testStep()
		nt.addEntries(1)
		tb.removeSlot(&cur.tier, cur.pos)
		cur.tier.addEntries(-1)
	}
	testStep()
	cur.tier.free(cur.chunk, cur.nch)
	testStep()
	return nil
}

// insert adds a new entry. The entry is written first and published by one
// atomic store of its slot, so readers (locked or optimistic) see it whole
// or not at all; that is why insertion needs only the update lock.
func (s *Segment) insert(w *writer, hash uint64, key, value []byte) error {
	tb := s.tb
	nch := tb.chunksFor(len(key), len(value))
	tag := uint32(hash >> tb.layout.tagShift)
	t, c, err := s.allocHome(w, tag, nch, nil)
	if err != nil {
		return err
	}
	prefetchTail(tb.entryBytes(&t, c, int64(len(key)), value))
	h := tb.kindHeader(nch, w.kind, key, value)
	testStep() // the run taken, perhaps over a deleted entry's bytes
	tb.writeEntry(&t, c, &h, key, value)
	testStep() // written, not yet named
	if !tb.placeSlot(&t, tag, c) {
		return s.corrupt(t.index, errNoSlot)
	}
	t.addEntries(1)
	if int64(atomic.AddUint64(s.entries, 1)) > s.tb.split.at {
		w.crowded = true
	}
	return nil
}
