package segment

import (
	"runtime"
	"sync/atomic"

	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
)

// tryOverwriteOptimistic is Put's fast path for its most common case in a plain map:
// a present key's value replaced by one that fits the entry's chunks. It
// finds the entry as an optimistic reader would, builds the new header
// (checksum included) with no lock held, then, if the lock is free and
// nobody waits, takes the write lock directly (one change of the lock word
// instead of two: update, then upgrade) and, if no writer changed the
// segment since its look, rewrites the value. It reports false, having
// changed nothing, in every other case: the key is absent or beyond the
// first tier, the value needs more chunks, the lock is held or waited for,
// or a writer came between; Put's general path then runs. Written against
// an instruction budget, like TryGet (see Table.Get): it takes about half
// the instructions of the general path, which pays for the update lock,
// the upgrade and a second look under the lock.
func (s *Segment) tryOverwriteOptimistic(hash uint64, key, value []byte) bool {
	tb := s.tb
	seq := atomic.LoadUint64(s.seq)
	if seq&1 != 0 {
		return false
	}
	fits, h := s.prepareOverwrite(hash, key, value)
	at, nch, ok, _ := s.probeOverwrite(hash, key, value)
	if testAfterPreview != nil {
		testAfterPreview(s)
	}
	if !ok {
		return false
	}
	if nch != fits {
		h = tb.entryHeader(int64(nch), key, value)
	}
	if !s.lock.TryWriteLockFair() {
		return false
	}
	// Else a writer came between, or a split moved the key (the caller
	// picked the segment before it; the general path finds the right one).
	done := atomic.LoadUint64(s.seq) == seq && !tb.moved(hash, s.index)
	if done {
		s.rewriteOrAbandon(at, &h, key, value, seq)
		s.countLocked(stPuts)
	}
	_ = s.lock.WriteUnlock()
	return done
}

// rewriteOrAbandon is tryOverwriteOptimistic's rewriteLocked, under the write lock
// taken in this process's ledger: a panic in it (a fault on the file's
// pages) leaves the lock to recovery, as a death there would, instead of
// held for as long as this process lives (see writer.endOrAbandon).
func (s *Segment) rewriteOrAbandon(at uint64, h *entryHead, key, value []byte, seq uint64) {
	defer func() {
		if r := recover(); r != nil {
			s.lock.AbandonWrite()
			panic(r)
		}
	}()
	s.rewriteLocked(at, h, key, value, seq, saveOld)
}

// TryOverwriteFastLedger is Put's fast path for overwriting a plain map's
// value in place, or inserting an absent key in its home run, with the
// write lock recorded in this process's fast ledger (rwulock.FastNext). It
// reports false, having changed nothing of the map, when the caller must
// take PutGeneral. inserted says the key was absent and is now stored.
func (s *Segment) TryOverwriteFastLedger(hash uint64, key, value []byte) (done, inserted bool) {
	// TryOverwriteFastLedger is Put's fast path for a plain map's most
	// common case, as Put itself tries it (tryOverwriteOptimistic), but
	// with the write lock's taking and release kept in this process's fast
	// ledger instead of its ledger (see rwulock.FastNext): three locked
	// instructions where tryOverwriteOptimistic makes six. It needs no
	// in-flight count either: CloseFastPaths waits for the calls under way
	// instead. And it takes the lock before it looks, not after: the
	// lock's two CASes then run while the lines the look needs are on
	// their way (they are requested first, and a prefetch, unlike a load,
	// does not hold a locked instruction back), rather than after they
	// came, which shortens an overwrite of a key whose lines are not
	// cached; what it adds is the look's wait to the time the lock is
	// held. A key the look finds absent from a segment of one tier is
	// inserted here too, in a free home run (insertHome): a first write
	// then costs one lock and one look, as a rewrite does, instead of
	// these and then the general path's.
	// It reports false, having changed nothing but the idle undo record's
	// bytes (see stageRewrite), in every case tryOverwriteOptimistic does
	// (but a writer coming between, which the lock excludes, and an
	// insert that insertHome made), and also when the table has no fast
	// ledgers (SetFastLedgers), is closing, or another goroutine of this
	// process is on the fast path of this segment: the caller then takes
	// Put's general path (PutGeneral).
	if s.fast == nil || s.tb.geom.cache || s.tb.queueLocal {
		return false, false
	}
	fits, h := s.prepareOverwrite(hash, key, value)
	if s.counters != nil {
		// The Puts counter's line, which a Put that finds its entry
		// writes: requested now, it comes while the probe waits. (The
		// count itself waits for the probe: counted before it and taken
		// back when the Put went elsewhere, it showed readers of the
		// statistics a counter that went down.)
		c := &s.counters[stPuts/8]
		offheap.PrefetchWordsForWrite(c, c)
	}
	// The bitmap's word for the key's first home run: an insert reads it
	// under the lock, and at scale it is a miss of its own.
	s.tb.requestHomeBitmap(uint64(s.index), hash)
	held, ok := s.takeFast()
	if !ok {
		return false, false
	}
	// A panic before releaseFast (a fault on the file's pages under
	// debug.SetPanicOnFault, as mapctl runs) must not leave the fast
	// ledger held: CloseFastPaths would wait for it for good.
	changing := false
	defer s.endFastOnPanic(&held, &changing)
	// Even under the write lock unless a writer died mid-change, and then
	// the segment waits for recovery.
	seq := atomic.LoadUint64(s.seq)
	if seq&1 != 0 || s.tb.moved(hash, s.index) { // a split moved the key: the general path finds its segment
		s.releaseFast(held)
		held = 0
		return false, false
	}
	// The undo record's copy now too (see record).
	s.stageRewrite(&h, key, value, seq+1)
	at, nch, found, absent := s.probeOverwrite(hash, key, value)
	switch {
	case found:
		done = true
		if nch != fits {
			h = s.tb.entryHeader(int64(nch), key, value)
			s.restageHeader(&h)
		}
		s.countLocked(stPuts)
		changing = true
		s.rewriteLocked(at, &h, key, value, seq, staged)
	case absent:
		done = s.insertHome(hash, key, value, int64(fits), &h, &changing)
		inserted = done
	}
	s.releaseFast(held)
	held = 0
	if inserted && int64(atomic.LoadUint64(s.entries)) > s.tb.split.at {
		s.tb.TrySplit()
	}
	return done, inserted
}

