package segment

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
)

// PutMode says what Put does when the key is present.
type PutMode int

const (
	Replace  PutMode = iota // store the new value
	IfAbsent                // keep the old value
)

// writer tracks what a modifying operation holds, so that every path
// releases exactly that. Locking follows Chronicle Map: update from the
// start (readers still enter), write only around the modification.
type writer struct {
	s     *Segment
	write bool
}

func (s *Segment) beginUpdate(op string) (writer, error) {
	wait, secondTurn := s.tb.timeout, false
	if s.tb.queueLocal {
		var ok bool
		if wait, ok = s.takeLocal(); !ok {
			// This process's writer ahead kept the token for LockTimeout:
			// it may be waiting out a lock whose holder died, which the
			// recovery pass after its own wait releases. This wait ran
			// out; take one more turn, as a wait on the lock word does
			// after its pass, and let that turn and the wait on the word
			// after it share one LockTimeout, with no pass of their own.
			s.count(stLockTimeouts, 1)
			if wait, ok = s.waitLocal(); !ok {
				return writer{}, s.lockErr(op, rwulock.ErrTimeout)
			}
			secondTurn = true
		}
	}
	var err error
	if !s.lock.TryUpdateLock() {
		s.count(stLockWaits, 1)
		err = s.lock.UpdateLock(wait)
	}
	if err != nil && !secondTurn {
		err = s.retryAfterTimeout(err, s.lock.UpdateLock)
	}
	if err != nil {
		if s.tb.queueLocal {
			<-s.local
		}
		return writer{}, s.lockErr(op, err)
	}
	return writer{s: s}, nil
}

// takeLocal takes the segment's local queue token (see SetLocalQueue),
// waiting at most the lock timeout, and returns what is left of that
// timeout for the wait on the lock word; ok is false when the wait ran
// out. So a writer behind another of this process's never waits longer in
// all than one behind another process's (twice LockTimeout: see
// beginUpdate), and a Compute whose function writes to its own segment
// ends in ErrTimeout, as without the queue, instead of waiting for itself
// for good.
func (s *Segment) takeLocal() (left time.Duration, ok bool) {
	select {
	case s.local <- struct{}{}:
		return s.tb.timeout, true
	default:
	}
	s.count(stLockWaits, 1)
	return s.waitLocal()
}

// waitLocal is takeLocal's wait for the token, uncounted.
func (s *Segment) waitLocal() (left time.Duration, ok bool) {
	start := time.Now()
	t := time.NewTimer(s.tb.timeout)
	defer t.Stop()
	select {
	case s.local <- struct{}{}:
		return max(s.tb.timeout-time.Since(start), 0), true
	case <-t.C:
		return 0, false
	}
}

// modify upgrades to write and makes the sequence odd, so optimistic
// readers that overlap the change retry.
func (w *writer) modify(op string) error {
	if w.write {
		return nil
	}
	if err := w.upgrade(op); err != nil {
		return err
	}
	offheap.AddExclusive(w.s.seq, 1)
	return nil
}

// upgrade is modify without the sequence: the write lock alone, waiting for
// readers inside to leave.
func (w *writer) upgrade(op string) error {
	if !w.s.lock.TryUpgradeUpdateToWrite() {
		w.s.count(stLockWaits, 1) // readers are inside
		if err := w.s.lock.UpgradeUpdateToWrite(w.s.tb.timeout); err != nil {
			if err = w.s.retryAfterTimeout(err, w.s.lock.UpgradeUpdateToWrite); err != nil {
				return w.s.lockErr(op, err)
			}
		}
	}
	w.write = true
	return nil
}

// endOrAbandon is end for a call that returns, deferred as
// defer func() { w.endOrAbandon(recover()) }(). For one that panics with
// the write lock held, or with a fault on the file's pages (the runtime
// error debug.SetPanicOnFault makes, which has an Addr method), it leaves
// the lock, the sequence and the undo record as a death there would, for
// recovery to complete or undo the change (see abandon); then the panic
// goes on. A panic before any change, as from a Compute function, which
// runs under the update lock only, ends as a return does: the lock is
// released and the segment is as it was.
func (w *writer) endOrAbandon(r any) {
	if r == nil {
		w.end()
		return
	}
	if _, fault := r.(interface{ Addr() uintptr }); fault || w.write {
		w.abandon()
	} else {
		w.end()
	}
	panic(r)
}

// abandon leaves the lock w holds to recovery: the lock word keeps it and
// this process's ledger no longer accounts for it, so the next recovery
// pass (any process's lock wait that times out on it runs one) takes it
// for a dead holder's and repairs the segment.
func (w *writer) abandon() {
	if w.write {
		w.s.lock.AbandonWrite()
	} else {
		w.s.lock.AbandonUpdate()
	}
	if w.s.tb.queueLocal {
		<-w.s.local
	}
}

// end publishes the change (sequence even again) and releases the lock.
func (w *writer) end() {
	if w.write {
		offheap.AddExclusive(w.s.seq, 1)
		_ = w.s.lock.WriteUnlock()
	} else {
		_ = w.s.lock.UpdateUnlock()
	}
	if w.s.tb.queueLocal {
		<-w.s.local
	}
}

