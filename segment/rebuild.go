package segment

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// rebuild rewrites the segment's metadata from what its slots name. Caller
// holds the write lock with the sequence odd.
//
// An entry counts when a slot names it and it decodes, passes its
// checksum, and belongs to this segment and the slot's tag: every writer
// writes an entry whole before a slot names it (insert, relocation,
// compaction) and removes the slot before it frees the run (delete), so
// what a writer cut short is either not named yet (dropped: it was that
// writer's operation in flight) or still named and whole. Used chunks that
// no slot names are never trusted in a dead writer's segment: they may
// hold a run taken but not yet written over a deleted entry, which would
// come back to life. With salvage (Repair, for damage no death explains,
// after Recover has run) such entries are taken back in too, when no
// named entry has their key: a damaged slot must not lose a sound entry.
//
// It changes the file only by steps that leave it as the next rebuild
// needs it, so a recoverer killed in the middle loses nothing a second
// rebuild cannot find: bad slots are removed one at a time by the same
// backward shift as a delete (which never leaves a sound entry unnamed),
// and the bitmaps and counts, which rebuild does not read, are written
// last.
func (s *Segment) rebuild(rep *Recovered, salvage bool) {
	chain := s.chain(rep)
	r := rebuilding{s: s, rep: rep, byKey: make(map[string]bool)}
	for _, ti := range chain {
		r.tiers = append(r.tiers, s.tb.tier(ti))
	}
	r.keep = make([]map[uint64]run, len(r.tiers))
	for i := range r.tiers {
		r.judgeSlots(i)
	}
	for i := range r.tiers {
		r.trimOverlaps(i)
		r.removeUnkept(i)
		r.nameUnreachable(i)
		if salvage {
			r.salvage(i)
		}
	}
	var total int64
	for i := range r.tiers {
		total += r.rewriteAllocation(i)
	}
	rep.Kept = total
	atomic.StoreUint64(s.entries, uint64(total))
	if s.tb.layout.LargeValues {
		atomic.StoreUint64(s.parts, uint64(r.countParts()))
	}
	atomic.StoreUint64(s.tiers, uint64(len(chain)-1))
}

// run is a kept entry's run of chunks.
type run struct{ c, nch int64 }

// rebuilding is the state of one rebuild: the segment's tiers, for each
// the distinct slot values it keeps and the runs they name, and the keys
// kept in any tier.
type rebuilding struct {
	s     *Segment
	rep   *Recovered
	tiers []tier
	keep  []map[uint64]run
	byKey map[string]bool
}

// judgeSlots decides which distinct slot values of tier i name an entry to
// keep. A key named twice (a move across tiers cut short) keeps its first
// copy.
func (r *rebuilding) judgeSlots(i int) {
	tb, l := r.s.tb, &r.s.tb.layout
	tv := &r.tiers[i]
	r.keep[i] = make(map[uint64]run)
	judged := make(map[uint64]bool)
	for pos := range tv.slots {
		sl := atomic.LoadUint64(&tv.slots[pos]) &^ refBit
		if sl == 0 || judged[sl] {
			continue
		}
		judged[sl] = true
		c := slotChunk(sl)
		key, nch, ok := tb.validEntry(tv, c)
		if ok {
			h := xxhash.Sum64(key)
			ok = r.s.tb.segmentOf(h) == r.s.index && uint32(h>>l.tagShift) == slotTag(sl)
		}
		switch {
		case !ok:
			r.rep.Dropped++
		case r.byKey[string(key)]:
			r.rep.Doubled++
		default:
			r.byKey[string(key)] = true
			r.keep[i][sl] = run{c, nch}
		}
	}
}

// trimOverlaps trims kept runs of tier i that overlap the next one (only
// damage makes them: an allocator that trusted a damaged bitmap) to their
// entries, and drops an entry whose bytes overlap another's.
func (r *rebuilding) trimOverlaps(i int) {
	tb := r.s.tb
	type named struct {
		slot uint64
		run
	}
	var runs []named
	for sl, rn := range r.keep[i] {
		runs = append(runs, named{sl, rn})
	}
	slices.SortFunc(runs, func(a, b named) int { return cmp.Compare(a.c, b.c) })
	last := -1 // the last run kept, as trimmed
	for j, rn := range runs {
		if last < 0 || rn.c >= runs[last].c+runs[last].nch {
			last = j
			continue
		}
		prev := &runs[last]
		klen, vlen, _, _ := tb.entryAt(&r.tiers[i], prev.c)
		if prev.c+ceilDiv(entryHeaderSize+klen+vlen, tb.layout.ChunkSize) <= rn.c {
			prev.nch = rn.c - prev.c
			tb.setRunLength(&r.tiers[i], prev.c, prev.nch)
			r.keep[i][prev.slot] = prev.run
			last = j
			continue
		}
		delete(r.keep[i], rn.slot)
		r.rep.Dropped++
	}
}

