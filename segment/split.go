package segment

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
)

// A file that splits (Layout.Splits) starts with Segments segments in use
// and grows to MaxSegments by linear hashing: with N segments in use, N in
// [M, 2M) for M a power of two, the next split is of segment p = N - M
// into p and N, and it moves the keys whose hash has bit M set. N lives in
// the global state (gSegments), on a line of its own; every process reads
// it on every keyed operation (segmentFor).
//
// A split holds the split claim (gSplitClaim), which names the process
// (its registry slot and that slot's generation, from SetSplitter), so
// that one split runs at a time in the whole file. It then try-locks, for
// writing and without ever waiting, segment N (c) and segment p: the
// caller may hold other segment locks, as a Compute's function does, and
// a split that cannot have its locks at once is skipped, not waited for.
// With both sequences odd it empties c (a split killed before its commit
// may have left entries there), copies to c every entry of p that maps to
// c under N+1, and commits by storing N+1. Then it removes the copies'
// originals from p, makes the sequences even and lets go.
//
// A death before the commit leaves c garbage that nothing reads: no key
// maps to a segment at or past N, and Check skips them. A death after it
// leaves p with stale copies of moved keys: recovery of p (it was held for
// writing by a dead process) rebuilds it, and rebuild keeps only the
// entries that map to the segment under the current N. The claim of a
// dead process is released by a would-be splitter that finds it
// (TrySplit), under the map's recovery lock, which then recovers the
// segments that split may hold (SplitHeld), c among them, whose lock
// nobody else ever waits for; not the whole map, inside an insert.
//
// A split that fails for want of room (a full pool or disk) is left alone
// by its process until N changes or a second passes (splitRetryDelay):
// every crowded insert asks for a split, and a failed one costs a pass
// over p under its write lock.
//
// Lock-free readers read N before the segment's sequence and again after
// their closing read of it: the split stores N+1 while p's sequence is odd,
// so a read that the sequence validates ran wholly before the split, or
// after it, and then saw the new N or fails the second check. Every
// locked path checks, once it holds the segment's lock, that the key still
// maps to the segment (lockKeyed, keyedRead): a split of that segment
// needs its write lock, so the answer holds until it lets go.

// Global state words of files that split: the last two lines of the page,
// which the growth log then stops short of.
const (
	gSegments     = globalSize - 128 // N: the segments in use, as a checked word (segmentsWord)
	gSegmentsCopy = gSegments + 8    // a second copy of that word, on the same line
	gSplitClaim   = globalSize - 64  // who is splitting: 0 = nobody; else the claimer's id (SetSplitter)
)

// N is stored as a checked word: N in the low 32 bits and a check of it in
// the high 32, twice (gSegments, gSegmentsCopy). N finds the segment of
// every key in a map that split, and one flipped bit that kept it in range
// would send lookups to the wrong segment (a wrong Absent) and a later
// rebuild would drop entries as belonging elsewhere: readers take the
// first copy if it verifies, else the second. A split stores the first,
// then the second; recovery and Repair make them agree (MendSegmentCount).

// segmentsWord is N as a checked word.
func segmentsWord(n uint64) uint64 { return n&0xffffffff | uint64(segmentsCheck(n))<<32 }

// segmentsCheck is the check of N: never 0, so that a zeroed word does not
// verify.
func segmentsCheck(n uint64) uint32 {
	return uint32(((n&0xffffffff)+1)*0x9E3779B97F4A7C15>>32) | 1
}

// segmentsFromWord is the N a checked word holds, and whether it verifies.
func segmentsFromWord(w uint64) (uint64, bool) {
	n := w & 0xffffffff
	return n, uint32(w>>32) == segmentsCheck(n)
}

