package segment

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/offheap"
)

// Tier stamps (files with Layout.Stamps).
//
// A stamp says what a tier is: whose (owner: segment index + 1; 0 for an
// overflow tier handed out and given up), where in that segment's chain
// (position: 0 for the first tier), and which hand-out of the pool made it
// (generation: the count of overflow tiers handed out once it was taken;
// 0 for first tiers), under a checksum of those and of the tier's own
// index. It takes tier header words 32 and 40, the owner and order words
// of files without stamps:
//
//	word 32 (thOwner): owner (bits 0..31) | position (bits 32..63)
//	word 40 (thOrder): generation (bits 0..31) | checksum (bits 32..63)
//
// The checksum is the low 32 bits of XXH64 over the little-endian words
// tier index, owner, position and generation, 1 for 0: a header of zeros
// never verifies, nor does a header copied to another tier. Every first
// tier is stamped when the file is created (Format): that is the mark of
// a segment, which a zeroed segment lacks. An overflow tier is stamped
// before it is linked (attachTier). Recovery and Repair take a tier for
// what its stamp says, and a stamp that does not verify for damage.

// stamp is a tier's stamp, decoded.
type stamp struct {
	owner uint32 // segment index + 1; 0: handed out, given up
	pos   uint32 // position in the owner's chain, 0 = its first tier
	gen   uint32 // the pool's count of tiers handed out once it was taken; 0 for first tiers
}

// firstStamp is the stamp of segment seg's first tier.
func firstStamp(seg int64) stamp { return stamp{owner: uint32(seg + 1)} }

// overflowStamp is the stamp of overflow tier t at position pos of segment
// seg's chain (seg -1: given up). Tiers are handed out in order and never
// taken back, so the generation is the tier's place in the pool, plus 1.
func (l *Layout) overflowStamp(t, seg, pos int64) stamp {
	return stamp{owner: uint32(seg + 1), pos: uint32(pos), gen: uint32(t - l.MaxSegments + 1)}
}

// says reports whether st is that of position pos of segment seg's chain.
func (st stamp) says(seg, pos int64) bool {
	return int64(st.owner) == seg+1 && int64(st.pos) == pos
}

// stampSum is the checksum of stamp st on tier t.
func stampSum(t int64, st stamp) uint32 {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(t))
	binary.LittleEndian.PutUint64(b[8:], uint64(st.owner))
	binary.LittleEndian.PutUint64(b[16:], uint64(st.pos))
	binary.LittleEndian.PutUint64(b[24:], uint64(st.gen))
	return checksumOf(xxhash.Sum64(b[:]))
}

// stampWords encodes stamp st of tier t as header words 32 and 40.
func stampWords(t int64, st stamp) (id, sum uint64) {
	return uint64(st.owner) | uint64(st.pos)<<32, uint64(st.gen) | uint64(stampSum(t, st))<<32
}

// decodeStamp decodes header words 32 and 40 of tier t, and reports
// whether they verify.
func decodeStamp(t int64, id, sum uint64) (stamp, bool) {
	st := stamp{owner: uint32(id), pos: uint32(id >> 32), gen: uint32(sum)}
	return st, uint32(sum>>32) == stampSum(t, st)
}

// readStamp is tier t's stamp, and whether it verifies.
func (tb *Table) readStamp(t int64) (stamp, bool) {
	h := tb.tier(t).header
	return decodeStamp(t, atomic.LoadUint64(&h[thOwner/8]), atomic.LoadUint64(&h[thOrder/8]))
}

// writeStamp stamps tier t with st: the owner and position first, then
// the generation and checksum that make them verify, so that a writer
// that dies between the two leaves a stamp that does not verify on a tier
// that holds nothing (see attachCutShort).
func (tb *Table) writeStamp(t int64, st stamp) {
	id, sum := stampWords(t, st)
	h := tb.tier(t).header
	atomic.StoreUint64(&h[thOwner/8], id)
	testStep()
	atomic.StoreUint64(&h[thOrder/8], sum)
	testStep()
}

