package segment

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// chunksFor is the number of chunks an entry with these lengths needs
// (chunks are a power of two in size: a shift, not a division, on Put's
// path).
func (tb *Table) chunksFor(klen, vlen int) int64 {
	return (entryHeaderSize + int64(klen) + int64(vlen) + tb.layout.ChunkSize - 1) >> (tb.geom.chunkShift & 63)
}

// allocHome finds n free chunks for an entry whose slot tag is tag, new or
// moving (as allocRun): one of its two home runs in the first tier when
// that is free, else wherever allocRun finds them. A home run is a place
// computed from the tag alone (geometry.homeByte and secondHomeByte), so a
// lookup can request the entry's lines together with its slot's instead of
// after them. Two places instead of one put more entries at home (most of
// a freshly filled map's, against well under two thirds with one), and
// each entry at home saves a lookup one wait for memory. Where an entry
// lies is not part of the format: files written before (or entries that
// got no home) are read the same way, one miss later. A cost: free space
// is left in runs between entries, so a tier under churn with values of
// varied sizes compacts more often than with first fit alone, and a little
// more with two home runs than with one (BenchmarkOverwriteChurn measures
// it).
func (s *Segment) allocHome(w *writer, tag uint32, n int64, moving *location) (tier, int64, error) {
	if t, c, ok := s.takeHomeRun(tag, n, moving); ok {
		return t, c, nil
	}
	return s.allocRun(w, n, moving)
}

// takeHomeRun takes the first of tag's two home runs of n chunks that is
// free, if the first tier has room; false if neither is.
func (s *Segment) takeHomeRun(tag uint32, n int64, moving *location) (tier, int64, bool) {
	t := s.tb.tier(s.index)
	if s.hasRoom(&t, moving) {
		if c, ok := s.freeHomeRun(&t, tag, n); ok {
			t.take(c, n)
			return t, c, true
		}
	}
	return tier{}, 0, false
}

// freeHomeRun returns the first chunk of a home run of tag's, of n chunks,
// that is free in tier t (the segment's first), first home first.
func (s *Segment) freeHomeRun(t *tier, tag uint32, n int64) (int64, bool) {
	g := &s.tb.geom
	for _, home := range [2]uint64{g.homeByte(tag), g.secondHomeByte(tag)} {
		if c := int64(home >> g.chunkShift); c+n <= s.tb.layout.Chunks && t.runFree(c, n) {
			return c, true
		}
	}
	return 0, false
}

// hasRoom reports whether tier t may take one more entry: it holds fewer
// than MaxTierEntries, or moving (if not nil) is an entry moving within it.
func (s *Segment) hasRoom(t *tier, moving *location) bool {
	return int64(t.entries()) < s.tb.layout.MaxTierEntries || (moving != nil && moving.tier.index == t.index)
}

// allocFree takes n free chunks for an entry moving from moving where they
// are at hand: one of its home runs, else the first run that fits in a tier
// of the chain with room, without compacting, linking a tier or evicting.
// It reports false if there is none, having changed nothing.
func (s *Segment) allocFree(tag uint32, n int64, moving *location) (tier, int64, bool) {
	if t, c, ok := s.takeHomeRun(tag, n, moving); ok {
		return t, c, true
	}
	if t, c, _, _, err := s.firstFit(n, moving); err == nil && c >= 0 {
		return t, c, true // (a damaged link is for allocRun to report)
	}
	return tier{}, 0, false
}

// allocRun finds n free chunks in a tier of the chain with room for one more
// entry (moving, if not nil, is an entry moving out of its tier, which then
// need not have room for another). When no tier has a run but one has
// enough free chunks in pieces, it compacts that tier; when none has, it
// links a tier from the overflow pool. When the pool is used up: ErrFull,
// or in a cache map, eviction.
func (s *Segment) allocRun(w *writer, n int64, moving *location) (tier, int64, error) {
	l := &s.tb.layout
	tv, c, fragmented, last, err := s.firstFit(n, moving)
	switch {
	case err != nil:
		return tier{}, 0, err
	case c >= 0:
		return tv, c, nil
	}
	if fragmented != nil {
		if err := w.modify("compact"); err != nil {
			return tier{}, 0, err
		}
		if err := s.compact(fragmented); err != nil {
			return tier{}, 0, err
		}
		if c := fragmented.alloc(n, l.Chunks); c >= 0 {
			s.setRoomHint(fragmented.index, 0)
			return *fragmented, c, nil
		}
		return tier{}, 0, s.corrupt(fragmented.index, "no free run after compaction")
	}
	nt, err := s.linkTier(&last)
	if err != nil {
		if l.Cache && errors.Is(err, ErrFull) {
			return s.evictFor(w, n, moving)
		}
		return tier{}, 0, err
	}
	if c := nt.alloc(n, l.Chunks); c >= 0 {
		s.setRoomHint(nt.index, 0)
		return nt, c, nil
	}
	return tier{}, 0, s.corrupt(nt.index, "fresh tier has no room")
}