// splitter is what a table knows of splitting in its file.
type splitter struct {
	// pauseMu guards pauses: how many of this process's PauseSplits hold
	// the claim now (they share it: the last to resume releases it).
	pauseMu sync.Mutex
	pauses  int
	claim   *uint64 // nil: the file does not split
	id      uint64  // this process's claim id (never 0)
	// at is the segment size past which an insert asks for a split: three
	// deviations above the mean a segment was created for (see
	// openSplits). MaxInt64 in files that do not split.
	at int64
	// gone reports whether a claim id names a process that is gone;
	// recover releases such a claim and recovers the segments its split
	// may hold (SplitHeld), and reports whether it did; recoverSegment
	// recovers one segment (see SetSplitter). Nil: a table with no
	// registry, which leaves them alone.
	gone           func(id uint64) bool
	recover        func() bool
	recoverSegment func(seg int64)

	// A split that failed for want of room (a full pool or disk) is not
	// tried again by this process while N stays failedAt, until the
	// clock passes retryAt: each try empties c and scans p under p's
	// write lock, and every crowded insert would ask for one. failedAt
	// 0: no split failed (N is never 0).
	failedAt   atomic.Int64
	retryAt    atomic.Int64 // Table.now's clock
	retryDelay time.Duration
	// allocated is the highest segment whose first tier this process
	// has had allocate reserve, so that a split that cannot have its
	// locks does not make the same system call again at every try.
	allocated atomic.Int64
}

// splitRetryDelay is how long a process leaves splits alone after one
// failed for want of room, unless N changes meanwhile: a full pool stays
// full until a growth or a resize, and a full disk until a user frees it.
const splitRetryDelay = time.Second

// maxGrowthStepsOf is how many steps the growth log of a file laid out as
// l holds: fewer in files that split, whose last lines hold N and the claim.
func maxGrowthStepsOf(l *Layout) uint64 {
	if l.Splits {
		return (gSegments - gGrowthLog) / growthStepBytes
	}
	return maxGrowthSteps
}

// openSplits points the table at N, and at the claim in files that split.
func (tb *Table) openSplits() {
	l := &tb.layout
	tb.split = splitter{at: math.MaxInt64, retryDelay: splitRetryDelay}
	if !l.Splits {
		n := segmentsWord(uint64(l.Segments))
		tb.active, tb.activeCopy = &n, &n
		return
	}
	tb.active = tb.region.Uint64(l.GlobalOff + gSegments)
	tb.activeCopy = tb.region.Uint64(l.GlobalOff + gSegmentsCopy)
	tb.split.claim = tb.region.Uint64(l.GlobalOff + gSplitClaim)
	tb.split.id = 1
	// A segment asks for a split once it holds three standard deviations
	// more than the mean it was created for. Filled to its Entries, a
	// map's segment counts spread around that mean, so a bar at the mean
	// itself would split about half the segments of a map that never grew
	// past its size, leaving their tiers half full (two deviations still
	// split a sixth of them); three deviations above it, about one segment
	// in 700 asks. A map that grows past its size soon has most of its
	// inserts over the bar, and so splits before most of its first tiers
	// overflow (MaxTierEntries is 4.5 deviations above the mean).
	mean := float64(l.Entries) / float64(l.Segments)
	tb.split.at = max(1, int64(mean+3*math.Sqrt(mean)))
}

// formatSplits stores N = Segments in a new file that splits.
func formatSplits(words []uint64, l *Layout) {
	if l.Splits {
		atomic.StoreUint64(&words[gSegments/8], segmentsWord(uint64(l.Segments)))
		atomic.StoreUint64(&words[gSegmentsCopy/8], segmentsWord(uint64(l.Segments)))
	}
}

// SetSplitter gives the table this process's claim id (non-zero; the
// hashmap makes it from the registry slot and its generation), a test of
// whether a claim's process is gone, and the map's recovery passes: of
// the segments a dead process's split may hold (SplitHeld), run when its
// claim is found, and of one segment, run when the segment a split would
// split into is locked (only a split cut short leaves it so). Set it
// before the table is used.
func (tb *Table) SetSplitter(id uint64, gone func(id uint64) bool, recover func() bool, recoverSegment func(seg int64)) {
	if id == 0 {
		id = 1
	}
	tb.split.id, tb.split.gone, tb.split.recover, tb.split.recoverSegment = id, gone, recover, recoverSegment
}

