package segment

import (
	"cmp"
	"math/bits"
	"slices"
	"sync/atomic"
)

// compact slides the tier's entries to the start of its entry space, in
// the order they lie, so its free chunks form one run (and trims runs
// longer than their entry). Slots keep their positions; only their chunk
// numbers change. Caller holds write (sequence odd).
//
// A process may die at any instruction of it, and then every entry but the
// one moving must still be where its slot says, whole: entries move in
// the order they lie, so each lands only on free chunks or on chunks it
// left itself, and its slot names the new place only once the copy is
// whole (see rebuild). An entry that slides by less than its length
// overlaps itself; it moves by journal (see slideOverlapping), which
// recovery finishes.
func (s *Segment) compact(t *tier) error {
	tb := s.tb
	l := &tb.layout
	s.countMove(&tb.Compactions, stCompactions)
	type live struct{ pos, c, size int64 }
	entries := make([]live, 0, min(t.entries(), uint64(l.Slots)))
	for pos, slot := range t.slots {
		if slot == 0 {
			continue
		}
		c := slotChunk(slot)
		klen, vlen, _, ok := tb.entryAt(t, c)
		if !ok {
			return s.corrupt(t.index, "undecodable entry during compaction")
		}
		entries = append(entries, live{pos: int64(pos), c: c, size: entryHeaderSize + klen + vlen})
	}
	slices.SortFunc(entries, func(a, b live) int { return cmp.Compare(a.c, b.c) })
	// Checked before anything moves: a damaged tier stays as it was.
	for i := 1; i < len(entries); i++ {
		if prev := entries[i-1]; prev.c+ceilDiv(prev.size, l.ChunkSize) > entries[i].c {
			return s.corrupt(t.index, "entries overlap during compaction")
		}
	}
	next := int64(0)
	for _, e := range entries {
		nch := ceilDiv(e.size, l.ChunkSize)
		journalled := false
		switch {
		case e.c == next:
		case next+nch <= e.c:
			copy(t.space[next*l.ChunkSize:], t.space[e.c*l.ChunkSize:e.c*l.ChunkSize+e.size])
			testStep()
		default:
			tb.slideOverlapping(t, e.c, next, e.size)
			journalled = true
		}
		// A run longer than its entry (its value shrank) is trimmed; the
		// chunk count and checksum share one word, so the header is never
		// half rewritten.
		tb.setRunLength(t, next, nch)
		testStep()
		if e.c != next {
			renameSlot(&t.slots[e.pos], next)
			testStep()
		}
		if journalled {
			t.clearMove()
		}
		next += nch
	}
	bitmap := make([]uint64, len(t.bitmap))
	for c := int64(0); c < next; c += 64 {
		bitmap[c>>6] = ^uint64(0) >> (64 - uint(min(next-c, 64)))
	}
	t.storeBitmap(bitmap)
	atomic.StoreUint64(&t.header[thUsedChunks/8], uint64(next))
	t.setLowestFree(next)
	return nil
}

// slideOverlapping moves the size bytes of the entry at chunk src down to
// chunk dst, which lies less than its length below. A copy that overlaps
// its source cannot be redone from the start once cut short, so it goes by
// blocks as long as the slide, each of which reads only bytes no earlier
// block wrote, and the tier header journals the move and each block done:
// finishMove completes it after a death. The caller names dst in the slot,
// then clears the journal.
func (tb *Table) slideOverlapping(t *tier, src, dst, size int64) {
	atomic.StoreUint64(&t.header[thMoveDone/8], uint64(size)<<32)
	atomic.StoreUint64(&t.header[thMove/8], moveJournal(src, dst))
	testStep()
	tb.continueMove(t, src, dst, size, 0)
}