// firstFit finds a run of n free chunks in a tier of the segment's chain
// with room for one more entry (moving, if not nil, is an entry moving out
// of its tier) and takes it: where the room hint says room begins
// (roomFrom), else the first such run of the chain, walked from its first
// tier; c is -1 if there is none. Only when it finds none does it return
// the first tier with room whose free chunks would hold n once compacted
// (nil if none) and the chain's last tier, both from the full walk. It
// fails with ErrCorrupt on a link out of range.
func (s *Segment) firstFit(n int64, moving *location) (t tier, c int64, fragmented *tier, last tier, err error) {
	if tv, c, ok := s.roomFrom(n, moving); ok {
		return tv, c, nil, tier{}, nil
	}
	tb := s.tb
	l := &tb.layout
	i := s.index
	for hops := int64(0); hops < tb.Present(); hops++ {
		tv := tb.tier(i)
		if s.hasRoom(&tv, moving) {
			if c := tv.alloc(n, l.Chunks); c >= 0 {
				s.setRoomHint(i, 0)
				return tv, c, nil, tier{}, nil
			}
			if fragmented == nil && l.Chunks-int64(tv.usedChunks()) >= n {
				f := tv
				fragmented = &f
			}
		}
		last = tv
		next := tv.next()
		if next == 0 {
			break
		}
		if _, ok := tb.overflowLink(next); !ok {
			return tier{}, -1, nil, tier{}, s.corrupt(i, "tier link out of range")
		}
		i = int64(next - 1)
	}
	return tier{}, -1, fragmented, last, nil
}

// runFree reports whether chunks [c, c+n) are all free.
func (t *tier) runFree(c, n int64) bool {
	for i := c; i < c+n; i++ {
		if t.bitmap[i>>6]>>(uint(i)&63)&1 == 1 {
			return false
		}
	}
	return true
}

// alloc finds and marks a run of n free chunks, first fit from the lowest
// possibly free chunk. It returns -1 if the tier has no such run. Caller
// holds the update lock. It steps from one run of free or used chunks to
// the next a word at a time (trailing zeros of the bitmap word), not a
// chunk at a time: in a tier fragmented by values of varied sizes, a
// chunk-by-chunk scan took a large share of an overwrite's time.
func (t *tier) alloc(n, chunks int64) int64 {
	runStart, run := int64(0), int64(0)
	// The hint is read from the file: bounded, so a damaged one can only
	// make the search come up empty.
	for i := int64(min(t.lowestFree(), uint64(chunks))); i < chunks; {
		w := t.bitmap[i>>6] >> (uint(i) & 63) // chunks i on, to the word's end
		free := 64 - i&63
		if w != 0 {
			free = int64(bits.TrailingZeros64(w))
		}
		if free = min(free, chunks-i); free > 0 {
			if run == 0 {
				runStart = i
			}
			run += free
			i += free
			if run >= n {
				t.take(runStart, n)
				return runStart
			}
			continue
		}
		// Chunk i is used: skip it and the used chunks after it in its
		// word (w's bits past the word's end are 0, so this stops there).
		run = 0
		i += int64(bits.TrailingZeros64(^w))
	}
	return -1
}

// take marks the free run of n chunks at c used. Caller holds the update
// lock.
func (t *tier) take(c, n int64) {
	t.mark(c, n, true)
	if uint64(c) == t.lowestFree() {
		t.setLowestFree(c + n)
	}
	atomic.AddUint64(&t.header[thUsedChunks/8], uint64(n))
}

// free releases a run of n chunks at c. Caller holds the update lock.
func (t *tier) free(c, n int64) {
	t.mark(c, n, false)
	atomic.AddUint64(&t.header[thUsedChunks/8], ^uint64(n-1))
	if uint64(c) < t.lowestFree() {
		t.setLowestFree(c)
	}
}