// Segments is how many segments are in use: Layout.Segments in files that
// do not split; in files that do, as many as they split into so far.
func (tb *Table) Segments() int64 { return int64(tb.segmentsIn(atomic.LoadUint64(tb.active))) }

// segmentsIn is the N a word read from gSegments holds, from the copy
// if that word does not verify (from neither: the creation count, which
// Check reports), bounded to the segments the file has: damage must not
// send an index out of the table.
func (tb *Table) segmentsIn(w uint64) uint64 {
	n, ok := segmentsFromWord(w)
	if !ok {
		if n, ok = segmentsFromWord(atomic.LoadUint64(tb.activeCopy)); !ok {
			n = uint64(tb.layout.Segments)
		}
	}
	return min(max(n, uint64(tb.layout.Segments)), uint64(tb.layout.MaxSegments))
}

// MendSegmentCount makes the two copies of N agree, and reports the
// counts (from, to) if it changed one: the first copy wins if it verifies
// (a split cut short between its two stores left the second behind),
// else the second; if neither does, N is set from the first tiers split
// segments have stamped (a split stamps a segment's before it commits to
// it, so that count may be one too many: recovery of that segment keeps
// what it holds). Part of recovery and Repair; a no-op in files that do
// not split.
func (tb *Table) MendSegmentCount() (from, to uint64, mended bool) {
	if tb.split.claim == nil || tb.readOnly {
		return 0, 0, false
	}
	w, c := atomic.LoadUint64(tb.active), atomic.LoadUint64(tb.activeCopy)
	if w == c {
		if _, ok := segmentsFromWord(w); ok {
			return 0, 0, false
		}
	}
	n, ok := segmentsFromWord(w)
	if !ok {
		if n, ok = segmentsFromWord(c); !ok {
			n = uint64(tb.stampedSegments())
		}
	}
	n = min(max(n, uint64(tb.layout.Segments)), uint64(tb.layout.MaxSegments))
	from = w & 0xffffffff
	atomic.StoreUint64(tb.active, segmentsWord(n))
	atomic.StoreUint64(tb.activeCopy, segmentsWord(n))
	return from, n, true
}

// SalvageSegmentCount establishes N for a read-only table that salvage
// reads, where MendSegmentCount may not write: if neither copy verifies,
// the table reads N from then on as the first tiers' stamps say (as
// MendSegmentCount would set it), not the count the map was created with,
// which would leave out every segment split into. It returns N and
// whether the stamps gave it.
func (tb *Table) SalvageSegmentCount() (n int64, fromStamps bool) {
	if tb.split.claim == nil {
		return tb.Segments(), false
	}
	if _, ok := segmentsFromWord(atomic.LoadUint64(tb.active)); ok {
		return tb.Segments(), false
	}
	if _, ok := segmentsFromWord(atomic.LoadUint64(tb.activeCopy)); ok {
		return tb.Segments(), false
	}
	w := segmentsWord(uint64(tb.stampedSegments()))
	tb.active, tb.activeCopy = &w, &w
	return tb.Segments(), true
}

// stampedSegments is one past the last segment whose first tier carries
// its stamp, or Segments in files without stamps.
func (tb *Table) stampedSegments() int64 {
	l := &tb.layout
	if !l.Stamps {
		return l.Segments
	}
	n := l.Segments
	for i := l.Segments; i < l.MaxSegments; i++ {
		if st, ok := tb.readStamp(i); ok && st == firstStamp(i) {
			n = i + 1
		}
	}
	return n
}

// segmentOf is the segment of a key hashed to hash, with the segments in
// use now.
func (tb *Table) segmentOf(hash uint64) int64 {
	return int64(segmentFor(hash, tb.segmentsIn(atomic.LoadUint64(tb.active))))
}

// moved reports whether the key hashed to hash maps to another segment
// than index, in a file that splits: the check every locked path makes
// once it holds its lock. In files that do not split a segment's handle
// keeps to its own segment, whatever hash it is given (the key's segment
// never changes, and callers pick it).
func (tb *Table) moved(hash uint64, index int64) bool {
	return tb.split.claim != nil && tb.segmentOf(hash) != index
}