// Format writes what a new file of layout l holds besides zeros: the
// stamp of every segment's first tier (files with stamps). The creator
// calls it before the file is marked ready; the first tiers' disk blocks
// are reserved at creation already.
func Format(r *offheap.Region, l Layout) {
	formatSplits(r.Uint64s(l.GlobalOff, globalSize/8), &l)
	if !l.Stamps {
		return
	}
	// Segments split into later are stamped by the split (emptyForSplit):
	// their first tiers stay holes until then.
	for seg := range l.Segments {
		h := r.Uint64s(l.TiersOff+seg*l.TierSize, tierHeaderSize/8)
		id, sum := stampWords(seg, firstStamp(seg))
		atomic.StoreUint64(&h[thOwner/8], id)
		atomic.StoreUint64(&h[thOrder/8], sum)
	}
}

// ownedBy reports whether overflow tier t says it is segment seg's: its
// stamp verifies and names seg, or, in a file without stamps, its owner
// word does.
func (tb *Table) ownedBy(t, seg int64) bool {
	if tb.layout.Stamps {
		st, ok := tb.readStamp(t)
		return ok && int64(st.owner) == seg+1
	}
	return atomic.LoadUint64(&tb.tier(t).header[thOwner/8]) == uint64(seg)+1
}

// attachCutShort reports whether overflow tier t holds nothing but a
// stamp, whether it verifies or not: what a writer leaves that died
// attaching it, or that is attaching it now, before it links it (see
// attachTier). Every other word of its header and every slot is zero.
func (tb *Table) attachCutShort(t int64) bool {
	tv := tb.tier(t)
	for i := range tv.header {
		if i != thOwner/8 && i != thOrder/8 && atomic.LoadUint64(&tv.header[i]) != 0 {
			return false
		}
	}
	return reservedZero(tv.slots)
}

// stampedChain is chain for a file with stamps: a tier is what its stamp
// says, and nothing is inferred. The first tier's stamp is written again
// if it does not verify (rep counts it, and whether the whole header was
// zeros: the segment's mark lost, and with it what the tier held). Each
// link is followed to a tier stamped as this segment's at that position;
// where the link leads elsewhere, the tier the pool handed out that is
// stamped so (the latest, by generation) is linked instead; failing that,
// the linked tier is taken, and stamped again, if its stamp does not
// verify and it may be mended (restampable). Anything else cuts the chain there. Then every
// tier still stamped as this segment's that the chain does not reach is
// given up (giveUpStrays). Caller holds write.
func (s *Segment) stampedChain(rep *Recovered) []int64 {
	tb := s.tb
	l := &tb.layout
	if st, ok := tb.readStamp(s.index); !ok || st != firstStamp(s.index) {
		if rep != nil {
			rep.Restamped++
			tv := tb.tier(s.index)
			rep.Zeroed = rep.Zeroed || reservedZero(tv.header)
		}
		tb.writeStamp(s.index, firstStamp(s.index))
	}
	out := []int64{s.index}
	seen := map[int64]bool{s.index: true}
	take := func(t int64) {
		seen[t] = true
		out = append(out, t)
	}
	for {
		tv := tb.tier(out[len(out)-1])
		pos := int64(len(out))
		next := tv.next()
		t := int64(next) - 1
		inPool := next != 0 && next <= uint64(tb.Present()) && t >= l.MaxSegments && !seen[t]
		st, ok := stamp{}, false
		if inPool {
			st, ok = tb.readStamp(t)
		}
		if ok && st.says(s.index, pos) {
			take(t)
			continue
		}
		if lost, found := s.stampedAt(pos, seen); found {
			atomic.StoreUint64(&tv.header[thNext/8], uint64(lost)+1)
			if rep != nil {
				rep.Relinked++
			}
			take(lost)
			continue
		}
		if inPool && !ok && tb.restampable(t) {
			tb.writeStamp(t, l.overflowStamp(t, s.index, pos))
			if rep != nil {
				rep.Restamped++
			}
			take(t)
			continue
		}
		if next != 0 {
			atomic.StoreUint64(&tv.header[thNext/8], 0)
		}
		s.giveUpStrays(seen, rep)
		return out
	}
}

// restampable reports whether overflow tier t, linked from a chain at a
// position where no tier stamped for it is found, and whose stamp does not
// verify, is taken for the chain's and stamped again: the pool has handed
// it out, its header is not all zeros (a linked tier carries a stamp, so
// zeros are a tier never handed out or one zeroed whole), and no other
// link reaches it.
func (tb *Table) restampable(t int64) bool {
	return t < tb.handedOutEnd() && !reservedZero(tb.tier(t).header) && tb.linksTo(t) == 1
}