// removeUnkept removes every slot of tier i not kept, and the second of
// two slots naming one entry (a backward shift cut short). The walk starts
// after an empty slot, so a shift only ever moves into pos a slot not yet
// walked.
func (r *rebuilding) removeUnkept(i int) {
	tv := &r.tiers[i]
	mask := int64(r.s.tb.layout.slotMask)
	start := int64(slices.Index(tv.slots, 0))
	if start < 0 {
		// No empty slot, which only damage leaves (a tier holds fewer
		// entries than slots, so some slot names nothing kept or repeats
		// another): empty that one.
		once := make(map[uint64]bool)
		for pos := range tv.slots {
			sl := atomic.LoadUint64(&tv.slots[pos]) &^ refBit
			if _, kept := r.keep[i][sl]; !kept || once[sl] {
				atomic.StoreUint64(&tv.slots[pos], 0)
				start = int64(pos)
				break
			}
			once[sl] = true
		}
	}
	seen := make(map[uint64]bool)
	for n := int64(1); n <= int64(len(tv.slots)); n++ {
		pos := (start + n) & mask
		for {
			sl := atomic.LoadUint64(&tv.slots[pos])
			if sl == 0 {
				break
			}
			if _, kept := r.keep[i][sl&^refBit]; kept && !seen[sl&^refBit] {
				seen[sl&^refBit] = true
				break
			}
			r.s.tb.removeSlot(tv, pos) // a later slot may now sit at pos: look again
			testStep()
		}
	}
}

// nameUnreachable names again, where a lookup finds it, each kept slot of
// tier i that a probe from its home cannot reach (damage, not a writer cut
// short, may have emptied a slot before it in its probe run), and removes
// the old one.
func (r *rebuilding) nameUnreachable(i int) {
	tv := &r.tiers[i]
	mask := int64(r.s.tb.layout.slotMask)
	if !slices.Contains(tv.slots, 0) {
		return // slots left as damage made them: placeSlot needs an empty one
	}
	for pos := int64(0); pos < int64(len(tv.slots)); pos++ {
		sl := atomic.LoadUint64(&tv.slots[pos])
		if sl == 0 || reachable(tv.slots, int64(slotTag(sl))&mask, pos, mask) {
			continue
		}
		_ = r.s.tb.placeSlot(tv, slotTag(sl), slotChunk(sl)) // there is an empty slot: checked above
		r.s.tb.removeSlot(tv, pos)
		pos-- // a later slot may now sit at pos
	}
}

// salvage names sound entries under used chunks of tier i that no slot
// names, when no kept entry has their key (Repair only; see rebuild).
func (r *rebuilding) salvage(i int) {
	tb, l := r.s.tb, &r.s.tb.layout
	tv := &r.tiers[i]
	named := make([]bool, l.Chunks)
	for _, rn := range r.keep[i] {
		for c := rn.c; c < rn.c+rn.nch; c++ {
			named[c] = true
		}
	}
	for c := int64(0); c < l.Chunks; c++ {
		if named[c] || tv.bitmap[c>>6]>>(uint(c)&63)&1 == 0 {
			continue
		}
		key, nch, ok := tb.validEntry(tv, c)
		if !ok || int64(len(r.keep[i])) >= l.MaxTierEntries || !slices.Contains(tv.slots, 0) {
			continue
		}
		h := xxhash.Sum64(key)
		if r.s.tb.segmentOf(h) != r.s.index || r.byKey[string(key)] || !runUnnamed(named, c, nch) {
			continue
		}
		r.byKey[string(key)] = true
		tag := uint32(h >> l.tagShift)
		_ = tb.placeSlot(tv, tag, c) // there is an empty slot: checked above
		r.keep[i][makeSlot(tag, c)] = run{c, nch}
		for j := c; j < c+nch; j++ {
			named[j] = true
		}
		r.rep.Salvaged++
		c += nch - 1
	}
}

// rewriteAllocation writes tier i's bitmap and counts from the runs it
// keeps, and returns its count of entries.
func (r *rebuilding) rewriteAllocation(i int) int64 {
	l := &r.s.tb.layout
	tv := &r.tiers[i]
	bitmap := make([]uint64, len(tv.bitmap))
	var used int64
	for _, rn := range r.keep[i] {
		for c := rn.c; c < rn.c+rn.nch; c++ {
			bitmap[c>>6] |= 1 << (uint(c) & 63)
		}
		used += rn.nch
	}
	lowest := int64(0)
	for lowest < l.Chunks && bitmap[lowest>>6]>>(uint(lowest)&63)&1 != 0 {
		lowest++
	}
	r.rep.Freed += tv.storeBitmap(bitmap)
	atomic.StoreUint64(&tv.header[thEntries/8], uint64(len(r.keep[i])))
	atomic.StoreUint64(&tv.header[thUsedChunks/8], uint64(used))
	tv.setLowestFree(lowest)
	return int64(len(r.keep[i]))
}

// reachable reports whether a probe from home meets pos before an empty
// slot.
func reachable(slots []uint64, home, pos, mask int64) bool {
	for p := home; p != pos; p = (p + 1) & mask {
		if atomic.LoadUint64(&slots[p]) == 0 {
			return false
		}
	}
	return true
}

// runUnnamed reports whether none of chunks [c, c+n) is named.
func runUnnamed(named []bool, c, n int64) bool {
	for j := c; j < c+n && j < int64(len(named)); j++ {
		if named[j] {
			return false
		}
	}
	return true
}

// countParts counts the part entries the rebuilt tiers' slots name.
func (r *rebuilding) countParts() int64 {
	var n int64
	for i := range r.tiers {
		tv := &r.tiers[i]
		for pos := range tv.slots {
			if sl := atomic.LoadUint64(&tv.slots[pos]); sl != 0 && r.s.tb.kindAt(tv, slotChunk(sl)) == kindPart {
				n++
			}
		}
	}
	return n
}
