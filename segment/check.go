package segment

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/offheap"
)

// Check verifies segment s without its lock or writing, calls problem for
// each thing no correct writer leaves, and returns the entries it found.
func (s *Segment) Check(problem func(error)) int64 {
	// Check verifies segment s without taking its lock or writing
	// anything, and calls problem for each thing no correct writer leaves
	// behind: lock and sequence states (which a live writer may show for
	// an instant), chain links, slots, entries and their checksums, keys
	// in the wrong segment or present twice, and counters that disagree.
	// It returns the number of entries it found.
	return new(Checker).check(s, problem, false)
}

// Checker checks segments as Segment.Check does, keeping the space it
// needs from one segment to the next: a check of every segment of a large
// map then allocates nothing per entry. The zero value is ready; one
// Checker serves one goroutine at a time.
type Checker struct {
	// keys is where, in names, the key of each hash seen in the
	// segment lies: a key found twice has one hash, so only keys of a
	// hash seen before are compared (and a distinct key with the same
	// hash goes in others).
	keys   map[uint64]keySpan
	names  []byte
	others map[string]bool
	used   []uint64 // the chunks of a tier that entries occupy
	parts  int64    // part entries seen in the segment (files with LargeValues)
}

// keySpan is where a key lies in Checker.names.
type keySpan struct{ off, n int }

// Check is Segment.Check of s, with c's space.
func (c *Checker) Check(s *Segment, problem func(error)) int64 {
	return c.check(s, problem, false)
}

// check is Check, with a Checker of its own; updating says that the
// caller holds the update lock, which the lock word then shows.
func (s *Segment) check(problem func(error), updating bool) int64 {
	return new(Checker).check(s, problem, updating)
}

// check is Check; updating says that the caller holds the update lock,
// which the lock word then shows.
func (c *Checker) check(s *Segment, problem func(error), updating bool) int64 {
	report := func(t int64, format string, args ...any) { problem(s.corrupt(t, fmt.Sprintf(format, args...))) }
	s.checkHeader(report, updating)
	c.reset()
	total, tiers := s.checkChain(c, report)
	if n := s.entryCount(); n != total {
		report(-1, "header counts %d entries, tiers hold %d", n, total)
	}
	if n := s.Parts(); s.tb.layout.LargeValues && n != c.parts {
		report(-1, "header counts %d parts of large values, tiers hold %d", n, c.parts)
	}
	if n := s.Tiers(); n != tiers {
		report(-1, "header counts %d tiers, chain has %d", n, tiers)
	}
	return total
}

// reset forgets the keys of the segment checked last.
func (c *Checker) reset() {
	if c.keys == nil {
		c.keys = make(map[uint64]keySpan)
	}
	clear(c.keys)
	clear(c.others)
	c.names = c.names[:0]
	c.parts = 0
}

// seen reports whether key, whose hash is h, was seen before in the
// segment, and remembers it.
func (c *Checker) seen(key []byte, h uint64) bool {
	at, ok := c.keys[h]
	switch {
	case !ok:
		c.keys[h] = keySpan{len(c.names), len(key)}
		c.names = append(c.names, key...)
		return false
	case string(c.names[at.off:at.off+at.n]) == string(key):
		return true
	case c.others[string(key)]:
		return true
	}
	if c.others == nil {
		c.others = make(map[string]bool)
	}
	c.others[string(key)] = true
	return false
}

// usedBits returns c's bitmap of occupied chunks for a tier of n words,
// zeroed.
func (c *Checker) usedBits(n int) []uint64 {
	if cap(c.used) < n {
		c.used = make([]uint64, n)
	}
	c.used = c.used[:n]
	clear(c.used)
	return c.used
}

// reportFunc is how check's steps report a problem in tier t (-1: the
// segment's header).
type reportFunc func(t int64, format string, args ...any)

// checkHeader is check's look at the segment's header: the lock word, the
// sequence, the clearing word, the undo record and the reserved words.
func (s *Segment) checkHeader(report reportFunc, updating bool) {
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
}