// continueMove copies the blocks of a journalled move from byte done on.
func (tb *Table) continueMove(t *tier, src, dst, size, done int64) {
	cs := tb.layout.ChunkSize
	gap := (src - dst) * cs
	for done < size {
		n := min(gap, size-done)
		copy(t.space[dst*cs+done:dst*cs+done+n], t.space[src*cs+done:src*cs+done+n])
		testStep()
		done += n
		atomic.StoreUint64(&t.header[thMoveDone/8], uint64(size)<<32|uint64(done))
	}
}

// moveJournal is the tier header's move word: a move in progress (bit 63)
// from chunk src to chunk dst (31 bits each, as in a slot).
func moveJournal(src, dst int64) uint64 { return 1<<63 | uint64(src)<<31 | uint64(dst) }

// finishMove completes a journalled move that a dead process cut short: it
// copies what the journal says is left, names the new place in the slot
// that named the old (if the move had not got that far), and clears the
// journal. Journal words no writer leaves are only cleared. Caller holds
// write.
func (tb *Table) finishMove(t *tier) {
	defer t.clearMove()
	j := atomic.LoadUint64(&t.header[thMove/8])
	progress := atomic.LoadUint64(&t.header[thMoveDone/8])
	src, dst := int64(j>>31&(1<<31-1)), int64(j&(1<<31-1))
	size, done := int64(progress>>32), int64(uint32(progress))
	l := &tb.layout
	if j>>62 != 2 || dst >= src || src >= l.Chunks || size <= 0 || done > size || src*l.ChunkSize+size > l.Chunks*l.ChunkSize {
		return // no move (j == 0), or not one a writer journals
	}
	// A move cut short has its entry named at src (not yet renamed) or at
	// dst (renamed, journal not yet cleared). Words that only look like a
	// journal name neither, and copying by them would write over entries.
	// And in a real one, no other entry lies where the entry slides: the
	// ones before it are packed below dst, the ones after start past it.
	nch := ceilDiv(size, l.ChunkSize)
	named := -1
	for pos := range t.slots {
		slot := atomic.LoadUint64(&t.slots[pos])
		if slot == 0 {
			continue
		}
		c := slotChunk(slot)
		if named < 0 && (c == src || c == dst && done == size) {
			named = pos
			continue
		}
		if _, _, n, ok := tb.entryAt(t, c); ok && c < src+nch && c+n > dst {
			return
		}
	}
	if named < 0 {
		return
	}
	tb.continueMove(t, src, dst, size, done)
	if slotChunk(atomic.LoadUint64(&t.slots[named])) == src {
		tb.setRunLength(t, dst, nch)
		renameSlot(&t.slots[named], dst)
	}
}

// clearMove clears the tier's move journal: no move under way.
func (t *tier) clearMove() {
	atomic.StoreUint64(&t.header[thMove/8], 0)
	atomic.StoreUint64(&t.header[thMoveDone/8], 0)
}

// setRunLength makes the header of the entry at chunk c say its run is nch
// chunks, with the checksum that goes with it: both in one 8-byte word.
func (tb *Table) setRunLength(t *tier, c, nch int64) {
	off := c * tb.layout.ChunkSize
	klen, vlen, cur, ok := tb.entryAt(t, c)
	if !ok || cur == nch {
		return
	}
	// The kind bits stay as they are: the entry is the same entry.
	h := tb.kindHeader(nch, tb.kindAt(t, c), tb.entryKey(t, c, klen), tb.entryValue(t, c, klen, vlen))
	_, words, base := tb.area(t.index)
	atomic.StoreUint64(&words[(base+tb.layout.entriesOff+off+ehChunks)/8], h.chunksAndSum)
}

// storeBitmap replaces the tier's allocation bitmap by words, one atomic
// word at a time, and returns how many chunks it freed.
func (t *tier) storeBitmap(words []uint64) (freed int64) {
	for w := range words {
		freed += int64(bits.OnesCount64(atomic.LoadUint64(&t.bitmap[w]) &^ words[w]))
		atomic.StoreUint64(&t.bitmap[w], words[w])
		testStep()
	}
	return freed
}