// SegmentFor is the segment of a key hashed to hash with n segments in use
// (see segmentFor).
func SegmentFor(hash uint64, n int64) int64 { return int64(segmentFor(hash, uint64(n))) }

// SplitParent is the segment that segment seg split from, in a map created
// with segments segments: -1 for those it was created with.
func SplitParent(seg, segments int64) int64 {
	if seg < segments {
		return -1
	}
	return seg - 1<<(63-bits.LeadingZeros64(uint64(seg)))
}

// SegmentOf is the segment a key hashed to hash belongs to now.
func (tb *Table) SegmentOf(hash uint64) int64 { return tb.segmentOf(hash) }

// SegmentsTouched is the segments a whole-map pass over locks must look
// at: those in use and the next, which only a split holds, and which a
// split cut short may have left locked.
func (tb *Table) SegmentsTouched() int64 { return min(tb.Segments()+1, tb.layout.MaxSegments) }

// SplitClaim is the split claim word's value (0: nobody splits), for
// inspection.
func (tb *Table) SplitClaim() uint64 {
	if tb.split.claim == nil {
		return 0
	}
	return atomic.LoadUint64(tb.split.claim)
}

// TakeOverSplitClaim takes the split claim from a process that gone says
// is gone, for the caller to mend what that split left while no other
// split can run: it makes the two copies of N agree (a split cut short
// between its two stores), and the caller then recovers the segments the
// dead split may hold (SplitHeld, or all) and calls release, which frees
// the claim. Cleared at once instead, the claim could pass to a live
// splitter whose commit of N+2 the mending of N then overwrote with N+1,
// hiding the keys it moved. ok is false, and release nil, when the claim
// is free or its holder alive. Part of the map's recovery, which holds
// the recovery lock.
func (tb *Table) TakeOverSplitClaim(gone func(id uint64) bool) (release func(), ok bool) {
	sp := &tb.split
	if sp.claim == nil || tb.readOnly {
		return nil, false
	}
	cur := atomic.LoadUint64(sp.claim)
	if cur == 0 || cur == sp.id || !gone(cur) || !atomic.CompareAndSwapUint64(sp.claim, cur, sp.id) {
		return nil, false
	}
	tb.MendSegmentCount()
	return func() { atomic.StoreUint64(sp.claim, 0) }, true
}