// mark sets or clears the bits of chunks [c, c+n).
func (t *tier) mark(c, n int64, used bool) {
	for n > 0 {
		bit := uint(c & 63)
		k := int64(64 - bit)
		if k > n {
			k = n
		}
		mask := (^uint64(0) >> (64 - uint(k))) << bit
		if used {
			t.bitmap[c>>6] |= mask
		} else {
			t.bitmap[c>>6] &^= mask
		}
		c += k
		n -= k
	}
}

// linkTier takes a tier from the overflow pool and appends it to the chain
// after last. The pool is a counter: tiers are never returned, and a process
// that dies between taking and linking a tier only wastes it. In a file
// that grows, a pool used up is lengthened first (growPool), under the same
// admin lock.
func (s *Segment) linkTier(last *tier) (tier, error) {
	tb := s.tb
	l := &tb.layout
	pool := uint64(tb.Present() - l.MaxSegments)
	var idx uint64
	if tb.admin != nil {
		tb.admin.Lock()
		used := atomic.LoadUint64(tb.extraTiers)
		if used >= pool && l.Grows {
			if err := tb.growPool(used); err != nil {
				_ = tb.admin.Unlock()
				return tier{}, err
			}
			pool = uint64(tb.Present() - l.MaxSegments)
		}
		if used >= pool {
			_ = tb.admin.Unlock()
			return tier{}, s.poolExhausted(pool)
		}
		idx = uint64(l.MaxSegments) + used
		if err := tb.allocate(l.TiersOff+int64(idx)*l.TierSize, l.TierSize); err != nil {
			_ = tb.admin.Unlock()
			return tier{}, fmt.Errorf("%w: cannot reserve disk for a new tier: %v", ErrFull, err)
		}
		atomic.StoreUint64(tb.extraTiers, used+1)
		_ = tb.admin.Unlock()
		return s.attachTier(last, idx)
	}
	for {
		used := atomic.LoadUint64(tb.extraTiers)
		if used >= pool {
			return tier{}, s.poolExhausted(pool)
		}
		if atomic.CompareAndSwapUint64(tb.extraTiers, used, used+1) {
			idx = uint64(l.MaxSegments) + used
			break
		}
	}
	if err := tb.allocate(l.TiersOff+int64(idx)*l.TierSize, l.TierSize); err != nil {
		return tier{}, fmt.Errorf("%w: cannot reserve disk for a new tier: %v", ErrFull, err)
	}
	return s.attachTier(last, idx)
}

func (s *Segment) poolExhausted(pool uint64) error {
	return fmt.Errorf("%w: all %d overflow tiers are in use (segment %d has %d entries); create the map with more entries or a larger MaxBloatFactor", ErrFull, pool, s.index, s.Len())
}

// attachTier initializes tier idx, just taken from the pool, and links it
// after last. A tier the pool hands out has never been written; one whose
// header is not zero is another segment's, handed out again by a pool
// counter that damage moved back, or damaged itself, and is left alone
// (ErrCorrupt, and the tier is lost to the pool) rather than taken from
// under the entries it may hold. In a file with stamps the tier is
// stamped before it is linked, so that a linked tier always carries its
// stamp (see stampedChain for a writer that dies in between).
func (s *Segment) attachTier(last *tier, idx uint64) (tier, error) {
	nt := s.tb.tier(int64(idx))
	if !reservedZero(nt.header[:tierHeaderSize/8]) {
		return tier{}, s.corrupt(int64(idx), "the overflow pool handed out a tier that is not zero: its count is damaged, or the tier (Repair mends them)")
	}
	testStep() // taken from the pool, still blank
	if l := &s.tb.layout; l.Stamps {
		s.tb.writeStamp(int64(idx), l.overflowStamp(int64(idx), s.index, s.Tiers()))
	} else {
		// Both words before the link, and entries only after it: a
		// writer that dies in between leaves an empty tier that no chain
		// reaches, which recovery gives up at no loss.
		atomic.StoreUint64(&nt.header[thOwner/8], uint64(s.index)+1)
		testStep()
		atomic.StoreUint64(&nt.header[thOrder/8], uint64(s.Tiers()))
		testStep()
	}
	atomic.StoreUint64(&last.header[thNext/8], idx+1) // publish: readers may follow it now
	testStep()
	atomic.AddUint64(s.tiers, 1)
	return nt, nil
}