// holdsSoundEntry reports whether a slot of tier t names an entry that
// decodes and passes its checksum.
func (tb *Table) holdsSoundEntry(t int64) bool {
	found := false
	tb.soundKeys(t, func([]byte) { found = true })
	return found
}

// stampedAt finds the overflow tier the pool has handed out, not in seen,
// whose stamp verifies and says it is at position pos of this segment's
// chain; the latest handed out if there are several (a chain cut and
// grown again since). ok is false if there is none.
func (s *Segment) stampedAt(pos int64, seen map[int64]bool) (t int64, ok bool) {
	tb := s.tb
	var gen uint32
	for i := tb.layout.MaxSegments; i < tb.handedOutEnd(); i++ {
		if st, verified := tb.readStamp(i); verified && !seen[i] && st.says(s.index, pos) && (!ok || st.gen > gen) {
			t, ok, gen = i, true, st.gen
		}
	}
	return t, ok
}

// giveUpStrays gives up every overflow tier the pool has handed out that
// is not in seen (the chain) but is stamped as this segment's, or holds
// nothing but a stamp naming it that does not verify (a writer died
// stamping it): its next word cleared first, then stamped as no one's.
// rep (if not nil) counts its sound entries as dropped. Caller holds
// write, so no writer of this segment is attaching a tier now.
func (s *Segment) giveUpStrays(seen map[int64]bool, rep *Recovered) {
	tb := s.tb
	l := &tb.layout
	for t := l.MaxSegments; t < tb.handedOutEnd(); t++ {
		if seen[t] {
			continue
		}
		st, ok := tb.readStamp(t)
		if int64(st.owner) != s.index+1 || !ok && !tb.attachCutShort(t) {
			continue
		}
		if rep != nil {
			tb.soundKeys(t, func([]byte) { rep.Dropped++ })
		}
		tb.giveUp(t)
	}
}

// GiveUpUnverified gives up (giveUp) each overflow tier the pool has
// handed out that no chain keeps: in a file with stamps, one whose stamp
// does not verify, that no tier links and that holds more than a stamp
// (see attachCutShort); in a file without them, whose tiers carry nothing
// that verifies, one that holds a sound entry and that no chain reaches by
// sound links (unreachedTiers). That is damage no chain can take back,
// left after the segments are rebuilt; dropped is called with the segment
// of each of its sound entries' keys. It returns the tiers given up. Part
// of repairing a damaged file, after the rebuilds.
func (tb *Table) GiveUpUnverified(dropped func(seg int64)) int {
	n := 0
	tb.unverifiedTiers(func(t int64) {
		tb.soundKeys(t, func(key []byte) { dropped(tb.segmentOf(xxhash.Sum64(key))) })
		tb.giveUp(t)
		n++
	})
	return n
}

// unverifiedTiers calls found for each overflow tier that
// GiveUpUnverified gives up.
func (tb *Table) unverifiedTiers(found func(t int64)) {
	l := &tb.layout
	if !l.Stamps {
		tb.unreachedTiers(found)
		return
	}
	end := tb.handedOutEnd()
	for t := l.MaxSegments; t < end; t++ {
		if _, ok := tb.readStamp(t); ok || tb.attachCutShort(t) || tb.linksTo(t) != 0 {
			continue
		}
		found(t)
	}
}

// checkStamp is check's look at the stamp of tier t, at position pos of
// the segment's chain (files with stamps).
func (s *Segment) checkStamp(t, pos int64, report reportFunc) {
	st, ok := s.tb.readStamp(t)
	switch {
	case !ok && t == s.index && reservedZero(s.tb.tier(t).header):
		report(t, "stamp does not verify: the segment's first tier header is zeroed, its mark gone (what the tier held is lost)")
	case !ok:
		report(t, "stamp does not verify")
	case st.owner == 0:
		report(t, "stamp says the tier was given up, but it is linked at position %d", pos)
	case !st.says(s.index, pos):
		report(t, "stamp says position %d of segment %d's chain, linked at position %d", st.pos, int64(st.owner)-1, pos)
	}
}