// PauseSplits holds the split claim until the returned resume is called,
// so that no segment of the file splits meanwhile: a pass that changes
// every segment (Clear) then meets each key in one segment only, where a
// split during it could move a key it already dealt with into a segment
// it deals with later. It waits up to wait for a split under way to end
// (rwulock.ErrTimeout after). The passes of one process share the claim;
// those of several processes take turns. A process that dies holding it
// leaves it to recovery, as a splitter's. A file that does not split
// needs no pause.
func (tb *Table) PauseSplits(wait time.Duration) (resume func(), err error) {
	sp := &tb.split
	if sp.claim == nil || tb.readOnly {
		return func() {}, nil
	}
	sp.pauseMu.Lock()
	defer sp.pauseMu.Unlock()
	if sp.pauses > 0 {
		sp.pauses++
		return tb.resumeSplits, nil
	}
	deadline := time.Now().Add(wait)
	for !atomic.CompareAndSwapUint64(sp.claim, 0, sp.id) {
		cur := atomic.LoadUint64(sp.claim)
		if cur != 0 && cur != sp.id && sp.gone != nil && sp.gone(cur) && sp.recover != nil && sp.recover() {
			continue // released the claim of a process that is gone
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: a split or another whole-map pass held the split claim (%#x) throughout", rwulock.ErrTimeout, cur)
		}
		time.Sleep(time.Millisecond)
	}
	sp.pauses = 1
	return tb.resumeSplits, nil
}

// resumeSplits ends one PauseSplits: the last releases the claim.
func (tb *Table) resumeSplits() {
	sp := &tb.split
	sp.pauseMu.Lock()
	defer sp.pauseMu.Unlock()
	if sp.pauses--; sp.pauses == 0 {
		atomic.StoreUint64(sp.claim, 0)
	}
}

// testSplitStep marks the steps of a split, for tests that kill a splitter
// after each.
func testSplitStep(step string) { testhook.SplitStep(step) }

// TrySplit splits the next segment if the file splits, has room for more
// segments, and nobody splits now, and reports whether it did. It never
// waits for a lock: the caller may hold other segment locks.
func (tb *Table) TrySplit() bool {
	sp := &tb.split
	n := tb.Segments()
	if sp.claim == nil || tb.readOnly || n >= tb.layout.MaxSegments {
		return false
	}
	if sp.failedAt.Load() == n && tb.now() < sp.retryAt.Load() {
		return false
	}
	if cur := atomic.LoadUint64(sp.claim); cur != 0 {
		if cur != sp.id && sp.gone != nil && sp.gone(cur) && sp.recover != nil {
			sp.recover() // releases the claim and the locks its holder left
		}
		return false
	}
	if !atomic.CompareAndSwapUint64(sp.claim, 0, sp.id) {
		return false
	}
	// Released on a panic too (the locks then go to recovery: see
	// splitClaimed); only a death leaves it, for recovery to release.
	defer atomic.StoreUint64(sp.claim, 0)
	testSplitStep("claimed")
	done, stuck, n, err := tb.splitClaimed()
	if stuck >= 0 && sp.recoverSegment != nil {
		sp.recoverSegment(stuck)
	}
	if err != nil {
		sp.retryAt.Store(tb.now() + int64(sp.retryDelay))
		sp.failedAt.Store(n)
	}
	return done && err == nil
}

// splitClaimed is TrySplit once it holds the claim, N being n when it
// began. stuck is a segment whose lock a split cut short may have left
// held (-1: none), for the caller to recover while it still holds the
// claim (the pass over one segment leaves the claim alone). An error
// says the split failed for want of room.
func (tb *Table) splitClaimed() (done bool, stuck, n int64, err error) {
	l := &tb.layout
	n = tb.Segments()
	if n >= l.MaxSegments {
		return false, -1, n, nil
	}
	p, c := SplitParent(n, l.Segments), n
	ps, cs := &tb.segs[p], &tb.segs[c]
	if tb.split.allocated.Load() < c {
		if err := tb.allocate(l.TiersOff+c*l.TierSize, l.TierSize); err != nil {
			return false, -1, n, err // a full disk: the split waits for room
		}
		tb.split.allocated.Store(c)
	}
	if !cs.lock.TryWriteLock() {
		// Only a split takes segment c's lock, and the claim is ours: a
		// split cut short left it.
		return false, c, n, nil
	}
	if !ps.lock.TryWriteLock() {
		_ = cs.lock.WriteUnlock()
		return false, -1, n, nil
	}
	panicked := true
	defer func() {
		if panicked {
			// As a death would: the locks go to recovery (see
			// writer.abandon), the claim is released by TrySplit.
			cs.lock.AbandonWrite()
			ps.lock.AbandonWrite()
		}
	}()
	if atomic.LoadUint64(ps.seq)&1 != 0 || atomic.LoadUint64(cs.seq)&1 != 0 {
		// Left odd by a writer that died: recovery's to mend.
		_ = ps.lock.WriteUnlock()
		_ = cs.lock.WriteUnlock()
		panicked = false
		return false, -1, n, nil
	}
	offheap.AddExclusive(ps.seq, 1)
	offheap.AddExclusive(cs.seq, 1)
	testSplitStep("locked")
	err = tb.splitLocked(ps, cs, n)
	offheap.AddExclusive(cs.seq, 1)
	offheap.AddExclusive(ps.seq, 1)
	_ = cs.lock.WriteUnlock()
	_ = ps.lock.WriteUnlock()
	panicked = false
	return err == nil, -1, n, err
}

// SplitHeld is the segments whose locks a split cut short may hold, under
// N as it is now: the split of N, before its commit, held N and its
// parent; the split of N-1, after it, held N-1 and its parent. For the
// recovery of a dead splitter's claim (after MendSegmentCount), which
// need not look at every segment.
func (tb *Table) SplitHeld() []int64 {
	l := &tb.layout
	n := tb.Segments()
	var held []int64
	if n < l.MaxSegments {
		held = append(held, n, SplitParent(n, l.Segments))
	}
	if n > l.Segments {
		held = append(held, n-1, SplitParent(n-1, l.Segments))
	}
	return held
}

// moved is an entry of p that a split copies to c.
type moved struct {
	hash uint64
	key  []byte
	kind uint32
}

// splitLocked splits p into c, N being n; the caller holds both segments'
// write locks with their sequences odd.
func (tb *Table) splitLocked(ps, cs *Segment, n int64) error {
	if err := cs.emptyForSplit(); err != nil {
		return err
	}
	testSplitStep("emptied")
	chain, err := ps.chainTiers()
	if err != nil {
		return err
	}
	var moves []moved
	for e := range tb.occupiedSlots(chain) {
		if !e.ok {
			return ps.corrupt(e.tier.index, "undecodable entry met by a split")
		}
		key := tb.entryKey(e.tier, e.chunk, e.klen)
		h := xxhash.Sum64(key)
		if int64(segmentFor(h, uint64(n+1))) == cs.index {
			moves = append(moves, moved{hash: h, key: append([]byte(nil), key...), kind: tb.kindAt(e.tier, e.chunk)})
		}
	}
	for _, mv := range moves {
		loc, found, ok := ps.findKind(mv.hash, mv.key, mv.kind == kindPart)
		if !ok || !found {
			return ps.corrupt(-1, "an entry a split copies vanished")
		}
		w := writer{s: cs, write: true, kind: mv.kind}
		if err := cs.insert(&w, mv.hash, mv.key, tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)); err != nil {
			return fmt.Errorf("split of segment %d into %d: %w", ps.index, cs.index, err)
		}
		if mv.kind == kindPart {
			atomic.AddUint64(cs.parts, 1)
		}
	}
	testSplitStep("copied")
	atomic.StoreUint64(tb.active, segmentsWord(uint64(n+1))) // the commit
	atomic.StoreUint64(tb.activeCopy, segmentsWord(uint64(n+1)))
	testSplitStep("committed")
	for _, mv := range moves {
		loc, found, ok := ps.findKind(mv.hash, mv.key, mv.kind == kindPart)
		if !ok || !found {
			return ps.corrupt(-1, "an entry a split moved vanished from its old segment")
		}
		if !tb.slotsEndAfter(&loc.tier, loc.pos) {
			return ps.corrupt(loc.tier.index, errNoHole)
		}
		tb.removeSlot(&loc.tier, loc.pos)
		loc.tier.free(loc.chunk, loc.nch)
		loc.tier.addEntries(-1)
		atomic.AddUint64(ps.entries, ^uint64(0))
		if mv.kind == kindPart {
			atomic.AddUint64(ps.parts, ^uint64(0))
		}
	}
	testSplitStep("moved")
	return nil
}

// emptyForSplit readies segment s, not in use yet, to be split into: its
// first tier stamped, and whatever a split cut short left in it removed
// (its overflow tiers stay linked, empty). Caller holds the write lock
// with the sequence odd.
func (s *Segment) emptyForSplit() error {
	tb := s.tb
	if l := &tb.layout; l.Stamps {
		if st, ok := tb.readStamp(s.index); !ok || st != firstStamp(s.index) {
			tb.writeStamp(s.index, firstStamp(s.index))
		}
	}
	first := tb.tier(s.index)
	if atomic.LoadUint64(s.entries) == 0 && atomic.LoadUint64(s.tiers) == 0 && first.next() == 0 &&
		first.usedChunks() == 0 && first.entries() == 0 {
		return nil // never split into: a hole but for its stamp
	}
	chain, err := s.chainTiers()
	if err != nil {
		return err
	}
	s.clearTiers(chain)
	atomic.StoreUint64(s.tiers, uint64(len(chain)-1))
	return nil
}
