package segment

import (
	"sync/atomic"

	"github.com/sharedmap/sharedmap/offheap"
)

// An entry rewritten in place (a Put whose value fits the entry's run) is
// torn if its writer dies in the middle of the copy: its checksum fails,
// and recovery, which cannot tell the old value from the new, used to drop
// the key. So under the write lock the writer first puts in the segment's
// undo record a copy of the bytes that belong where it is about to write,
// then names the place, with the sequence odd, and clears the record before
// the sequence is even again. A recoverer that finds the record naming the
// odd sequence it still finds copies the bytes to that place: a whole
// entry, whatever the writer had stored when it died. Put's general path
// (replace) saves the bytes it overwrites (saveUndo): the key keeps its old
// value, as if the Put had not begun. Put's fast path copies in the bytes
// it will write (stageRewrite): the key gets its new value, as if the Put
// had finished; it does so before it knows where the entry is, while the
// entry's lines are on their way, where saving the old bytes has to wait
// for them. The record is the segment's own, so the copy goes to lines the
// segment's writers reuse. Entries too large for it are moved instead
// where a free run is at hand, which leaves the old copy whole until the
// slot is swapped, and otherwise rewritten unsaved (see replace).

// A record says what rewriteInPlace does with the undo record.
type record int

const (
	unsaved record = iota // nothing: the file has no records, or the entry is too large for one
	saveOld               // save the bytes it overwrites first (saveUndo)
	staged                // name the place of the bytes stageRewrite put in (nameStaged)
)

// undoHolds reports whether the undo record can save n bytes, so that an
// entry whose rewrite stores n bytes may be rewritten in place. Files
// without undo records: always.
func (s *Segment) undoHolds(n int64) bool { return n <= s.tb.undoCap }

// prefetchUndo requests, for writing, the lines of the undo record that a
// rewrite of n bytes stores into, so that they arrive while the writer
// looks for its entry: the records are spread over the whole table, and
// between two writes to one segment the CPU's caches have mostly let its
// record go, and a Put that waited for them at its store was slower.
func (s *Segment) prefetchUndo(n int64) {
	if s.undoRec != nil && n <= s.tb.undoCap {
		offheap.PrefetchForWrite(s.undoRec[:undoHeaderSize+n])
	}
}

// saveUndo saves the n bytes at byte off of the tiers area (the entry,
// from its header to the end of the new value) and then names them, with
// the segment's sequence seq (odd: the caller holds the write lock and is
// modifying). n must be one undoHolds allowed.
func (s *Segment) saveUndo(off, n int64, seq uint64) {
	if s.undoHead == nil {
		return
	}
	if atomic.LoadUint64(&s.undoHead[udAt]) != 0 {
		// Damage (writers clear it): with it, a death before the store
		// below would leave this rewrite's bytes named for that place.
		offheap.StoreExclusive(&s.undoHead[udAt], 0)
	}
	b, off := s.tb.bytesAt(off)
	copy(s.undoData[:n], b[off:off+n])
	s.undoHead[udLen] = uint64(n)
	s.undoHead[udSeq] = seq
	testStep()
	// The name last: a record is complete once it names where it goes.
	offheap.StoreExclusive(&s.undoHead[udAt], uint64(off)+1)
	testStep()
}

// stageRewrite puts in the undo record the bytes a rewrite in place of
// key's entry with header h and value stores (header, key and value, as
// saveUndo would save them) for the odd sequence seq, but names no place:
// the record stays inactive until nameStaged. It does nothing in files
// without records, or if the entry is too large for the record (the
// caller then does not rewrite in place: undoHolds). Caller holds the
// write lock, the sequence even.
func (s *Segment) stageRewrite(h *entryHead, key, value []byte, seq uint64) {
	n := entryHeaderSize + len(key) + len(value)
	if s.undoHead == nil || int64(n) > s.tb.undoCap {
		return
	}
	if atomic.LoadUint64(&s.undoHead[udAt]) != 0 {
		// Damage, as in saveUndo.
		offheap.StoreExclusive(&s.undoHead[udAt], 0)
	}
	d := s.undoData[:n]
	h.store(d)
	copy(d[entryHeaderSize:], key)
	copy(d[entryHeaderSize+len(key):], value)
	s.undoHead[udLen] = uint64(n)
	s.undoHead[udSeq] = seq
	testStep()
}

// restageHeader replaces the header stageRewrite put in the record, for a
// caller that found the entry's run to be of another length than it
// guessed.
func (s *Segment) restageHeader(h *entryHead) {
	if s.undoHead != nil {
		h.store(s.undoData[:entryHeaderSize])
	}
}

// nameStaged activates the record stageRewrite filled: from here a death
// leaves the staged bytes to be copied to byte off of the tiers area. The
// caller has made the sequence the odd one it staged them for.
func (s *Segment) nameStaged(off int64) {
	if s.undoHead != nil {
		offheap.StoreExclusive(&s.undoHead[udAt], uint64(off)+1)
		testStep()
	}
}

// clearUndo ends the rewrite saveUndo or nameStaged began, before the
// sequence is even.
func (s *Segment) clearUndo() {
	if s.undoHead != nil {
		offheap.StoreExclusive(&s.undoHead[udAt], 0)
	}
}

// restoreUndo puts back the bytes of an in-place rewrite that its writer
// did not finish: the record names them and the segment's sequence is the
// odd one the rewrite was made at. It reports whether it did, and clears
// the record in every case (a record that does not match the sequence, or
// would write outside the segment's entry space, is damage, and dropping
// it loses nothing). Caller holds the write lock taken from a dead writer
// (or for a rebuild), before changing the sequence.
func (s *Segment) restoreUndo() bool {
	if s.undoHead == nil {
		return false
	}
	at := atomic.LoadUint64(&s.undoHead[udAt])
	if at == 0 {
		return false
	}
	defer atomic.StoreUint64(&s.undoHead[udAt], 0)
	seq, n := atomic.LoadUint64(&s.undoHead[udSeq]), atomic.LoadUint64(&s.undoHead[udLen])
	if seq&1 == 0 || seq != atomic.LoadUint64(s.seq) || !s.ownsEntryBytes(at-1, n) {
		return false
	}
	b, off := s.tb.bytesAt(int64(at - 1))
	copy(b[off:off+int64(n)], s.undoData[:n])
	return true
}

// ownsEntryBytes reports whether the n bytes at byte off of the tiers area
// are within the undo record's size and the entry space of one tier of
// this segment (its first, or an overflow tier it owns).
func (s *Segment) ownsEntryBytes(off, n uint64) bool {
	l := &s.tb.layout
	if n > uint64(len(s.undoData)) || off >= uint64(s.tb.Present()*l.TierSize) {
		return false
	}
	t, in := int64(off/uint64(l.TierSize)), int64(off%uint64(l.TierSize))
	if in < l.entriesOff || uint64(in)+n > uint64(l.entriesOff+l.Chunks*l.ChunkSize) {
		return false
	}
	if t == s.index {
		return true
	}
	return t >= l.MaxSegments && s.tb.ownedBy(t, s.index)
}

// undoActive reports whether the undo record names a rewrite under way.
func (s *Segment) undoActive() bool {
	return s.undoHead != nil && atomic.LoadUint64(&s.undoHead[udAt]) != 0
}