// insertHome adds key's entry, of n chunks with header h, to the
// segment's first tier, under the write lock of TryOverwriteFastLedger,
// whose probe found the key absent from a segment of one tier: in one of
// its home runs, else in the first free run that fits, as the general
// path's allocation would place it. It reports false, having changed
// nothing, when the tier is at its entry limit or has no such run:
// PutGeneral then compacts or links a tier. It sets *changing before its
// first change, so a fault from there on leaves the segment to recovery,
// which rebuilds it as it does after a writer that died inserting under
// the update lock.
func (s *Segment) insertHome(hash uint64, key, value []byte, n int64, h *entryHead, changing *bool) bool {
	// The entry is written where no slot names it, then published by one
	// slot store, as insert does: readers see it whole or not at all, and
	// the sequence stays even. Doing it here, under the lock the probe
	// already holds, spares a first write the general path's second lock
	// and second probe.
	tb := s.tb
	tag := uint32(hash >> tb.layout.tagShift)
	t := tb.tier(s.index)
	if !s.hasRoom(&t, nil) {
		return false
	}
	c, home := s.freeHomeRun(&t, tag, n)
	*changing = true
	if home {
		t.take(c, n)
	} else if c = t.alloc(n, tb.layout.Chunks); c < 0 {
		return false
	}
	testStep() // the run taken
	tb.writeEntry(&t, c, h, key, value)
	testStep() // written, not yet named
	if !tb.placeSlot(&t, tag, c) {
		// No empty slot in a tier below its entry limit is damage, which
		// PutGeneral reports; the run goes back first.
		t.free(c, n)
		return false
	}
	t.addEntries(1)
	atomic.AddUint64(s.entries, 1)
	s.countLocked(stPuts)
	return true
}

// endFastOnPanic, deferred by TryOverwriteFastLedger, ends a call that panicked with
// the write lock held (*held non-zero), as a fault on the file's pages
// does. Before any change (a fault in the probe, say) it releases the
// lock: the segment is as it was. Once the rewrite has begun (*changing)
// it abandons the fast ledger's hold: the lock word keeps the write lock
// and the fast ledger no longer accounts for it, so the lock, over data
// perhaps half changed, reads as a dead process's and the next recovery
// pass takes it over and repairs the segment; and Close does not wait for
// it. The Put stays counted then: recovery completes it from the staged
// record (a file without records drops the torn entry instead).
func (s *Segment) endFastOnPanic(held *uint64, changing *bool) {
	switch {
	case *held == 0:
	case *changing:
		offheap.StoreExclusive(s.fast, rwulock.FastNext(atomic.LoadUint64(s.fast), rwulock.FastEmpty))
	default:
		s.releaseFast(*held)
	}
}

// prepareOverwrite starts an overwrite: it requests the lines the probe
// and the rewrite need, and returns the new entry's header for a run of
// fits chunks, the chunks the entry needs. The header's checksum covers
// the run's chunk count, which only the probe tells; it is computed first
// on the guess that the run is as long as the entry needs (true of every
// entry a Put of this size wrote), while the lines are on their way.
func (s *Segment) prepareOverwrite(hash uint64, key, value []byte) (fits uint64, h entryHead) {
	tb := s.tb
	s.prefetchUndo(entryHeaderSize + int64(len(key)) + int64(len(value)))
	tb.requestPutLines(uint64(s.index), hash)
	fits = uint64(tb.chunksFor(len(key), len(value)))
	return fits, tb.entryHeader(int64(fits), key, value)
}

