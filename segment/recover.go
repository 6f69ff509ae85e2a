package segment

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/rwulock"
)

// SetLedgers gives each segment lock of this table its ledger word in this
// process's registry slot (ledger(i) for segment i), so that what this
// process holds can be told apart if it dies. Call it before any operation.
func (tb *Table) SetLedgers(ledger func(i int) *uint64) {
	for i := range tb.segs {
		tb.segs[i].lock.SetLedger(ledger(i))
	}
}

// SetFastLedgers gives each segment lock of this table a fast ledger word
// in this process's registry slot (fast(i) for segment i), for
// TryOverwrite (see rwulock.FastNext), and starts each at seed, a
// FastEmpty value no earlier owner of the slot reached (see
// rwulock.FastSeed). Like SetLedgers, call it before any operation.
// Without it TryOverwrite does nothing.
func (tb *Table) SetFastLedgers(fast func(i int) *uint64, seed uint64) {
	for i := range tb.segs {
		tb.segs[i].fast = fast(i)
		atomic.StoreUint64(tb.segs[i].fast, seed)
	}
}

// CloseFastPaths ends TryOverwrite in this process for good, waiting for
// the calls under way to finish with the file: it marks each fast ledger
// FastClosed once it is back to FastEmpty (those calls never wait, so
// this is short), and a call that begins after finds it so, or sees the
// closing flag, and does nothing. Close calls it before the file goes.
func (tb *Table) CloseFastPaths() {
	tb.closing.Store(true)
	for i := range tb.segs {
		p := tb.segs[i].fast
		if p == nil {
			continue
		}
		for {
			v := atomic.LoadUint64(p)
			switch v & rwulock.FastStateMask {
			case rwulock.FastClosed:
			case rwulock.FastAcquiring, rwulock.FastHeld, rwulock.FastReleasing:
				runtime.Gosched() // a call under way
				continue
			default:
				if !atomic.CompareAndSwapUint64(p, v, rwulock.FastNext(v, rwulock.FastClosed)) {
					continue
				}
			}
			break
		}
	}
}

// Recovered is what one segment's recovery did.
type Recovered struct {
	Segment  int64
	Orphans  rwulock.Orphans // what dead processes held of its lock
	Rebuilt  bool            // a dead process held it exclusively: its data was rebuilt
	Kept     int64           // entries kept by the rebuild
	Dropped  int64           // slots dropped: their entry is undecodable, fails its checksum, or belongs elsewhere
	Doubled  int64           // second copies of a key (a move across tiers cut short), dropped
	Salvaged int64           // Repair only: sound entries no slot named (a damaged slot), named again
	Relinked int64           // overflow tiers a damaged link (or a writer that died linking them) had left out of the chain, linked again
	Restored bool            // an in-place rewrite cut short was put right from the undo record: its entry is whole, with its old value (the general path's record) or the new one (Put's fast path's)
	Cleared  bool            // a Clear cut short was finished: the segment is empty
	Freed    int64           // chunks marked used that no kept entry occupies (work of a writer cut short), freed
}

// Recover releases what dead processes left in segment s's lock word. live
// appends the ledger words of every live process for this segment (this
// process's included). If a dead process held the update or write lock,
// the segment's data may be half changed: Recover takes the lock in its
// place, rebuilds the hash lookup of every tier from the entries
// themselves (dropping entries whose checksum fails, and second copies of
// a key), fixes the counters, and releases it. It gives up with an error if
// live processes keep the lock word moving until deadline.
//
// Callers serialize recoveries (the registry's recovery lock).
func (s *Segment) Recover(live func(dst []uint64) []uint64, deadline time.Time) (Recovered, error) {
	rep := Recovered{Segment: s.index}
	for {
		word, o, err := s.lock.FindOrphans(live, deadline)
		if err != nil {
			return rep, s.lockErr("recover", err)
		}
		rep.Orphans = o
		took, err := s.lock.ReleaseOrphans(word, o)
		if errors.Is(err, rwulock.ErrChanged) {
			continue
		}
		if err != nil {
			return rep, s.lockErr("recover", err)
		}
		if !took {
			return rep, nil
		}
		break
	}
	// We hold the dead holder's lock: its write lock, under which nobody
	// else is inside, or its update lock, under which readers may be
	// inside, so wait for them. (Under the update lock a writer changes
	// nothing readers depend on, but it may have placed an entry it had
	// not yet counted, or linked a tier.) If they stay past the deadline
	// the lock goes back to the dead, for the next pass to find again:
	// released, it would leave the data unrepaired with nothing to say so.
	if !rep.Orphans.Write {
		if err := s.lock.UpgradeUpdateToWrite(time.Until(deadline)); err != nil {
			s.lock.AbandonUpdate()
			return rep, s.lockErr("recover", err)
		}
	}
	rep.Restored = s.restoreUndo() // before the sequence changes: the record names it
	// Likewise: the clearing word names the odd sequence.
	rep.Cleared = s.finishClear(false, &rep)
	if atomic.LoadUint64(s.seq)&1 == 0 {
		atomic.AddUint64(s.seq, 1) // odd: optimistic readers retry until we are done
	}
	s.finishMoves(false, &rep)
	s.rebuild(&rep, false)
	atomic.AddUint64(s.seq, 1)
	_ = s.lock.WriteUnlock()
	rep.Rebuilt = true
	return rep, nil
}

