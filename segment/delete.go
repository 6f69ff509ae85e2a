package segment

import "sync/atomic"

// Delete removes key and reports whether it was present.
func (s *Segment) Delete(hash uint64, key []byte) (bool, error) {
	s, p, w, err := s.previewThenLock("delete", hash, key)
	if err != nil {
		return false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, err := s.findPreviewed(&p, hash, key)
	if err != nil {
		return false, err
	}
	if !found {
		return false, nil
	}
	return s.removeAt(&w, &loc)
}

// removeAt removes the entry at loc, found under w's update lock, and
// reports whether it was live (not expired).
func (s *Segment) removeAt(w *writer, loc *location) (bool, error) {
	live, err := s.dropEntry(w, loc, "delete")
	if err != nil {
		return false, err
	}
	if !live {
		atomic.AddUint64(s.expired, 1) // it was already gone to readers
	} else {
		s.count(stDeletes, 1)
	}
	return live, nil
}

// dropEntry removes the entry at loc, found under w's update lock, from
// its slot table, chunks and counts, and reports whether it was live (not
// expired); the caller counts the removal as what it is.
func (s *Segment) dropEntry(w *writer, loc *location, op string) (bool, error) {
	if !s.tb.slotsEndAfter(&loc.tier, loc.pos) {
		return false, s.corrupt(loc.tier.index, errNoHole)
	}
	if err := w.modify(op); err != nil {
		return false, err
	}
	live := s.live(loc)
	s.tb.removeSlot(&loc.tier, loc.pos)
	loc.tier.free(loc.chunk, loc.nch)
	loc.tier.addEntries(-1)
	atomic.AddUint64(s.entries, ^uint64(0))
	return live, nil
}