// probeOverwrite finds key's entry for an overwrite in place: its byte in
// the tiers area and its run's chunks, ok only if the key is in its first
// tier, value fits the run and the undo record can hold the entry. Only
// what the probe checked is used, never read again: the run of nch chunks
// lies in the tier, so a value that fits it stays in it. absent reports
// that no tier holds the key (the segment has one tier, and the probe met
// an empty slot before the key), which only a caller holding the lock may
// act on.
func (s *Segment) probeOverwrite(hash uint64, key, value []byte) (at, nch uint64, ok, absent bool) {
	tb := s.tb
	_, _, v, _, nch, answer := tb.probeHome(uint64(s.index), hash, key)
	at = v - entryHeaderSize - uint64(len(key))
	if answer != Found || uint64(len(value)) > at+nch<<(tb.geom.chunkShift&63)-v {
		return 0, 0, false, answer == Absent // absent, beyond the first tier, or the value needs more chunks
	}
	if !s.undoHolds(int64(v-at) + int64(len(value))) {
		return 0, 0, false, false // too large to save first: replace moves it
	}
	prefetchTail(tb.tierBytes[at : v+uint64(len(value))])
	return at, nch, true, false
}

// rewriteLocked stores header h and value over the entry at byte at of the
// tiers area, found by probeOverwrite, with the undo record used as rec
// says. The caller holds the write lock, and the sequence is seq (even).
func (s *Segment) rewriteLocked(at uint64, h *entryHead, key, value []byte, seq uint64, rec record) {
	offheap.AddExclusive(s.seq, 1)
	s.rewriteInPlace(int64(at), h, int64(len(key)), value, seq+1, rec)
	offheap.AddExclusive(s.seq, 1)
}

// SetFastLedgers gives each segment lock a fast ledger word (fast(i) for
// segment i) starting at seed, for TryOverwriteFastLedger. Call it before
// any operation.
func (tb *Table) SetFastLedgers(fast func(i int) *uint64, seed uint64) {
	// SetFastLedgers gives each segment lock of this table a fast ledger
	// word in this process's registry slot (fast(i) for segment i), for
	// TryOverwriteFastLedger (see rwulock.FastNext), and starts each at
	// seed, a FastEmpty value no earlier owner of the slot reached (see
	// rwulock.FastSeed). Like SetLedgers, call it before any operation.
	// Without it TryOverwriteFastLedger does nothing.
	for i := range tb.segs {
		tb.segs[i].fast = fast(i)
		atomic.StoreUint64(tb.segs[i].fast, seed)
	}
}

// takeFast takes the write lock if it is free and nobody waits, keeping
// this process's fast ledger of the segment (see rwulock.FastNext), and
// returns the ledger's value while it holds. It fails, changing nothing,
// if another goroutine of this process has the fast ledger, or the table
// is closing.
func (s *Segment) takeFast() (uint64, bool) {
	p := s.fast
	v := atomic.LoadUint64(p)
	if v&rwulock.FastStateMask != rwulock.FastEmpty || s.tb.closing.Load() {
		return 0, false
	}
	acquiring := rwulock.FastNext(v, rwulock.FastAcquiring)
	if !atomic.CompareAndSwapUint64(p, v, acquiring) {
		return 0, false
	}
	// CloseFastPaths sets closing, then waits for every fast ledger to be
	// empty: either it waits for this one, or this sees closing. (After
	// Close the file's words are zeros, where the CAS above writes
	// nothing that reaches the file; or, once this process has mapped the
	// file over the same addresses again, the ledger there is FastClosed
	// or a later owner's (FastSeed), and the CAS fails.)
	if s.tb.closing.Load() {
		atomic.CompareAndSwapUint64(p, acquiring, rwulock.FastNext(acquiring, rwulock.FastEmpty))
		return 0, false
	}
	testStep()
	if !s.lock.TryWriteLockUnnoted() {
		offheap.StoreExclusive(p, rwulock.FastNext(acquiring, rwulock.FastEmpty))
		return 0, false
	}
	testStep()
	held := rwulock.FastNext(acquiring, rwulock.FastHeld)
	offheap.StoreExclusive(p, held)
	return held, true
}

// releaseFast releases the write lock takeFast took; held is the fast
// ledger's value since.
func (s *Segment) releaseFast(held uint64) {
	releasing := rwulock.FastNext(held, rwulock.FastReleasing)
	offheap.StoreExclusive(s.fast, releasing)
	testStep()
	_ = s.lock.WriteUnlockUnnoted()
	testStep()
	offheap.StoreExclusive(s.fast, rwulock.FastNext(releasing, rwulock.FastEmpty))
}

// CloseFastPaths ends TryOverwriteFastLedger in this process for good,
// waiting for the calls under way. Close calls it before the file goes.
func (tb *Table) CloseFastPaths() {
	// It marks each fast ledger FastClosed once it is back to FastEmpty
	// (those calls never wait, so this is short), and a call that begins
	// after finds it so, or sees the closing flag, and does nothing. Close
	// calls it before the file goes.
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