func (s *Segment) checkSize(key, value []byte) error {
	var meta int64
	if s.tb.layout.Cache {
		meta = metaSize
	}
	need := entryHeaderSize + meta + int64(len(key)) + int64(len(value))
	if need > s.tb.layout.MaxEntryBytes() {
		return fmt.Errorf("%w: key %d + value %d bytes, a tier holds at most %d", ErrTooLarge, len(key), len(value), s.tb.layout.MaxEntryBytes()-entryHeaderSize-meta)
	}
	return nil
}

// Put stores value under key. It reports whether the key was absent
// (inserted). With IfAbsent a present key is left as it is. In a cache map
// the entry never expires.
func (s *Segment) Put(hash uint64, key, value []byte, mode PutMode) (inserted bool, err error) {
	return s.PutExpiring(hash, key, value, 0, mode)
}

// PutExpiring is Put with an expiry time (Unix nanoseconds, 0 = never) for
// cache maps; other maps ignore it.
func (s *Segment) PutExpiring(hash uint64, key, value []byte, expiry int64, mode PutMode) (inserted bool, err error) {
	if mode == Replace && !s.tb.geom.cache && !s.tb.queueLocal && s.tryOverwrite(hash, key, value) {
		return false, nil
	}
	return s.put(hash, key, value, expiry, mode)
}

// PutAfterTry is PutExpiring with Replace for a caller whose TryOverwrite
// of the same key and value just failed: it goes straight to the general
// path, which the fast path's probe would only repeat (an insert, a value
// that needs more chunks, the lock held).
func (s *Segment) PutAfterTry(hash uint64, key, value []byte, expiry int64) (inserted bool, err error) {
	return s.put(hash, key, value, expiry, Replace)
}