// checkChain is check's walk of the segment's chain: each tier's header
// words and entries (checkTier), and the links. It returns the entries
// found and the tiers walked.
func (s *Segment) checkChain(c *Checker, report reportFunc) (total, tiers int64) {
	l := &s.tb.layout
	t := s.index
	seen := map[int64]bool{}
	for {
		seen[t] = true
		tiers++
		tv := s.tb.tier(t)
		if l.Stamps {
			s.checkStamp(t, tiers-1, report)
		} else if t >= l.MaxSegments {
			// Repair cuts the chain at such a tier: say how to save
			// what it cuts off before it does.
			const cut = "Repair cuts the chain here, reporting what the tiers from here on hold dropped; mapctl dump --salvage, run before it, follows the links as they are and writes out what they reach"
			if owner := atomic.LoadUint64(&tv.header[thOwner/8]); owner != uint64(s.index)+1 {
				report(t, "overflow tier owned by %d, linked from segment %d: %s", int64(owner)-1, s.index, cut)
			}
			if order := atomic.LoadUint64(&tv.header[thOrder/8]); order != uint64(tiers-1) {
				report(t, "overflow tier at position %d of the chain says it is at %d: %s", tiers-1, order, cut)
			}
		}
		if atomic.LoadUint64(&tv.header[thMove/8]) != 0 || atomic.LoadUint64(&tv.header[thMoveDone/8]) != 0 {
			report(t, "a compaction move was cut short (recovery finishes it)")
		}
		total += s.checkTier(&tv, c, report)
		next := tv.next()
		if next == 0 {
			return total, tiers
		}
		nt := int64(next - 1)
		if _, ok := s.tb.overflowLink(next); !ok || seen[nt] {
			report(t, "next-tier link %d leads outside the pool or back into the chain", next)
			return total, tiers
		}
		t = nt
	}
}

