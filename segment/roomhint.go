package segment

// Room hints.
//
// A chain grows at its end: a tier is linked only when no tier before it
// has room, so in a long chain (a map that grew far past the entries it
// was created for) nearly every tier but the last few is full. Looking
// for room from the first tier on, every insert of a new key would read
// hundreds of full tiers' headers, after its lookup already walked the
// chain. So each process keeps, per segment, the overflow tier where it
// last found room, and firstFit looks there first (roomFrom): the first
// tier (whose header is hot, and which takes home runs), then the hinted
// tier and those after it. Only when that finds no run does it walk the
// whole chain as before, which is also the only walk that compacts a tier
// or links one: a chain grows, and a tier is compacted, only where the
// full walk found no free run before, so the hint never adds a tier.
//
// Room a delete leaves in a tier between the first and the hinted one is
// skipped while the hinted walk finds room further on: the entry lands
// later in the chain, where lookups take longer to reach it. That lasts
// at most roomRewalk hinted placements: then a full walk looks from the
// first tier again and the hint moves back to where it finds room.
//
// A hint lives in this process only, is read and written under the
// segment's update lock (atomically, as the lock itself lives in the
// file, where the race detector does not see it), and a wrong one only
// costs speed, as long as it names a tier of the segment's chain: see
// hintedTier for why the check it makes before use is enough.

// roomRewalk is how many placements by the hint a segment makes before it
// walks its chain from the first tier again. A full walk of a chain of L
// tiers read L headers; spread over roomRewalk inserts it adds L/roomRewalk
// to each, against about L for every insert without hints
// (BenchmarkGrownMapInsert), and bounds how long room before the hinted
// tier is skipped (TestRoomHintKeepsDensityOnChurn).
const roomRewalk = 64

// roomHint is a segment's hint, packed in one word: the hinted tier + 1
// (0: none) in the low half, the placements made by it since the last full
// walk in the high half.
type roomHint uint64

// makeRoomHint packs tier t and uses.
func makeRoomHint(t int64, uses uint32) roomHint {
	return roomHint(uint64(uint32(t+1)) | uint64(uses)<<32)
}

// tier is the hinted tier; ok is false for none.
func (h roomHint) tier() (t int64, ok bool) {
	t = int64(uint32(h)) - 1
	return t, t >= 0
}

// uses is the placements made by the hint since the last full walk.
func (h roomHint) uses() uint32 { return uint32(h >> 32) }

// roomHint reads the segment's hint.
func (s *Segment) roomHint() roomHint { return roomHint(s.tb.roomHints[s.index].Load()) }

// setRoomHint makes overflow tier t (with uses placements counted) the
// segment's hint. A first tier leaves the hint as it is: every look for
// room starts there anyway, and room in it says nothing of the tiers
// after it. Files without stamps keep no hint (see hintedTier). Caller
// holds the update lock.
func (s *Segment) setRoomHint(t int64, uses uint32) {
	if !s.tb.layout.Stamps || t < s.tb.layout.MaxSegments {
		return
	}
	s.tb.roomHints[s.index].Store(uint64(makeRoomHint(t, uses)))
}

// hintedTier reports whether overflow tier t may be where a walk for room
// starts: its stamp verifies and says it is this segment's, at a position
// short of the chain's length. A hint names a tier this process reached by
// following the segment's links (or had just linked), under its update
// lock. A tier leaves a chain only when Recover, Rebuild or Repair (of any
// process) cut the chain, under the segment's write lock, which an insert
// holding the update lock never overlaps; and every tier they cut off
// still stamped as this segment's they give up, stamping it as no one's,
// before they release the lock (stampedChain, giveUpStrays). The pool
// never hands a tier out again, and a Repair that takes a given-up tier
// back into a chain (restampable) stamps it for the chain it links it
// into. So a tier whose stamp verifies and names this segment is one of
// its chain, in a file that is not damaged; the position check also
// turns away a tier stamped by a writer that has yet to link it (or died
// first: attachTier). A Clear keeps every tier linked: the hint stays in
// the chain, and the first tier, looked at before it, takes the inserts
// that follow. In a damaged file, a tier stamped as this segment's that
// its links miss is what Check reports and Repair links back (stampedAt),
// so an entry placed there is found again. Files without stamps have no
// such evidence (a tier's owner word does not say it is still linked),
// and use no hints.
func (s *Segment) hintedTier(t int64) bool {
	tb := s.tb
	if !tb.layout.Stamps || t < tb.layout.MaxSegments || t >= tb.Present() {
		return false
	}
	st, ok := tb.readStamp(t)
	return ok && int64(st.owner) == s.index+1 && st.pos > 0 && int64(st.pos) < s.Tiers()
}

// roomFrom is firstFit's look for a run of n free chunks where the hint
// says room begins: the first tier, then the hinted tier and those after
// it. It takes the run it finds, and reports false when there is no hint
// to use (none, unverified, or due for a full walk) or no run. Caller
// holds the update lock.
func (s *Segment) roomFrom(n int64, moving *location) (tier, int64, bool) {
	tb := s.tb
	l := &tb.layout
	h := s.roomHint()
	start, ok := h.tier()
	if !ok || h.uses() >= roomRewalk || !s.hintedTier(start) {
		return tier{}, -1, false
	}
	if first := tb.tier(s.index); s.hasRoom(&first, moving) {
		if c := first.alloc(n, l.Chunks); c >= 0 {
			s.setRoomHint(start, h.uses()+1)
			return first, c, true
		}
	}
	i := start
	for hops := int64(0); hops < tb.Present(); hops++ {
		tv := tb.tier(i)
		if s.hasRoom(&tv, moving) {
			if c := tv.alloc(n, l.Chunks); c >= 0 {
				s.setRoomHint(i, h.uses()+1)
				return tv, c, true
			}
		}
		idx, ok := tb.overflowLink(tv.next())
		if !ok {
			break // the chain's end, or a damaged link: the full walk reports it
		}
		i = idx
	}
	return tier{}, -1, false
}
