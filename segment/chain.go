package segment

import (
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// chain lists the tiers of the segment, first tier first, and cuts it at
// the first link it does not follow. In a file with stamps a tier is what
// its stamp says (stampedChain). In a file without them nothing is
// inferred: a link is followed while it is sound (soundLink), and the
// chain is cut at the first that is not; then the tiers whose owner word
// names this segment but that the chain does not reach are given up
// (giveUpOwned), what they held counted as dropped in rep (if not nil). A
// writer attaching a tier writes its owner and position words before the
// link, and its entries only after it, so one that died attaching leaves
// an empty tier, given up at no loss. Caller holds write.
func (s *Segment) chain(rep *Recovered) []int64 {
	tb := s.tb
	tb.refreshTiers() // a link past the tiers this process has seen may be sound: the file may have grown
	if tb.layout.Stamps {
		return s.stampedChain(rep)
	}
	out := []int64{s.index}
	seen := map[int64]bool{s.index: true}
	for {
		tv := tb.tier(out[len(out)-1])
		next := tv.next()
		if t, ok := tb.soundLink(s.index, next, int64(len(out)), seen); ok {
			seen[t] = true
			out = append(out, t)
			continue
		}
		if next != 0 {
			atomic.StoreUint64(&tv.header[thNext/8], 0)
		}
		s.giveUpOwned(seen, rep)
		return out
	}
}

// soundLink reports whether next, the link at position pos-1 of segment
// seg's chain in a file without stamps, is one to follow, and the tier it
// names: a tier of the overflow area not in seen (the chain so far) whose
// owner word names seg and whose position word says pos, as attachTier
// leaves it. The count of tiers handed out is not asked: it is one word,
// which damage may lower, and Repair mends it from the links sound here.
func (tb *Table) soundLink(seg int64, next uint64, pos int64, seen map[int64]bool) (int64, bool) {
	t, ok := tb.overflowLink(next)
	if !ok || seen[t] {
		return 0, false
	}
	ours, _ := tb.linkedTierIsOf(seg, t, pos)
	return t, ours
}

// giveUpOwned gives up (giveUp) each overflow tier the pool has handed out,
// in a file without stamps, whose owner word names this segment but that
// is not in seen (the chain), counting its sound entries as dropped in rep
// (if not nil). A tier holding a sound entry of another segment's key is
// left for Repair (GiveUpUnverified), which counts each entry in its own
// key's segment: damage to the owner word made it this segment's. Caller
// holds write, so no writer of this segment is attaching a tier now.
func (s *Segment) giveUpOwned(seen map[int64]bool, rep *Recovered) {
	tb := s.tb
	for t := tb.layout.MaxSegments; t < tb.handedOutEnd(); t++ {
		if seen[t] || atomic.LoadUint64(&tb.tier(t).header[thOwner/8]) != uint64(s.index)+1 {
			continue
		}
		var mine int64
		others := false
		tb.soundKeys(t, func(key []byte) {
			if tb.segmentOf(xxhash.Sum64(key)) == s.index {
				mine++
			} else {
				others = true
			}
		})
		if others {
			continue
		}
		if rep != nil {
			rep.Dropped += mine
		}
		tb.giveUp(t)
	}
}

// giveUp makes overflow tier t no one's: its next word is cleared first,
// so that it links nothing, then it is stamped with owner 0, or, in a file
// without stamps, its slots are cleared (what it held, reported dropped,
// is not counted again) and its owner and position words zeroed.
func (tb *Table) giveUp(t int64) {
	tv := tb.tier(t)
	atomic.StoreUint64(&tv.header[thNext/8], 0)
	testStep()
	if l := &tb.layout; l.Stamps {
		tb.writeStamp(t, l.overflowStamp(t, -1, 0))
		return
	}
	for i := range tv.slots {
		atomic.StoreUint64(&tv.slots[i], 0)
	}
	atomic.StoreUint64(&tv.header[thOwner/8], 0)
	atomic.StoreUint64(&tv.header[thOrder/8], 0)
	testStep()
}

// unreachedTiers calls found for each overflow tier the pool has handed
// out, in a file without stamps, that holds a sound entry and that no
// chain reaches by sound links. A live writer links a tier before it puts
// an entry in it, and chains only grow, so the chains are walked again
// after the tiers are looked at: a tier a writer linked meanwhile is
// reached then.
func (tb *Table) unreachedTiers(found func(t int64)) {
	var unreached []int64
	reached := tb.reachedTiers()
	for t := tb.layout.MaxSegments; t < tb.handedOutEnd(); t++ {
		if !reached[t] && tb.holdsSoundEntry(t) {
			unreached = append(unreached, t)
		}
	}
	if len(unreached) == 0 {
		return
	}
	reached = tb.reachedTiers()
	for _, t := range unreached {
		if !reached[t] {
			found(t)
		}
	}
}

// reachedTiers is the overflow tiers the segments' chains reach by sound
// links, in a file without stamps.
func (tb *Table) reachedTiers() map[int64]bool {
	reached := map[int64]bool{}
	for seg := range tb.SegmentsTouched() {
		for t, pos := seg, int64(1); ; pos++ {
			next, ok := tb.soundLink(seg, tb.tierNext(t), pos, reached)
			if !ok {
				break
			}
			reached[next] = true
			t = next
		}
	}
	return reached
}

// linkedTierIsOf reports whether overflow tier t, which segment index's
// chain links at position pos, is that segment's, and whether its header
// needs mending to say so. In a file with stamps it is when its stamp says
// so, or when its stamp does not verify but may be mended (restampable),
// as stampedChain takes it. In a file without them it is when its owner
// word names the segment and its position word says pos; it is never
// mended. Whether the pool has handed the tier out is the caller's to
// weigh.
func (tb *Table) linkedTierIsOf(index, t, pos int64) (ours, mend bool) {
	if tb.layout.Stamps {
		if st, ok := tb.readStamp(t); ok {
			return st.says(index, pos), false
		}
		return tb.restampable(t), true
	}
	h := tb.tier(t).header
	return atomic.LoadUint64(&h[thOwner/8]) == uint64(index)+1 && atomic.LoadUint64(&h[thOrder/8]) == uint64(pos), false
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