// Rebuild rewrites segment s's metadata from its entries, as Recover does
// for a segment a dead process was modifying, for damage that no death
// explains and Check reports: pages of the file torn by a machine crash, a
// stray write. It takes the segment's write lock as any writer does (and
// fails with ErrTimeout if a live process holds it throughout), drops the
// entries that do not decode or fail their checksum and second copies of a
// key, and recounts. Unlike Recover it also takes back sound entries that
// no slot names, when no slot names their key (see rebuild's salvage), and
// keeps an overflow tier whose owner word alone is damaged (see chain). An
// odd sequence left by a writer that died inside comes out even.
func (s *Segment) Rebuild() (Recovered, error) {
	return s.rebuildIf(func() bool { return true })
}

// Repair is Rebuild for a segment that Check found damaged, done only if
// Check still finds it damaged once the update lock keeps writers out: a
// Check that raced with a writer (an insert changes no sequence) is not
// damage. It reports whether it rebuilt.
func (s *Segment) Repair() (Recovered, bool, error) {
	rebuilt := false
	rep, err := s.rebuildIf(func() bool {
		s.check(func(error) { rebuilt = true }, true)
		return rebuilt
	})
	return rep, rebuilt, err
}

// rebuildIf takes the update lock and, if damaged says so, the write lock
// and rebuilds (see Rebuild).
func (s *Segment) rebuildIf(damaged func() bool) (Recovered, error) {
	rep := Recovered{Segment: s.index}
	w, err := s.beginUpdate("rebuild")
	if err != nil {
		return rep, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	if !damaged() {
		return rep, nil
	}
	if err := w.upgrade("rebuild"); err != nil {
		return rep, err
	}
	rep.Restored = s.restoreUndo()
	rep.Cleared = s.finishClear(true, &rep)
	if atomic.LoadUint64(s.seq)&1 == 0 {
		atomic.AddUint64(s.seq, 1) // odd: optimistic readers retry until we are done
	}
	s.finishMoves(true, &rep)
	s.rebuild(&rep, true)
	s.clearReserved()
	rep.Rebuilt = true
	return rep, nil // the deferred end makes the sequence even again
}

// finishMoves completes the compaction moves a dead process cut short in
// the segment's tiers (see compact); rep counts what chain linked again
// or dropped. Caller holds write.
func (s *Segment) finishMoves(salvage bool, rep *Recovered) {
	for _, t := range s.chain(salvage, rep) {
		tv := s.tb.tier(t)
		s.tb.finishMove(&tv)
	}
}

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
	chain := s.chain(salvage, rep)
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
			ok = l.segmentOf(h) == r.s.index && uint32(h>>l.segmentBits) == slotTag(sl)
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
		if l.segmentOf(h) != r.s.index || r.byKey[string(key)] || !runUnnamed(named, c, nch) {
			continue
		}
		r.byKey[string(key)] = true
		tag := uint32(h >> l.segmentBits)
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

// chain lists the tiers of the segment, first tier first, stopping at a
// link that leads outside the pool, back into the chain, or to a tier
// that is not this segment's, and cutting it there, since nothing can
// follow it safely. Where the chain ends or is cut, a tier the pool has
// handed out that says it is this segment's at that position (owner and
// position words), and that no link reaches, is linked there instead
// (lostTierAt): damage to a link must not cost the tiers after it, and a
// writer that died between giving a tier its words and linking it leaves
// such a tier too. Such a tier also comes before a linked one whose owner
// word is damaged but whose other words say it is this segment's (see
// linkedTierIsOf), which is otherwise taken, its owner word mended, if
// the pool has handed it out. A linked tier of this segment's whose
// position word disagrees with its link yields only to a lost tier that
// links on to it (a damaged link that skipped it); otherwise, with
// salvage (Repair), its position word is mended. Last, tiers that still
// say they are this segment's but that no chain reaches are made no
// one's (disownStrays): left, a later recovery could link one back with
// values since rewritten or keys since deleted. rep, if not nil, counts
// the tiers linked again and the entries dropped. Caller holds write.
func (s *Segment) chain(salvage bool, rep *Recovered) []int64 {
	tb := s.tb
	l := &tb.layout
	out := []int64{s.index}
	seen := map[int64]bool{s.index: true}
	relink := func(tv *tier, lost int64) {
		// The owner word first (lostTierAt may have found the tier with it
		// damaged), as a writer attaching a tier stores it before the link.
		atomic.StoreUint64(&tb.tier(lost).header[thOwner/8], uint64(s.index)+1)
		atomic.StoreUint64(&tv.header[thNext/8], uint64(lost)+1)
		if rep != nil {
			rep.Relinked++
		}
		seen[lost] = true
		out = append(out, lost)
	}
	for {
		tv := tb.tier(out[len(out)-1])
		pos := int64(len(out))
		next := tv.next()
		t := int64(next) - 1
		ours, mend := false, false
		if next != 0 && next <= uint64(l.Tiers) && t >= l.Segments && !seen[t] {
			ours, mend = tb.linkedTierIsOf(s.index, t, pos)
		}
		if ours && !mend {
			if atomic.LoadUint64(&tb.tier(t).header[thOrder/8]) != uint64(pos) {
				if lost, ok := s.lostTierAt(pos, seen); ok && tb.tierNext(lost) == next {
					relink(&tv, lost) // the link skipped it; it links on to t
					continue
				}
				if salvage {
					atomic.StoreUint64(&tb.tier(t).header[thOrder/8], uint64(pos))
				}
			}
			seen[t] = true
			out = append(out, t)
			continue
		}
		// A tier that says it belongs here comes before one taken for this
		// segment's on the evidence of its other words.
		if lost, ok := s.lostTierAt(pos, seen); ok {
			relink(&tv, lost)
			continue
		}
		if ours && t < l.Segments+tb.ExtraTiersInUse() {
			atomic.StoreUint64(&tb.tier(t).header[thOwner/8], uint64(s.index)+1)
			seen[t] = true
			out = append(out, t)
			continue
		}
		if next != 0 {
			atomic.StoreUint64(&tv.header[thNext/8], 0)
		}
		s.disownStrays(seen, rep)
		return out
	}
}

// disownStrays clears the owner word of every tier the pool has handed
// out that says it is this segment's, or whose owner word is damaged
// (naming no segment) and whose sound entries are all this segment's,
// but is neither in seen (the chain) nor linked from any tier,
// counting its sound entries as dropped in rep (if not nil), and clears
// its next word, so that the tiers it linked are weighed the same way in
// turn. A tier another chain links is that chain's to judge, whatever its
// owner word says.
func (s *Segment) disownStrays(seen map[int64]bool, rep *Recovered) {
	tb := s.tb
	l := &tb.layout
	end := tb.handedOutEnd()
	for changed := true; changed; {
		changed = false
		for t := l.Segments; t < end; t++ {
			tv := tb.tier(t)
			if seen[t] {
				continue
			}
			owner, order := atomic.LoadUint64(&tv.header[thOwner/8]), atomic.LoadUint64(&tv.header[thOrder/8])
			switch {
			case owner == uint64(s.index)+1:
				if tb.linksTo(t) != 0 {
					continue
				}
			case owner > uint64(l.Segments), owner == 0 && order != 0: // damaged: weighed by its keys
				if tb.linksTo(t) != 0 || tb.keysOfOneSegment(t) != s.index {
					continue
				}
			default:
				continue
			}
			if rep != nil {
				tb.soundKeys(t, func([]byte) { rep.Dropped++ })
			}
			// Owner and position zero: what a tier given up reads as, told
			// apart from one whose owner word alone damage zeroed.
			atomic.StoreUint64(&tv.header[thOwner/8], 0)
			atomic.StoreUint64(&tv.header[thOrder/8], 0)
			atomic.StoreUint64(&tv.header[thNext/8], 0)
			changed = true
		}
	}
}

// lostTierAt finds the one overflow tier the pool has handed out whose
// owner and position words say it is this segment's at position pos of
// its chain, and which is not in seen (the chain so far) nor linked from
// any tier: a tier a damaged link let go, or that a writer died before
// linking. Failing that, the one whose owner word is damaged (not this
// segment; zero too, since disownStrays zeroes the position word with it)
// and whose position word says pos, linked from no tier, that holds
// entries of this segment's and none of another's: a tier whose link and
// owner word were both damaged (a tier being attached is still empty, and
// its owner word is stored before its position word).
// ok is false when there is none or more than one. Caller holds write, so
// no writer of this segment is linking one now.
func (s *Segment) lostTierAt(pos int64, seen map[int64]bool) (lost int64, ok bool) {
	tb := s.tb
	l := &tb.layout
	end := tb.handedOutEnd()
	var candidates, ownerDamaged []int64
	for t := l.Segments; t < end; t++ {
		h := tb.tier(t).header
		if seen[t] || atomic.LoadUint64(&h[thOrder/8]) != uint64(pos) {
			continue
		}
		if atomic.LoadUint64(&h[thOwner/8]) == uint64(s.index)+1 {
			candidates = append(candidates, t)
		} else {
			ownerDamaged = append(ownerDamaged, t)
		}
	}
	if len(candidates) == 0 {
		candidates = slices.DeleteFunc(ownerDamaged, func(t int64) bool {
			mine, others := tb.keysIn(t, s.index)
			return !mine || others
		})
	}
	if len(candidates) != 1 || tb.linksTo(candidates[0]) != 0 {
		return 0, false
	}
	return candidates[0], true
}

// linkedTierIsOf reports whether overflow tier t, which segment index's
// chain links at position pos, is that segment's, and whether its owner
// word needs mending to say so. It is when its owner word names the
// segment. Its owner word being damaged (zero, out of range, or naming
// another segment), it is when its position word agrees with the link,
// this link is the only one that reaches it, none of its entries is
// another segment's, and it shows itself part of this chain: it holds an
// entry of this segment's or links on to a tier of this segment's. A tier
// another segment's live writer is attaching right now (owner and
// position words written, not linked yet) is empty and links nowhere, so
// a damaged link that names it does not take it; the position word is
// read before the owner word, which a writer stores first. Whether the
// pool has handed the tier out is the caller's to weigh.
func (tb *Table) linkedTierIsOf(index, t, pos int64) (ours, mend bool) {
	h := tb.tier(t).header
	order := atomic.LoadUint64(&h[thOrder/8])
	owner := atomic.LoadUint64(&h[thOwner/8])
	switch {
	case owner == uint64(index)+1:
		return true, false
	case order != uint64(pos) || tb.linksTo(t) != 1:
		return false, false
	}
	mine, others := tb.keysIn(t, index)
	if others {
		return false, false
	}
	if !mine {
		next := tb.tierNext(t)
		if next == 0 || next > uint64(tb.layout.Tiers) {
			return false, false
		}
		nh := tb.tier(int64(next) - 1).header
		if atomic.LoadUint64(&nh[thOwner/8]) != uint64(index)+1 {
			return false, false
		}
	}
	return true, true
}

// tierNext is tier t's next word.
func (tb *Table) tierNext(t int64) uint64 {
	tv := tb.tier(t)
	return tv.next()
}

// linksTo counts the tiers, of the pool's handed-out ones and the first
// tiers, whose next word names tier t.
func (tb *Table) linksTo(t int64) int {
	end := tb.handedOutEnd()
	n := 0
	for i := int64(0); i < end; i++ {
		if tv := tb.tier(i); tv.next() == uint64(t)+1 {
			n++
		}
	}
	return n
}

// keysIn reports whether tier t holds an entry that decodes and passes
// its checksum whose key hashes to segment index (mine), and one whose key
// hashes to another segment (others).
func (tb *Table) keysIn(t, index int64) (mine, others bool) {
	tb.soundKeys(t, func(key []byte) {
		if tb.layout.segmentOf(xxhash.Sum64(key)) == index {
			mine = true
		} else {
			others = true
		}
	})
	return mine, others
}

// keysOfOneSegment is the segment whose keys tier t's sound entries all
// are, or -1 when it holds none, or keys of more than one segment.
func (tb *Table) keysOfOneSegment(t int64) int64 {
	seg, mixed := int64(-1), false
	tb.soundKeys(t, func(key []byte) {
		switch s := tb.layout.segmentOf(xxhash.Sum64(key)); {
		case seg < 0:
			seg = s
		case s != seg:
			mixed = true
		}
	})
	if mixed {
		return -1
	}
	return seg
}

// soundKeys calls key for the key of each entry of tier t that a slot
// names and that decodes and passes its checksum.
func (tb *Table) soundKeys(t int64, key func([]byte)) {
	tv := tb.tier(t)
	for pos := range tv.slots {
		if sl := atomic.LoadUint64(&tv.slots[pos]); sl != 0 {
			if k, _, ok := tb.validEntry(&tv, slotChunk(sl)); ok {
				key(k)
			}
		}
	}
}

// handedOutEnd is one past the last tier the pool has handed out (first
// tiers included), by the count, bounded by the table.
func (tb *Table) handedOutEnd() int64 {
	return min(tb.layout.Segments+tb.ExtraTiersInUse(), tb.layout.Tiers)
}

// validEntry decodes the entry at chunk c and checks its checksum (when the
// map keeps them).
func (tb *Table) validEntry(t *tier, c int64) (key []byte, nch int64, ok bool) {
	klen, vlen, nch, ok := tb.entryAt(t, c)
	if !ok {
		return nil, 0, false
	}
	key = tb.entryKey(t, c, klen)
	off := c * tb.layout.ChunkSize
	if !tb.checksumHolds(t.space[off:off+entryHeaderSize], key, tb.entryValue(t, c, klen, vlen)) {
		return nil, 0, false
	}
	return key, nch, true
}

// checksumHolds reports whether an entry's header, key and stored value
// agree with the checksum in the header (always, in a map without them).
func (tb *Table) checksumHolds(head, key, stored []byte) bool {
	return !tb.layout.Checksums || binary.LittleEndian.Uint32(head[ehChecksum:]) == entryChecksum(head[:ehChecksum], key, stored)
}

// Check verifies segment s without taking its lock or writing anything,
// and calls problem for each thing no correct writer leaves behind: lock
// and sequence states (which a live writer may show for an instant),
// chain links, slots, entries and their checksums, keys in the wrong
// segment or present twice, and counters that disagree. It returns the
// number of entries it found.
func (s *Segment) Check(problem func(error)) int64 {
	return s.check(problem, false)
}

// check is Check; updating says that the caller holds the update lock,
// which the lock word then shows.
func (s *Segment) check(problem func(error), updating bool) int64 {
	tb := s.tb
	l := &tb.layout
	report := func(t int64, format string, args ...any) { problem(s.corrupt(t, fmt.Sprintf(format, args...))) }
	if st := s.lock.State(); !st.Free() && !updating {
		report(-1, "lock word not free: %v", st)
	}
	clearing := s.clearingNow()
	switch {
	case clearing:
		report(-1, "clearing word set: a Clear is under way or died inside (recovery finishes it, leaving the segment empty)")
	case atomic.LoadUint64(s.seq)&1 != 0:
		report(-1, "modification sequence is odd: a writer is inside or died inside")
	case s.undoActive():
		report(-1, "undo record names a rewrite with no writer inside")
	}
	head, reserved, counters := s.reserved()
	if atomic.LoadUint64(&head[shSleepers/8])>>32 != 0 && !clearing || !reservedZero(reserved) {
		report(-1, "reserved header bytes are not zero")
	}
	if !reservedZero(counters) {
		report(-1, "reserved bytes of the counters are not zero")
	}
	keys := make(map[string]bool)
	var total, tiers int64
	t := s.index
	seen := map[int64]bool{}
	for {
		seen[t] = true
		tiers++
		tv := tb.tier(t)
		if t >= l.Segments {
			if owner := atomic.LoadUint64(&tv.header[thOwner/8]); owner != uint64(s.index)+1 {
				report(t, "overflow tier owned by %d, linked from segment %d", int64(owner)-1, s.index)
			}
			if order := atomic.LoadUint64(&tv.header[thOrder/8]); order != uint64(tiers-1) {
				report(t, "overflow tier at position %d of the chain says it is at %d", tiers-1, order)
			}
		}
		if atomic.LoadUint64(&tv.header[thMove/8]) != 0 || atomic.LoadUint64(&tv.header[thMoveDone/8]) != 0 {
			report(t, "a compaction move was cut short (recovery finishes it)")
		}
		var entries, chunks int64
		used := make([]uint64, len(tv.bitmap))
		for pos, sl := range tv.slots {
			if sl == 0 {
				continue
			}
			c := slotChunk(sl)
			klen, vlen, nch, ok := tb.entryAt(&tv, c)
			if !ok {
				report(t, "slot %d: entry at chunk %d is undecodable", pos, c)
				continue
			}
			if !reachable(tv.slots, int64(slotTag(sl))&int64(l.slotMask), int64(pos), int64(l.slotMask)) {
				report(t, "slot %d: a lookup cannot reach it (an empty slot lies between it and its home)", pos)
			}
			key := tb.entryKey(&tv, c, klen)
			if _, _, ok := tb.userValue(tb.entryValue(&tv, c, klen, vlen)); !ok {
				report(t, "slot %d: cache entry at chunk %d is too short for its expiry", pos, c)
			}
			if _, _, ok := tb.validEntry(&tv, c); !ok {
				// Still an entry for the counts below: one problem, not four.
				report(t, "slot %d: entry at chunk %d fails its checksum", pos, c)
			}
			h := xxhash.Sum64(key)
			if l.segmentOf(h) != s.index || uint32(h>>l.segmentBits) != slotTag(sl) {
				report(t, "slot %d: key %q does not hash to this segment and tag", pos, key)
			}
			if keys[string(key)] {
				report(t, "key %q stored twice", key)
			}
			keys[string(key)] = true
			for i := c; i < c+nch; i++ {
				if used[i>>6]>>(uint(i)&63)&1 != 0 {
					report(t, "chunk %d belongs to two entries", i)
					break
				}
				used[i>>6] |= 1 << (uint(i) & 63)
			}
			if tv.bitmap[c>>6]>>(uint(c)&63)&1 == 0 {
				report(t, "entry at chunk %d is marked free in the bitmap", c)
			}
			entries++
			chunks += nch
		}
		var leaked int64
		for i, w := range tv.bitmap {
			leaked += int64(bits.OnesCount64(w &^ used[i]))
		}
		if leaked != 0 {
			report(t, "%d chunks marked used that no entry occupies", leaked)
		}
		if n := int64(tv.entries()); n != entries {
			report(t, "header counts %d entries, slots hold %d", n, entries)
		}
		if n := int64(tv.usedChunks()); n != chunks+leaked {
			report(t, "header counts %d used chunks, bitmap has %d", n, chunks+leaked)
		}
		total += entries
		next := tv.next()
		if next == 0 {
			break
		}
		nt := int64(next - 1)
		if next > uint64(l.Tiers) || nt < l.Segments || seen[nt] {
			report(t, "next-tier link %d leads outside the pool or back into the chain", next)
			break
		}
		t = nt
	}
	if n := s.Len(); n != total {
		report(-1, "header counts %d entries, tiers hold %d", n, total)
	}
	if n := s.Tiers(); n != tiers {
		report(-1, "header counts %d tiers, chain has %d", n, tiers)
	}
	return total
}

// reserved returns segment s's header and the words of it and of its
// counters that no writer uses (words nobody writes, so anything in them is
// damage). The sleepers word's high half is reserved too.
func (s *Segment) reserved() (head, header, counters []uint64) {
	l := &s.tb.layout
	head = s.tb.region.Uint64s(l.SegmentsOff+s.index*segmentHeaderSize, segmentHeaderSize/8)
	if !l.Cache {
		header = head[shTiers/8+1:] // a cache map keeps its hand and eviction counters there
	}
	if s.counters != nil {
		from := stLockTimeouts/8 + 1
		if l.MoveCounters {
			from = stRelocations/8 + 1
		}
		counters = s.counters[from:]
	}
	return head, header, counters
}

// clearReserved zeroes what reserved returns. Caller holds the write lock.
func (s *Segment) clearReserved() {
	head, header, counters := s.reserved()
	atomic.AndUint64(&head[shSleepers/8], 1<<32-1)
	for _, w := range [][]uint64{header, counters} {
		for i := range w {
			atomic.StoreUint64(&w[i], 0)
		}
	}
}

// ClearReservedGlobal zeroes the words of the table's global state and the
// padding before the tiers, which nothing writes (see CheckGlobal): part of
// repairing a damaged file.
func (tb *Table) ClearReservedGlobal() {
	global, padding := tb.reservedGlobal()
	for _, w := range [][]uint64{global, padding} {
		for i := range w {
			atomic.StoreUint64(&w[i], 0)
		}
	}
}

// reservedGlobal returns the words of the global state that nothing writes
// and the padding between the counters and the tiers.
func (tb *Table) reservedGlobal() (global, padding []uint64) {
	l := &tb.layout
	end := l.UndoOff + l.Segments*l.UndoSize // UndoOff is the end of the counters, UndoSize 0 without undo records
	return tb.region.Uint64s(l.GlobalOff+gExtraTiersUsed+8, globalSize/8-1), tb.region.Uint64s(end, (l.TiersOff-end)/8)
}

// CheckGlobal verifies, read-only, the table's global state: the count of
// overflow tiers handed out is within the pool and covers every tier a
// segment links or that has an owner, and the reserved bytes are zero
// (nothing writes them, so anything else is damage).
func (tb *Table) CheckGlobal(problem func(error)) {
	l := &tb.layout
	// Before the count: a tier is handed out before it gets an owner and
	// is linked, so an owner read first lies below a count read after.
	inUse := tb.poolTiersInUse()
	var strays []int64
	tb.usedPoolTiers(func(idx int64, handedOut bool) {
		if !handedOut {
			strays = append(strays, idx)
		}
	})
	n := atomic.LoadUint64(tb.extraTiers)
	switch {
	case n > uint64(l.Tiers-l.Segments):
		problem(fmt.Errorf("%w: %d overflow tiers handed out, the pool has %d; Repair mends the count", ErrCorrupt, n, l.Tiers-l.Segments))
	case n < inUse:
		problem(fmt.Errorf("%w: %d overflow tiers handed out, but %d are linked or owned: the next link would take a tier in use; Repair mends the count", ErrCorrupt, n, inUse))
	}
	for _, idx := range strays {
		if uint64(idx-l.Segments) >= max(n, inUse) {
			problem(fmt.Errorf("%w: overflow tier %d is not zero, but the pool has not handed it out and no chain keeps it: the pool would refuse it; Repair clears it", ErrCorrupt, idx))
		}
	}
	tb.UnlinkedTiers(func(seg, t int64) {
		problem(fmt.Errorf("%w: overflow tier %d holds entries of segment %d, but no chain links it: Repair links it back, or reports its entries dropped", ErrCorrupt, t, seg))
	})
	global, padding := tb.reservedGlobal()
	if !reservedZero(global) {
		problem(fmt.Errorf("%w: reserved bytes of the global state are not zero", ErrCorrupt))
	}
	if !reservedZero(padding) {
		problem(fmt.Errorf("%w: the padding before the tiers is not zero", ErrCorrupt))
	}
}

// UnlinkedTiers calls found for each overflow tier the pool has handed out
// that no tier links, whose owner and position words are not both zero
// (as disownStrays leaves tiers it gave up), and whose sound entries are all of one
// segment, seg: a tier a damaged link cut from seg's chain. It is what a
// rebuild of one segment can leave behind when the link that reached the
// tier was another chain's damaged one, cut only by that chain's rebuild
// afterwards; rebuilding seg again then links it back (see lostTierAt) or
// counts its entries as dropped. A tier a live writer is attaching (words
// written, not linked yet) is empty, and not reported.
func (tb *Table) UnlinkedTiers(found func(seg, tier int64)) {
	l := &tb.layout
	end := tb.handedOutEnd()
	linked := make(map[int64]bool)
	for i := int64(0); i < end; i++ {
		if next := tb.tierNext(i); next != 0 && next <= uint64(l.Tiers) {
			linked[int64(next)-1] = true
		}
	}
	for t := l.Segments; t < end; t++ {
		h := tb.tier(t).header
		if linked[t] || atomic.LoadUint64(&h[thOwner/8]) == 0 && atomic.LoadUint64(&h[thOrder/8]) == 0 {
			continue // linked, or given up (see disownStrays)
		}
		if seg := tb.keysOfOneSegment(t); seg >= 0 {
			found(seg, t)
		}
	}
}

// reservedZero reports whether every word of a reserved field is zero.
func reservedZero(w []uint64) bool {
	for i := range w {
		if atomic.LoadUint64(&w[i]) != 0 {
			return false
		}
	}
	return true
}

// linkedPoolTiers is how many overflow tiers the pool must have handed
// out for the segments' chains: one past the highest, counted from the
// pool's first, that a chain links and a rebuild would keep (see
// linkedTierIsOf), each chain followed as far as a rebuild follows it. A
// link that damage pointed at a tier of no chain's does not count: raised
// to cover it, the count would give up every tier before it.
func (tb *Table) linkedPoolTiers() uint64 {
	l := &tb.layout
	var n uint64
	for i := range l.Segments {
		t := tb.tier(i)
		seen := map[int64]bool{}
		for pos := int64(1); pos < l.Tiers; pos++ {
			next := t.next()
			idx := int64(next) - 1
			if next == 0 || next > uint64(l.Tiers) || idx < l.Segments || seen[idx] {
				break
			}
			if ours, _ := tb.linkedTierIsOf(i, idx, pos); !ours {
				break
			}
			seen[idx] = true
			n = max(n, uint64(idx-l.Segments+1))
			t = tb.tier(idx)
		}
	}
	return n
}

// usedPoolTiers calls used for each overflow tier whose header is not all
// zeros, as the pool hands every tier out, saying whether the tier looks
// handed out: its owner word names a segment and its position word a
// place in a chain, as attachTier leaves them, or its owner word names a
// segment whose entries it holds, or, damaged (neither zero nor a
// segment), it holds entries of one segment only. Damage to a word of a
// tier never handed out leaves it looking otherwise; a tier a damaged link
// cut loose (chain links it again, or counts its entries as dropped)
// looks handed out.
func (tb *Table) usedPoolTiers(used func(idx int64, handedOut bool)) {
	l := &tb.layout
	for idx := l.Segments; idx < l.Tiers; idx++ {
		h := tb.tier(idx).header
		if reservedZero(h[:tierHeaderSize/8]) {
			continue
		}
		owner, order := atomic.LoadUint64(&h[thOwner/8]), atomic.LoadUint64(&h[thOrder/8])
		named := owner != 0 && owner <= uint64(l.Segments)
		handedOut := named && order >= 1 && order < uint64(l.Tiers)
		switch {
		case named && !handedOut:
			// A damaged position word: entries of the segment named say it
			// was handed out (zeroed, they would be lost unreported).
			handedOut, _ = tb.keysIn(idx, int64(owner)-1)
		case !named && (owner != 0 || order != 0):
			// A damaged owner word (zero with a position is no tier given
			// up: disownStrays zeroes both): so do entries all of one
			// segment.
			handedOut = tb.keysOfOneSegment(idx) >= 0
		}
		used(idx, handedOut)
	}
}

// poolTiersInUse is how many overflow tiers the pool must have handed out:
// one past the highest that a chain links and a rebuild would keep
// (linkedPoolTiers), or that looks handed out (usedPoolTiers).
func (tb *Table) poolTiersInUse() uint64 {
	n := tb.linkedPoolTiers()
	tb.usedPoolTiers(func(idx int64, handedOut bool) {
		if handedOut {
			n = max(n, uint64(idx-tb.layout.Segments+1))
		}
	})
	return n
}

// MendPoolCount sets the count of overflow tiers handed out to what the
// segments' chains and the tiers say the pool has handed out
// (poolTiersInUse), when damage moved it below that (the next link would
// take a tier in use) or beyond the pool (every link fails with ErrFull),
// and returns the count before and after. A count within the pool and above that is left as it
// is: the tiers between may have just been taken by a live process that
// has not linked them yet, and handing one out twice is worse than losing
// it. Then, under the file's admin lock, it zeroes each tier beyond the
// count whose header is not zero but does not look handed out (strays): a
// writer gives a tier its words only after the count covers it, so those
// are damage, or what is left of a tier damage cut from every chain, and
// left there they would make the pool refuse the tier. Part of repairing
// a damaged file.
func (tb *Table) MendPoolCount() (from, to uint64, strays int, mended bool) {
	l := &tb.layout
	pool := uint64(l.Tiers - l.Segments)
	if tb.admin != nil {
		tb.admin.Lock()
		defer func() { _ = tb.admin.Unlock() }()
	}
	for {
		inUse := tb.poolTiersInUse()
		n := atomic.LoadUint64(tb.extraTiers)
		from, to = n, n
		if n >= inUse && n <= pool {
			break
		}
		if atomic.CompareAndSwapUint64(tb.extraTiers, n, inUse) {
			to, mended = inUse, true
			break
		}
	}
	if tb.admin == nil {
		return from, to, 0, mended // a tier beyond the count may be being taken
	}
	tb.usedPoolTiers(func(idx int64, handedOut bool) {
		if !handedOut && uint64(idx-l.Segments) >= to {
			// The whole tier: attachTier takes only a tier that is zero,
			// and slots left over from a tier cut loose would come back.
			words := tb.region.Uint64s(l.TiersOff+idx*l.TierSize, l.TierSize/8)
			for i := range words {
				atomic.StoreUint64(&words[i], 0)
			}
			strays++
		}
	})
	return from, to, strays, mended || strays > 0
}
