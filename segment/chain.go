package segment

import (
	"slices"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

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
// All of this weighing is for files without stamps: in a file with them,
// a tier is what its stamp says (stampedChain).
func (s *Segment) chain(salvage bool, rep *Recovered) []int64 {
	tb := s.tb
	tb.refreshTiers() // a link past the tiers this process has seen may be sound: the file may have grown
	if tb.layout.Stamps {
		return s.stampedChain(rep)
	}
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
		if next != 0 && next <= uint64(tb.Present()) && t >= l.MaxSegments && !seen[t] {
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
		if ours && t < l.MaxSegments+tb.ExtraTiersInUse() {
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
		for t := l.MaxSegments; t < end; t++ {
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
			case owner > uint64(l.MaxSegments), owner == 0 && order != 0: // damaged: weighed by its keys
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
	for t := l.MaxSegments; t < end; t++ {
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
// pool has handed the tier out is the caller's to weigh. In a file with
// stamps it is when its stamp says so, or when its stamp does not verify
// but may be mended (restampable), as stampedChain takes it.
func (tb *Table) linkedTierIsOf(index, t, pos int64) (ours, mend bool) {
	if tb.layout.Stamps {
		if st, ok := tb.readStamp(t); ok {
			return st.says(index, pos), false
		}
		return tb.restampable(t), true
	}
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
		if next == 0 || next > uint64(tb.Present()) {
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
// tiers, other than t itself, whose next word names tier t.
func (tb *Table) linksTo(t int64) int {
	end := tb.handedOutEnd()
	n := 0
	for i := int64(0); i < end; i++ {
		// A tier's link to itself is no chain's (a walk cuts it as a
		// cycle): counted, it would hide the tier from the chain it
		// belongs to, and its entries would be lost unreported.
		if tv := tb.tier(i); i != t && tv.next() == uint64(t)+1 {
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
		if tb.segmentOf(xxhash.Sum64(key)) == index {
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
		switch s := tb.segmentOf(xxhash.Sum64(key)); {
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
	return min(tb.layout.MaxSegments+tb.ExtraTiersInUse(), tb.Present())
}