// put is PutExpiring's general path: the preview, then the update lock.
func (s *Segment) put(hash uint64, key, value []byte, expiry int64, mode PutMode) (inserted bool, err error) {
	if err := s.checkSize(key, value); err != nil {
		return false, err
	}
	stored, buf := s.tb.storedValue(value, expiry)
	defer s.tb.releaseValue(buf)
	p, w, err := s.previewThenLock("put", hash, key)
	if err != nil {
		return false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, ok := s.findPreviewed(&p, hash, key)
	if !ok {
		return false, s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
	}
	if !found {
		if err := s.insert(&w, hash, key, stored); err != nil {
			return false, err
		}
		s.countLocked(stPuts)
		return true, nil
	}
	live := s.live(&loc)
	if live && mode == IfAbsent {
		return false, nil
	}
	if err := s.replace(&w, hash, &loc, key, stored); err != nil {
		return false, err
	}
	if !live {
		atomic.AddUint64(s.expired, 1) // reclaimed by the write over it
	}
	s.countLocked(stPuts)
	return !live, nil
}

// tryOverwrite is Put's fast path for its most common case in a plain map:
// a present key's value replaced by one that fits the entry's chunks. It
// finds the entry as an optimistic reader would, builds the new header
// (checksum included) with no lock held, then, if the lock is free and
// nobody waits, takes the write lock directly (one change of the lock word
// instead of two: update, then upgrade) and, if no writer changed the
// segment since its look, rewrites the value. It reports false, having
// changed nothing, in every other case: the key is absent or beyond the
// first tier, the value needs more chunks, the lock is held or waited for,
// or a writer came between; Put's general path then runs. Written against
// an instruction budget, like TryGet (see Table.Get): a Put of a 16-byte
// key and 64-byte value took 945 instructions this way against 1,804 the
// general way, and BenchmarkMap's Put went from 1.14x to 0.95x the RWMutex
// map's Set (medians of 5 alternating runs, 1,350 -> 1,178 ns).
func (s *Segment) tryOverwrite(hash uint64, key, value []byte) bool {
	tb := s.tb
	seq := atomic.LoadUint64(s.seq)
	if seq&1 != 0 {
		return false
	}
	fits, h := s.prepareOverwrite(hash, key, value)
	at, nch, ok := s.probeOverwrite(hash, key, value)
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
	done := atomic.LoadUint64(s.seq) == seq // else a writer came between
	if done {
		s.rewriteOrAbandon(at, &h, key, value, seq)
		s.countLocked(stPuts)
	}
	_ = s.lock.WriteUnlock()
	return done
}

// rewriteOrAbandon is tryOverwrite's rewriteLocked, under the write lock
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

// TryOverwrite is Put's fast path for a plain map's most common case, as
// Put itself tries it (tryOverwrite), but with the write lock's taking and
// release kept in this process's fast ledger instead of its ledger (see
// rwulock.FastNext): three locked instructions where tryOverwrite makes
// six. It needs no in-flight count either: CloseFastPaths waits for the
// calls under way instead. And it takes the lock before it looks, not
// after: the lock's two CASes then run while the lines the look needs are
// on their way (they are requested first, and a prefetch, unlike a load,
// does not hold a locked instruction back), rather than after they came.
// That took 4-5% off a Put over 1M keys (in-process, alternating runs);
// what it adds is the lock's three locked instructions to a Put that
// inserts, and the look's wait to the time the lock is held. It reports
// false, having changed nothing but the idle undo record's bytes (see
// stageRewrite), in every case tryOverwrite does (but a writer coming
// between, which the lock excludes), and also when the table
// has no fast ledgers (SetFastLedgers), is closing, or another goroutine of
// this process is on the fast path of this segment: the caller then takes
// Put's general path (PutAfterTry).
func (s *Segment) TryOverwrite(hash uint64, key, value []byte) bool {
	if s.fast == nil || s.tb.geom.cache || s.tb.queueLocal {
		return false
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
	held, ok := s.takeFast()
	if !ok {
		return false
	}
	// A panic before releaseFast (a fault on the file's pages under
	// debug.SetPanicOnFault, as mapctl runs) must not leave the fast
	// ledger held: CloseFastPaths would wait for it for good.
	changing := false
	defer s.endFastOnPanic(&held, &changing)
	// Even under the write lock unless a writer died mid-change, and then
	// the segment waits for recovery.
	seq := atomic.LoadUint64(s.seq)
	if seq&1 != 0 {
		s.releaseFast(held)
		held = 0
		return false
	}
	// The undo record's copy now too (see record).
	s.stageRewrite(&h, key, value, seq+1)
	at, nch, done := s.probeOverwrite(hash, key, value)
	if done {
		if nch != fits {
			h = s.tb.entryHeader(int64(nch), key, value)
			s.restageHeader(&h)
		}
		s.countLocked(stPuts)
		changing = true
		s.rewriteLocked(at, &h, key, value, seq, staged)
	}
	s.releaseFast(held)
	held = 0
	return done
}

// endFastOnPanic, deferred by TryOverwrite, ends a call that panicked with
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
// lies in the tier, so a value that fits it stays in it.
func (s *Segment) probeOverwrite(hash uint64, key, value []byte) (at, nch uint64, ok bool) {
	tb := s.tb
	_, _, v, _, nch, answer := tb.probeHome(uint64(s.index), hash, key)
	at = v - entryHeaderSize - uint64(len(key))
	if answer != Found || uint64(len(value)) > at+nch<<(tb.geom.chunkShift&63)-v {
		return 0, 0, false // absent, beyond the first tier, or the value needs more chunks
	}
	if !s.undoHolds(int64(v-at) + int64(len(value))) {
		return 0, 0, false // too large to save first: replace moves it
	}
	prefetchTail(tb.tierBytes[at : v+uint64(len(value))])
	return at, nch, true
}

// rewriteLocked stores header h and value over the entry at byte at of the
// tiers area, found by probeOverwrite, with the undo record used as rec
// says. The caller holds the write lock, and the sequence is seq (even).
func (s *Segment) rewriteLocked(at uint64, h *entryHead, key, value []byte, seq uint64, rec record) {
	offheap.AddExclusive(s.seq, 1)
	s.rewriteInPlace(int64(at), h, int64(len(key)), value, seq+1, rec)
	offheap.AddExclusive(s.seq, 1)
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
	// Close the file's words are zeros: the CAS above found an empty
	// ledger there, and nothing is written.)
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

// testStep marks a step of an insert, a compaction or a rebuild that
// changes the file: where tests stop a process (see internal/testhook).
func testStep() { testhook.Step() }

// testAfterPreview, set only by tests, runs between a writer's preview and
// its lock: where another writer may change the segment.
var testAfterPreview func(*Segment)

// previewThenLock is how a writer starts: the preview, then the update lock.
func (s *Segment) previewThenLock(op string, hash uint64, key []byte) (preview, writer, error) {
	p := s.preview(hash, key)
	if testAfterPreview != nil {
		testAfterPreview(s)
	}
	w, err := s.beginUpdate(op)
	return p, w, err
}

// live reports whether the entry at loc is visible: always, except an
// expired entry of a cache map.
func (s *Segment) live(loc *location) bool {
	_, live, _ := s.tb.userValue(s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen))
	return live
}

// store writes value, with expiry, under key: over the entry at loc if
// found, else as a new entry. The caller holds w's write lock.
func (s *Segment) store(w *writer, hash uint64, loc *location, found bool, key, value []byte, expiry int64) error {
	if err := s.checkSize(key, value); err != nil {
		return err
	}
	stored, buf := s.tb.storedValue(value, expiry)
	defer s.tb.releaseValue(buf)
	if found {
		return s.replace(w, hash, loc, key, stored)
	}
	return s.insert(w, hash, key, stored)
}

// replace changes the value of an entry: in place when it fits the entry's
// chunks (or the free chunks after them), else by moving the entry. In
// place, the undo record saves the entry first; an entry too large for it
// is moved instead if a free run is at hand, which keeps the old copy whole
// until the slot names the new one, and otherwise rewritten in place
// unsaved: for it, a move that had to compact, link an overflow tier or
// evict would cost more than the risk it saves (or fail, ErrFull, where
// the rewrite in place cannot).
func (s *Segment) replace(w *writer, hash uint64, loc *location, key, value []byte) error {
	tb := s.tb
	nch := tb.chunksFor(len(key), len(value))
	tag := uint32(hash >> tb.layout.segmentBits)
	fits := nch <= loc.nch
	grows := !fits && loc.chunk+nch <= tb.layout.Chunks && loc.tier.runFree(loc.chunk+loc.nch, nch-loc.nch)
	if fits || grows {
		save := s.undoHolds(entryHeaderSize + loc.klen + int64(len(value)))
		if !save {
			if nt, c, ok := s.allocFree(tag, nch, loc); ok {
				return s.relocate(w, hash, key, value, nt, c, nch)
			}
		}
		run := max(nch, loc.nch) // a run is never shrunk in place
		prefetchTail(tb.entryBytes(&loc.tier, loc.chunk, loc.klen, value))
		h := tb.entryHeader(run, key, value)
		if err := w.modify("put"); err != nil {
			return err
		}
		if grows {
			loc.tier.mark(loc.chunk+loc.nch, nch-loc.nch, true)
			atomic.AddUint64(&loc.tier.header[thUsedChunks/8], uint64(nch-loc.nch))
		}
		rec := unsaved
		if save {
			rec = saveOld
		}
		s.rewriteInPlace(tb.layout.entryByte(loc.tier.index, loc.chunk), &h, loc.klen, value, atomic.LoadUint64(s.seq), rec)
		return nil
	}
	if tb.layout.Cache {
		// Room for the new copy beside the old one, which eviction must
		// keep, may not exist however much else is evicted: the search
		// emptied the segment and still failed with ErrFull. A cache map
		// moves an entry only to a free run at hand, and otherwise drops
		// the old copy first: then an insert always finds room.
		if nt, c, ok := s.allocFree(tag, nch, loc); ok {
			return s.relocate(w, hash, key, value, nt, c, nch)
		}
		if _, err := s.dropEntry(w, loc, "put"); err != nil {
			return err
		}
		return s.insert(w, hash, key, value)
	}
	nt, c, err := s.allocHome(w, tag, nch, loc)
	if err != nil {
		return err
	}
	return s.relocate(w, hash, key, value, nt, c, nch)
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

// relocate moves the entry of key to the n chunks at c of tier nt, taken
// for it, with its new value: it writes the new copy where nobody looks
// yet, then swaps it in by one slot store, then frees the old run.
func (s *Segment) relocate(w *writer, hash uint64, key, value []byte, nt tier, c, nch int64) error {
	tb := s.tb
	s.countMove(&tb.Relocations, stRelocations)
	prefetchTail(tb.entryBytes(&nt, c, int64(len(key)), value))
	h := tb.entryHeader(nch, key, value)
	if err := w.modify("put"); err != nil {
		nt.free(c, nch)
		return err
	}
	// Compaction during allocRun may have moved our entry: find it again.
	cur, found, ok := s.find(hash, key)
	if !ok || !found {
		return s.corrupt(nt.index, "entry vanished during relocation")
	}
	if nt.index != cur.tier.index && !tb.slotsEndAfter(&cur.tier, cur.pos) {
		nt.free(c, nch)
		return s.corrupt(cur.tier.index, errNoHole)
	}
	testStep()
	tb.writeEntry(&nt, c, &h, key, value)
	testStep()
	tag := uint32(hash >> tb.layout.segmentBits)
	if nt.index == cur.tier.index {
		atomic.StoreUint64(&cur.tier.slots[cur.pos], makeSlot(tag, c))
	} else {
		if !tb.placeSlot(&nt, tag, c) {
			return s.corrupt(nt.index, errNoSlot)
		}
		testStep()
		nt.addEntries(1)
		tb.removeSlot(&cur.tier, cur.pos)
		cur.tier.addEntries(-1)
	}
	testStep()
	cur.tier.free(cur.chunk, cur.nch)
	testStep()
	return nil
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

// insert adds a new entry. The entry is written first and published by one
// atomic store of its slot, so readers (locked or optimistic) see it whole
// or not at all; that is why insertion needs only the update lock.
func (s *Segment) insert(w *writer, hash uint64, key, value []byte) error {
	tb := s.tb
	nch := tb.chunksFor(len(key), len(value))
	tag := uint32(hash >> tb.layout.segmentBits)
	t, c, err := s.allocHome(w, tag, nch, nil)
	if err != nil {
		return err
	}
	prefetchTail(tb.entryBytes(&t, c, int64(len(key)), value))
	h := tb.entryHeader(nch, key, value)
	testStep() // the run taken, perhaps over a deleted entry's bytes
	tb.writeEntry(&t, c, &h, key, value)
	testStep() // written, not yet named
	if !tb.placeSlot(&t, tag, c) {
		return s.corrupt(t.index, errNoSlot)
	}
	t.addEntries(1)
	atomic.AddUint64(s.entries, 1)
	return nil
}

// placeSlot stores a slot at the first empty position from the tag's home.
// Caller checked that the tier has room (entries < MaxTierEntries < Slots),
// so it reports false, having stored nothing, only when damage filled
// every slot while the tier's entry count says otherwise.
func (tb *Table) placeSlot(t *tier, tag uint32, c int64) bool {
	mask := int64(tb.layout.slotMask)
	for pos, n := int64(tag)&mask, len(t.slots); n > 0; pos, n = (pos+1)&mask, n-1 {
		if atomic.LoadUint64(&t.slots[pos]) == 0 {
			atomic.StoreUint64(&t.slots[pos], makeSlot(tag, c))
			return true
		}
	}
	return false
}

// errNoSlot is what a writer reports when placeSlot found no empty slot.
const errNoSlot = "every slot is taken although the tier's entry count leaves room"

// errNoHole is what a remover reports when the slot table has no empty
// slot to end its shift at.
const errNoHole = "every slot is taken, so a removal's shift has no end"

// slotsEndAfter reports whether an empty slot follows pos in t's slot
// table, where removeSlot's shift ends: always, unless damage filled the
// table (the tier's entry count keeps a free slot). It looks along pos's
// probe run only, a slot or two as a rule.
func (tb *Table) slotsEndAfter(t *tier, pos int64) bool {
	mask := int64(tb.layout.slotMask)
	for n, j := int64(0), (pos+1)&mask; n < mask; n, j = n+1, (j+1)&mask {
		if atomic.LoadUint64(&t.slots[j]) == 0 {
			return true
		}
	}
	return false
}

// removeSlot deletes the slot at pos by shifting later slots of the same
// probe run back, so lookups never need tombstones. Caller holds write,
// and has made sure of an empty slot after pos (slotsEndAfter); without
// one the shift stops after a lap of the table.
func (tb *Table) removeSlot(t *tier, pos int64) {
	mask := int64(tb.layout.slotMask)
	hole := pos
	for n, j := int64(0), (pos+1)&mask; n < mask; n, j = n+1, (j+1)&mask {
		s := atomic.LoadUint64(&t.slots[j])
		if s == 0 {
			break
		}
		home := int64(slotTag(s)) & mask
		// The entry at j may fill the hole unless its home lies cyclically
		// in (hole, j]: then it would move before its home and be lost.
		var stays bool
		if hole <= j {
			stays = hole < home && home <= j
		} else {
			stays = hole < home || home <= j
		}
		if stays {
			continue
		}
		atomic.StoreUint64(&t.slots[hole], s)
		hole = j
	}
	atomic.StoreUint64(&t.slots[hole], 0)
}

// allocHome finds n free chunks for an entry whose slot tag is tag, new or
// moving (as allocRun): one of its two home runs in the first tier when
// that is free, else wherever allocRun finds them. A home run is a place
// computed from the tag alone (geometry.homeByte and secondHomeByte), so a
// lookup can request the entry's lines together with its slot's instead of
// after them. Two places instead of one put more entries at home: 82%
// against 63% of a freshly filled 1M map of 16-byte keys and 64-byte
// values, which made the peer benchmark's Get and Put about 2% faster
// (see README). Where an entry lies is not part of the format: files
// written before (or entries that got no home) are read the same way, one
// miss later. A cost: free space is left in runs between entries, so a
// tier under churn with values of varied sizes compacts more often (with
// one home run, a test of 200k entries and 400k overwrites of 4 to 124
// byte values compacted 438 times against 337 with first fit alone; the
// second home run made BenchmarkOverwriteChurn compact 6% more often).
func (s *Segment) allocHome(w *writer, tag uint32, n int64, moving *location) (tier, int64, error) {
	if t, c, ok := s.takeHomeRun(tag, n, moving); ok {
		return t, c, nil
	}
	return s.allocRun(w, n, moving)
}

// takeHomeRun takes the first of tag's two home runs of n chunks that is
// free, if the first tier has room; false if neither is.
func (s *Segment) takeHomeRun(tag uint32, n int64, moving *location) (tier, int64, bool) {
	tb := s.tb
	t := tb.tier(s.index)
	if s.hasRoom(&t, moving) {
		for _, home := range [2]uint64{tb.geom.homeByte(tag), tb.geom.secondHomeByte(tag)} {
			if c := int64(home >> tb.geom.chunkShift); c+n <= tb.layout.Chunks && t.runFree(c, n) {
				t.take(c, n)
				return t, c, true
			}
		}
	}
	return tier{}, 0, false
}

// hasRoom reports whether tier t may take one more entry: it holds fewer
// than MaxTierEntries, or moving (if not nil) is an entry moving within it.
func (s *Segment) hasRoom(t *tier, moving *location) bool {
	return int64(t.entries()) < s.tb.layout.MaxTierEntries || (moving != nil && moving.tier.index == t.index)
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
		return nt, c, nil
	}
	return tier{}, 0, s.corrupt(nt.index, "fresh tier has no room")
}

// firstFit walks the segment's chain for the first run of n free chunks in
// a tier with room for one more entry (moving, if not nil, is an entry
// moving out of its tier) and takes it: c is -1 if there is none. It also
// returns the first tier with room whose free chunks would hold n once
// compacted (nil if none) and the chain's last tier, and fails with
// ErrCorrupt on a link out of range.
func (s *Segment) firstFit(n int64, moving *location) (t tier, c int64, fragmented *tier, last tier, err error) {
	tb := s.tb
	l := &tb.layout
	i := s.index
	for hops := int64(0); hops < l.Tiers; hops++ {
		tv := tb.tier(i)
		if s.hasRoom(&tv, moving) {
			if c := tv.alloc(n, l.Chunks); c >= 0 {
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
		if next > uint64(l.Tiers) || int64(next-1) < l.Segments {
			return tier{}, -1, nil, tier{}, s.corrupt(i, "tier link out of range")
		}
		i = int64(next - 1)
	}
	return tier{}, -1, fragmented, last, nil
}

// linkTier takes a tier from the overflow pool and appends it to the chain
// after last. The pool is a counter: tiers are never returned, and a process
// that dies between taking and linking a tier only wastes it.
func (s *Segment) linkTier(last *tier) (tier, error) {
	tb := s.tb
	l := &tb.layout
	pool := uint64(l.Tiers - l.Segments)
	var idx uint64
	if tb.admin != nil {
		tb.admin.Lock()
		used := atomic.LoadUint64(tb.extraTiers)
		if used >= pool {
			_ = tb.admin.Unlock()
			return tier{}, s.poolExhausted(pool)
		}
		idx = uint64(l.Segments) + used
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
			idx = uint64(l.Segments) + used
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
// under the entries it may hold.
func (s *Segment) attachTier(last *tier, idx uint64) (tier, error) {
	nt := s.tb.tier(int64(idx))
	if !reservedZero(nt.header[:tierHeaderSize/8]) {
		return tier{}, s.corrupt(int64(idx), "the overflow pool handed out a tier that is not zero: its count is damaged, or the tier (Repair mends them)")
	}
	atomic.StoreUint64(&nt.header[thOwner/8], uint64(s.index)+1)
	atomic.StoreUint64(&nt.header[thOrder/8], uint64(s.Tiers()))
	atomic.StoreUint64(&last.header[thNext/8], idx+1) // publish: readers may follow it now
	atomic.AddUint64(s.tiers, 1)
	return nt, nil
}

// compact slides the tier's entries to the start of its entry space, in
// the order they lie, so its free chunks form one run (and trims runs
// longer than their entry). Slots keep their positions; only their chunk
// numbers change. Caller holds write (sequence odd).
//
// A process may die at any instruction of it, and then every entry but the
// one moving must still be where its slot says, whole: entries move in
// the order they lie, so each lands only on free chunks or on chunks it
// left itself, and its slot names the new place only once the copy is
// whole (see rebuild). An entry that slides by less than its length
// overlaps itself; it moves by journal (see slideOverlapping), which
// recovery finishes.
func (s *Segment) compact(t *tier) error {
	tb := s.tb
	l := &tb.layout
	s.countMove(&tb.Compactions, stCompactions)
	type live struct{ pos, c, size int64 }
	entries := make([]live, 0, min(t.entries(), uint64(l.Slots)))
	for pos, slot := range t.slots {
		if slot == 0 {
			continue
		}
		c := slotChunk(slot)
		klen, vlen, _, ok := tb.entryAt(t, c)
		if !ok {
			return s.corrupt(t.index, "undecodable entry during compaction")
		}
		entries = append(entries, live{pos: int64(pos), c: c, size: entryHeaderSize + klen + vlen})
	}
	slices.SortFunc(entries, func(a, b live) int { return cmp.Compare(a.c, b.c) })
	// Checked before anything moves: a damaged tier stays as it was.
	for i := 1; i < len(entries); i++ {
		if prev := entries[i-1]; prev.c+ceilDiv(prev.size, l.ChunkSize) > entries[i].c {
			return s.corrupt(t.index, "entries overlap during compaction")
		}
	}
	next := int64(0)
	for _, e := range entries {
		nch := ceilDiv(e.size, l.ChunkSize)
		journalled := false
		switch {
		case e.c == next:
		case next+nch <= e.c:
			copy(t.space[next*l.ChunkSize:], t.space[e.c*l.ChunkSize:e.c*l.ChunkSize+e.size])
			testStep()
		default:
			tb.slideOverlapping(t, e.c, next, e.size)
			journalled = true
		}
		// A run longer than its entry (its value shrank) is trimmed; the
		// chunk count and checksum share one word, so the header is never
		// half rewritten.
		tb.setRunLength(t, next, nch)
		testStep()
		if e.c != next {
			renameSlot(&t.slots[e.pos], next)
			testStep()
		}
		if journalled {
			t.clearMove()
		}
		next += nch
	}
	bitmap := make([]uint64, len(t.bitmap))
	for c := int64(0); c < next; c += 64 {
		bitmap[c>>6] = ^uint64(0) >> (64 - uint(min(next-c, 64)))
	}
	t.storeBitmap(bitmap)
	atomic.StoreUint64(&t.header[thUsedChunks/8], uint64(next))
	t.setLowestFree(next)
	return nil
}

// slideOverlapping moves the size bytes of the entry at chunk src down to
// chunk dst, which lies less than its length below. A copy that overlaps
// its source cannot be redone from the start once cut short, so it goes by
// blocks as long as the slide, each of which reads only bytes no earlier
// block wrote, and the tier header journals the move and each block done:
// finishMove completes it after a death. The caller names dst in the slot,
// then clears the journal.
func (tb *Table) slideOverlapping(t *tier, src, dst, size int64) {
	atomic.StoreUint64(&t.header[thMoveDone/8], uint64(size)<<32)
	atomic.StoreUint64(&t.header[thMove/8], moveJournal(src, dst))
	testStep()
	tb.continueMove(t, src, dst, size, 0)
}

// continueMove copies the blocks of a journalled move from byte done on.
func (tb *Table) continueMove(t *tier, src, dst, size, done int64) {
	cs := tb.layout.ChunkSize
	gap := (src - dst) * cs
	for done < size {
		n := min(gap, size-done)
		copy(t.space[dst*cs+done:dst*cs+done+n], t.space[src*cs+done:src*cs+done+n])
		testStep()
		done += n
		atomic.StoreUint64(&t.header[thMoveDone/8], uint64(size)<<32|uint64(done))
	}
}

// moveJournal is the tier header's move word: a move in progress (bit 63)
// from chunk src to chunk dst (31 bits each, as in a slot).
func moveJournal(src, dst int64) uint64 { return 1<<63 | uint64(src)<<31 | uint64(dst) }

// finishMove completes a journalled move that a dead process cut short: it
// copies what the journal says is left, names the new place in the slot
// that named the old (if the move had not got that far), and clears the
// journal. Journal words no writer leaves are only cleared. Caller holds
// write.
func (tb *Table) finishMove(t *tier) {
	defer t.clearMove()
	j := atomic.LoadUint64(&t.header[thMove/8])
	progress := atomic.LoadUint64(&t.header[thMoveDone/8])
	src, dst := int64(j>>31&(1<<31-1)), int64(j&(1<<31-1))
	size, done := int64(progress>>32), int64(uint32(progress))
	l := &tb.layout
	if j>>62 != 2 || dst >= src || src >= l.Chunks || size <= 0 || done > size || src*l.ChunkSize+size > l.Chunks*l.ChunkSize {
		return // no move (j == 0), or not one a writer journals
	}
	// A move cut short has its entry named at src (not yet renamed) or at
	// dst (renamed, journal not yet cleared). Words that only look like a
	// journal name neither, and copying by them would write over entries.
	// And in a real one, no other entry lies where the entry slides: the
	// ones before it are packed below dst, the ones after start past it.
	nch := ceilDiv(size, l.ChunkSize)
	named := -1
	for pos := range t.slots {
		slot := atomic.LoadUint64(&t.slots[pos])
		if slot == 0 {
			continue
		}
		c := slotChunk(slot)
		if named < 0 && (c == src || c == dst && done == size) {
			named = pos
			continue
		}
		if _, _, n, ok := tb.entryAt(t, c); ok && c < src+nch && c+n > dst {
			return
		}
	}
	if named < 0 {
		return
	}
	tb.continueMove(t, src, dst, size, done)
	if slotChunk(atomic.LoadUint64(&t.slots[named])) == src {
		tb.setRunLength(t, dst, nch)
		renameSlot(&t.slots[named], dst)
	}
}

// clearMove clears the tier's move journal: no move under way.
func (t *tier) clearMove() {
	atomic.StoreUint64(&t.header[thMove/8], 0)
	atomic.StoreUint64(&t.header[thMoveDone/8], 0)
}

// renameSlot makes the slot at p name chunk c, keeping its tag and
// reference bit.
func renameSlot(p *uint64, c int64) {
	slot := atomic.LoadUint64(p)
	atomic.StoreUint64(p, makeSlot(slotTag(slot), c)|slot&refBit)
}

// storeBitmap replaces the tier's allocation bitmap by words, one atomic
// word at a time, and returns how many chunks it freed.
func (t *tier) storeBitmap(words []uint64) (freed int64) {
	for w := range words {
		freed += int64(bits.OnesCount64(atomic.LoadUint64(&t.bitmap[w]) &^ words[w]))
		atomic.StoreUint64(&t.bitmap[w], words[w])
		testStep()
	}
	return freed
}

// setRunLength makes the header of the entry at chunk c say its run is nch
// chunks, with the checksum that goes with it: both in one 8-byte word.
func (tb *Table) setRunLength(t *tier, c, nch int64) {
	off := c * tb.layout.ChunkSize
	klen, vlen, cur, ok := tb.entryAt(t, c)
	if !ok || cur == nch {
		return
	}
	h := tb.entryHeader(nch, tb.entryKey(t, c, klen), tb.entryValue(t, c, klen, vlen))
	word := (t.index*tb.layout.TierSize + tb.layout.entriesOff + off + ehChunks) / 8
	atomic.StoreUint64(&tb.tierWords[word], h.chunksAndSum)
}

// Delete removes key and reports whether it was present.
func (s *Segment) Delete(hash uint64, key []byte) (bool, error) {
	p, w, err := s.previewThenLock("delete", hash, key)
	if err != nil {
		return false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, ok := s.findPreviewed(&p, hash, key)
	if !ok {
		return false, s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
	}
	if !found {
		return false, nil
	}
	return s.removeAt(&w, &loc)
}

// removeAt removes the entry at loc, found under w's update lock, and
// reports whether it was live (not expired).
func (s *Segment) removeAt(w *writer, loc *location) (bool, error) {
	live, err := s.dropEntry(w, loc, "delete")
	if err != nil {
		return false, err
	}
	if !live {
		atomic.AddUint64(s.expired, 1) // it was already gone to readers
	} else {
		s.count(stDeletes, 1)
	}
	return live, nil
}

// dropEntry removes the entry at loc, found under w's update lock, from
// its slot table, chunks and counts, and reports whether it was live (not
// expired); the caller counts the removal as what it is.
func (s *Segment) dropEntry(w *writer, loc *location, op string) (bool, error) {
	if !s.tb.slotsEndAfter(&loc.tier, loc.pos) {
		return false, s.corrupt(loc.tier.index, errNoHole)
	}
	if err := w.modify(op); err != nil {
		return false, err
	}
	live := s.live(loc)
	s.tb.removeSlot(&loc.tier, loc.pos)
	loc.tier.free(loc.chunk, loc.nch)
	loc.tier.addEntries(-1)
	atomic.AddUint64(s.entries, ^uint64(0))
	return live, nil
}

// Compute runs fn on the current value of key (a copy; found false if
// absent) under the segment's update lock, and stores what it returns: the
// new value if keep, else removes the key. No other writer can change the
// key in between, in any process. fn must not call into the map.
func (s *Segment) Compute(hash uint64, key []byte, fn func(old []byte, found bool) ([]byte, bool)) error {
	return s.ComputeExpiring(hash, key, 0, fn)
}

// ComputeExpiring is Compute with an expiry time (Unix nanoseconds, 0 =
// never) for a value it stores in a cache map where the key was absent (or
// had expired, which fn also sees as absent); a live entry keeps its own
// expiry. Other maps ignore it.
func (s *Segment) ComputeExpiring(hash uint64, key []byte, expiry int64, fn func(old []byte, found bool) ([]byte, bool)) error {
	return s.update(hash, key, expiry, true, func(old []byte, found bool) ([]byte, Outcome) {
		value, keep := fn(old, found)
		if !keep {
			return nil, Remove
		}
		return value, Store
	})
}

// Outcome is what an Update's function decides.
type Outcome int

const (
	Store  Outcome = iota // store the value it returned
	Remove                // remove the key (or leave it absent)
	Leave                 // change nothing
)

// Update runs fn on the current value of key under the segment's update
// lock and does what it decides. old is a copy in a pooled buffer, valid
// only during fn; the value fn returns may alias it. expiry is as
// ComputeExpiring's: for an entry it creates.
func (s *Segment) Update(hash uint64, key []byte, expiry int64, fn func(old []byte, found bool) ([]byte, Outcome)) error {
	return s.update(hash, key, expiry, false, fn)
}

// update is Update; with ownCopy, old is fn's to keep (Compute's contract)
// instead of a pooled buffer.
func (s *Segment) update(hash uint64, key []byte, expiry int64, ownCopy bool, fn func(old []byte, found bool) ([]byte, Outcome)) error {
	p, w, err := s.previewThenLock("compute", hash, key)
	if err != nil {
		return err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, ok := s.findPreviewed(&p, hash, key)
	if !ok {
		return s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
	}
	var old []byte
	var oldBuf *[]byte
	live := false
	if found {
		stored := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		var v []byte
		v, live, _ = s.tb.userValue(stored)
		if live && s.tb.layout.Cache {
			// A live entry keeps its expiry, as a counter in a fixed
			// window must: expiry applies to the entry fn creates.
			expiry, _ = expiryOf(stored)
		}
		switch {
		case live && ownCopy:
			old = append([]byte(nil), v...)
		case live:
			old, oldBuf = s.tb.copyValue(v)
			defer s.tb.releaseValue(oldBuf)
		}
	}
	value, outcome := fn(old, live)
	switch outcome {
	case Leave:
		return nil
	case Remove:
		if found {
			_, err := s.removeAt(&w, &loc)
			return err
		}
		return nil
	}
	if err := s.store(&w, hash, &loc, found, key, value, expiry); err != nil {
		return err
	}
	if found && !live {
		atomic.AddUint64(s.expired, 1)
	}
	s.countLocked(stPuts)
	return nil
}