// checkTier is check's look at the slots and entries of tier tv, whose
// keys it adds to ck's (the keys of the tiers before it in the chain), and
// at the tier's bitmap and counts. It returns the entries found.
func (s *Segment) checkTier(tv *tier, ck *Checker, report reportFunc) int64 {
	tb := s.tb
	l := &tb.layout
	t := tv.index
	var entries, chunks int64
	used := ck.usedBits(len(tv.bitmap))
	for pos, sl := range tv.slots {
		if pos+checkAhead < len(tv.slots) {
			requestEntry(tv, tv.slots[pos+checkAhead], l)
		}
		if sl == 0 {
			continue
		}
		c := slotChunk(sl)
		klen, vlen, nch, ok := tb.entryAt(tv, c)
		if !ok {
			report(t, "slot %d: entry at chunk %d is undecodable", pos, c)
			continue
		}
		if !reachable(tv.slots, int64(slotTag(sl))&int64(l.slotMask), int64(pos), int64(l.slotMask)) {
			report(t, "slot %d: a lookup cannot reach it (an empty slot lies between it and its home)", pos)
		}
		key := tb.entryKey(tv, c, klen)
		if _, _, ok := tb.userValue(tb.entryValue(tv, c, klen, vlen)); !ok {
			report(t, "slot %d: cache entry at chunk %d is too short for its expiry", pos, c)
		}
		if _, _, ok := tb.validEntry(tv, c); !ok {
			// Still an entry for the counts below: one problem, not four.
			report(t, "slot %d: entry at chunk %d fails its checksum", pos, c)
		}
		h := xxhash.Sum64(key)
		if s.tb.segmentOf(h) != s.index || uint32(h>>l.tagShift) != slotTag(sl) {
			report(t, "slot %d: key %q does not hash to this segment and tag", pos, key)
		}
		if tb.kindAt(tv, c) == kindPart {
			ck.parts++
		} else if ck.seen(key, h) {
			// Part keys are random ids: only user keys can meet twice.
			report(t, "key %q stored twice", key)
		}
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
	if free := firstFree(tv.bitmap, l.Chunks); tv.lowestFree() > uint64(free) {
		report(t, "lowest-free hint %d lies past free chunk %d", tv.lowestFree(), free)
	}
	return entries
}

// firstFree is the first chunk of the n a bitmap covers that is free, or
// n if none is. The allocator's hint (lowestFree) never lies past it.
func firstFree(bitmap []uint64, n int64) int64 {
	for i, w := range bitmap {
		if w != ^uint64(0) {
			return min(int64(i)*64+int64(bits.TrailingZeros64(^w)), n)
		}
	}
	return n
}

// checkAhead is how many slots ahead of the one checkTier looks at it
// requests the entry named: the slots name their entries in hash order,
// all over the tier's space, so without the request each entry would be
// a wait for memory, one after the other.
const checkAhead = 16

// requestEntry asks for the first lines of the entry slot sl of tier tv
// names, if any, without waiting for them (a hint, see
// offheap.PrefetchForRead).
func requestEntry(tv *tier, sl uint64, l *Layout) {
	if sl == 0 {
		return
	}
	if off := slotChunk(sl) * l.ChunkSize; off >= 0 && off < int64(len(tv.space)) {
		offheap.PrefetchForRead(tv.space[off:min(off+prefetchSkip, int64(len(tv.space)))])
	}
}

// reserved returns segment s's header and the words of it and of its
// counters that no writer uses (words nobody writes, so anything in them is
// damage). The sleepers word's high half is reserved too.
func (s *Segment) reserved() (head, header, counters []uint64) {
	l := &s.tb.layout
	head = s.tb.region.Uint64s(l.SegmentsOff+s.index*segmentHeaderSize, segmentHeaderSize/8)
	switch {
	case l.LargeValues:
		header = head[shParts/8+1:] // the count of parts comes first
	case !l.Cache:
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
	end := l.UndoOff + l.MaxSegments*l.UndoSize // UndoOff is the end of the counters, UndoSize 0 without undo records
	from := int64(gExtraTiersUsed + 8)
	if l.Grows {
		// The growth log's count, and its steps (a damaged count leaves
		// the whole log to be checked as the count: see checkGrowth).
		n := min(atomic.LoadUint64(tb.region.Uint64(l.GlobalOff+gGrowthSteps)), maxGrowthStepsOf(l))
		from = gGrowthLog + int64(n)*growthStepBytes
	}
	to := int64(globalSize)
	if l.Splits {
		to = gSegments // N and the split claim, on the last two lines
	}
	return tb.region.Uint64s(l.GlobalOff+from, (to-from)/8), tb.region.Uint64s(end, (l.TiersOff-end)/8)
}

// CheckGlobal verifies, read-only, the table's global state: the count of
// overflow tiers handed out, and the reserved bytes.
func (tb *Table) CheckGlobal(problem func(error)) {
	// CheckGlobal verifies, read-only, the table's global state: the count
	// of overflow tiers handed out is within the pool and covers every
	// tier a segment links or that has an owner, and the reserved bytes
	// are zero (nothing writes them, so anything else is damage).
	l := &tb.layout
	tb.refreshTiers()
	tb.checkGrowth(problem)
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
	case n > uint64(tb.Present()-l.MaxSegments):
		problem(fmt.Errorf("%w: %d overflow tiers handed out, the pool has %d; Repair mends the count", ErrCorrupt, n, tb.Present()-l.MaxSegments))
	case n < inUse:
		problem(fmt.Errorf("%w: %d overflow tiers handed out, but %d are linked or owned: the next link would take a tier in use; Repair mends the count", ErrCorrupt, n, inUse))
	}
	for _, idx := range strays {
		if uint64(idx-l.MaxSegments) >= max(n, inUse) {
			problem(fmt.Errorf("%w: overflow tier %d is not zero, but the pool has not handed it out and no chain keeps it: the pool would refuse it; Repair clears it", ErrCorrupt, idx))
		}
	}
	tb.UnlinkedTiers(func(seg, t int64) {
		problem(fmt.Errorf("%w: overflow tier %d holds entries of segment %d, but no chain links it: Repair links it back, or reports its entries dropped", ErrCorrupt, t, seg))
	})
	tb.unverifiedTiers(func(t int64) {
		if !l.Stamps {
			problem(fmt.Errorf("%w: overflow tier %d holds entries, but no chain reaches it: Repair gives it up, reporting them dropped", ErrCorrupt, t))
			return
		}
		problem(fmt.Errorf("%w: overflow tier %d: stamp does not verify, and no chain links it: Repair gives it up, reporting its entries dropped", ErrCorrupt, t))
	})
	if l.Splits {
		w, c := atomic.LoadUint64(tb.active), atomic.LoadUint64(tb.activeCopy)
		n, ok := segmentsFromWord(w)
		nc, okc := segmentsFromWord(c)
		switch {
		case !ok || !okc:
			problem(fmt.Errorf("%w: a copy of the count of segments in use does not verify (%#x, %#x); Repair mends it from the other", ErrCorrupt, w, c))
		case n != nc:
			problem(fmt.Errorf("%w: the two copies of the count of segments in use differ (%d, %d); Repair mends the second from the first", ErrCorrupt, n, nc))
		case n < uint64(l.Segments) || n > uint64(l.MaxSegments):
			problem(fmt.Errorf("%w: the global state says %d segments are in use, not within the %d the map was created with and the %d it may split into", ErrCorrupt, n, l.Segments, l.MaxSegments))
		}
	}
	global, padding := tb.reservedGlobal()
	if !reservedZero(global) {
		problem(fmt.Errorf("%w: reserved bytes of the global state are not zero", ErrCorrupt))
	}
	if !reservedZero(padding) {
		problem(fmt.Errorf("%w: the padding before the tiers is not zero", ErrCorrupt))
	}
}

// UnlinkedTiers calls found, in a file with stamps, for each overflow tier
// handed out that no tier links and that is stamped as segment seg's: a
// tier a damaged link cut from seg's chain.
func (tb *Table) UnlinkedTiers(found func(seg, tier int64)) {
	// It is what a rebuild of one segment can leave behind when the link
	// that reached the tier was another chain's damaged one, cut only by
	// that chain's rebuild afterwards; rebuilding seg again then links it
	// back (see stampedAt) or counts its entries as dropped. A tier a
	// live writer is attaching (stamped, not linked yet) holds nothing but
	// its stamp, and is not reported. In a file without stamps a tier no
	// chain reaches is given up, not linked back (GiveUpUnverified).
	l := &tb.layout
	if !l.Stamps {
		return
	}
	end := tb.handedOutEnd()
	linked := make(map[int64]bool)
	for i := int64(0); i < end; i++ {
		if i == tb.SegmentsTouched() && i < l.MaxSegments {
			i = l.MaxSegments // first tiers of segments not split into: holes, never read
			if i >= end {
				break
			}
		}
		if next := tb.tierNext(i); next != 0 && next <= uint64(tb.Present()) {
			linked[int64(next)-1] = true
		}
	}
	for t := l.MaxSegments; t < end; t++ {
		// Stamped as a segment's, and more than a tier being attached:
		// that segment's rebuild links it or gives it up.
		if st, ok := tb.readStamp(t); !linked[t] && ok && st.owner != 0 && !tb.attachCutShort(t) {
			found(int64(st.owner)-1, t)
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
	for i := range tb.SegmentsTouched() {
		t := tb.tier(i)
		seen := map[int64]bool{}
		for pos := int64(1); pos < tb.Present(); pos++ {
			next := t.next()
			idx := int64(next) - 1
			if next == 0 || next > uint64(tb.Present()) || idx < l.MaxSegments || seen[idx] {
				break
			}
			if ours, _ := tb.linkedTierIsOf(i, idx, pos); !ours {
				break
			}
			seen[idx] = true
			n = max(n, uint64(idx-l.MaxSegments+1))
			t = tb.tier(idx)
		}
	}
	return n
}

// usedPoolTiers calls used for each overflow tier whose header is not all
// zeros, as the pool hands every tier out, saying whether the tier looks
// handed out: its stamp verifies (files with stamps), or its owner word
// names a segment and its position word a place in a chain, as attachTier
// leaves them (files without), or it holds a sound entry. Damage to a word
// of a tier never handed out leaves it looking otherwise; a tier a damaged
// link cut loose, whose entries Repair reports dropped when it gives it
// up, looks handed out.
func (tb *Table) usedPoolTiers(used func(idx int64, handedOut bool)) {
	l := &tb.layout
	data := int64(-1) // the bytes up to it are data, as far as known
	for idx := l.MaxSegments; idx < tb.Present(); idx++ {
		if off := l.TiersOff + idx*l.TierSize; tb.dataAt != nil && off >= data {
			// Headers in a hole of the file are zeros: skip them unread.
			start, end, ok := tb.dataAt(off)
			switch {
			case !ok:
				data = l.TiersOff + tb.Present()*l.TierSize // it cannot tell: read every header
			case start >= off+tierHeaderSize:
				next := (start - l.TiersOff) / l.TierSize // the tier start is in
				if start >= l.TiersOff+next*l.TierSize+tierHeaderSize {
					next++ // its header is in the hole too
				}
				idx = next - 1
				continue
			default:
				data = end
			}
		}
		h := tb.tier(idx).header
		if reservedZero(h[:tierHeaderSize/8]) {
			continue
		}
		// The words are written only after the count covers the tier;
		// damaged, a sound entry says the tier was handed out (which stray
		// bytes cannot forge), for Repair to give it up and report the
		// entry's loss rather than zero it unsaid.
		var words bool
		if l.Stamps {
			_, words = tb.readStamp(idx)
		} else {
			owner, order := atomic.LoadUint64(&h[thOwner/8]), atomic.LoadUint64(&h[thOrder/8])
			words = owner != 0 && owner <= uint64(l.MaxSegments) && order >= 1 && order < uint64(tb.Present())
		}
		used(idx, words || tb.holdsSoundEntry(idx))
	}
}

// poolTiersInUse is how many overflow tiers the pool must have handed out:
// one past the highest that a chain links and a rebuild would keep
// (linkedPoolTiers), or that looks handed out (usedPoolTiers).
func (tb *Table) poolTiersInUse() uint64 {
	n := tb.linkedPoolTiers()
	tb.usedPoolTiers(func(idx int64, handedOut bool) {
		if handedOut {
			n = max(n, uint64(idx-tb.layout.MaxSegments+1))
		}
	})
	return n
}

// MendPoolCount puts right a damaged count of overflow tiers handed out and
// zeroes stray tier headers beyond it, under the admin lock, returning the
// count before and after. Part of repairing a damaged file.
func (tb *Table) MendPoolCount() (from, to uint64, strays int, mended bool) {
	// MendPoolCount sets the count of overflow tiers handed out to what
	// the segments' chains and the tiers say the pool has handed out
	// (poolTiersInUse), when damage moved it below that (the next link
	// would take a tier in use) or beyond the pool (every link fails with
	// ErrFull), and returns the count before and after. A count within the
	// pool and above that is left as it is: the tiers between may have
	// just been taken by a live process that has not linked them yet, and
	// handing one out twice is worse than losing it. Then, under the
	// file's admin lock, it zeroes each tier beyond the count whose header
	// is not zero but does not look handed out (strays): a writer gives a
	// tier its words only after the count covers it, so those are damage,
	// or what is left of a tier damage cut from every chain, and left
	// there they would make the pool refuse the tier. Part of repairing a
	// damaged file.
	l := &tb.layout
	tb.refreshTiers()
	pool := uint64(tb.Present() - l.MaxSegments)
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
		if !handedOut && uint64(idx-l.MaxSegments) >= to {
			// The whole tier: attachTier takes only a tier that is zero,
			// and slots left over from a tier cut loose would come back.
			words := tb.tierWordsOf(idx)
			for i := range words {
				atomic.StoreUint64(&words[i], 0)
			}
			strays++
		}
	})
	return from, to, strays, mended || strays > 0
}
