package segment

import (
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
)

// writer tracks what a modifying operation holds, so that every path
// releases exactly that. Locking follows Chronicle Map: update from the
// start (readers still enter), write only around the modification.
type writer struct {
	s     *Segment
	write bool
	kind  uint32 // the kind of entry insert, replace and relocate write (see kindHeader)
	// crowded: an insert left the segment past the size it was created
	// for (splitter.at): end tries a split once the lock is released.
	crowded bool
}

// beginUpdateKeyed is beginUpdate on the segment the key hashed to hash
// maps to: once the lock is held, it checks that the key still maps to
// the segment (a split may have moved it since the caller picked it),
// and if not lets go and goes to the right one. The answer then holds
// until the lock is released, since a split of the segment needs its
// write lock. It returns the segment locked.
func (s *Segment) beginUpdateKeyed(op string, hash uint64) (*Segment, writer, error) {
	for {
		w, err := s.beginUpdate(op)
		if err != nil {
			return s, w, err
		}
		if !s.tb.moved(hash, s.index) {
			return s, w, nil
		}
		w.end()
		s = s.tb.For(hash)
	}
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
	w.crowded = false
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
	if w.crowded {
		w.crowded = false
		w.s.tb.TrySplit()
	}
}

// testStep marks a step of an insert, a compaction or a rebuild that
// changes the file: where tests stop a process (see internal/testhook).
func testStep() { testhook.Step() }

// testAfterPreview, set only by tests, runs between a writer's preview and
// its lock: where another writer may change the segment.
var testAfterPreview func(*Segment)

// previewThenLock is how a writer starts: the preview, then the update
// lock, on the segment the key maps to once the lock is held (see
// beginUpdateKeyed), which it returns.
func (s *Segment) previewThenLock(op string, hash uint64, key []byte) (*Segment, preview, writer, error) {
	for {
		p := s.preview(hash, key)
		if testAfterPreview != nil {
			testAfterPreview(s)
		}
		w, err := s.beginUpdate(op)
		if err != nil {
			return s, p, w, err
		}
		if !s.tb.moved(hash, s.index) {
			return s, p, w, nil
		}
		w.end()
		s = s.tb.For(hash)
	}
}

// preview is a writer's lookup before it takes the segment's lock. It
// brings into this CPU's cache the lines the locked part will touch (the
// lock word, the counters, the key's slot and entry), so that their misses
// overlap one another instead of following the lock's, and none is paid
// with the lock held. Its answer is optimistic: valid only if the
// segment's sequence still reads seq once the lock is held (see
// findPreviewed).
type preview struct {
	seq   uint64
	pos   int64
	slot  uint64
	found bool
}

func (s *Segment) preview(hash uint64, key []byte) preview {
	var p preview
	p.seq = atomic.LoadUint64(s.seq)
	if s.counters != nil {
		_ = atomic.LoadUint64(&s.counters[0])
	}
	p.pos, p.slot, _, p.found, _ = s.tb.lookupHome(s.index, hash, key)
	return p
}

// findPreviewed is find for a caller holding the update lock, which takes
// the entry the preview found instead of looking again when
// no writer changed the segment since: every change that moves, rewrites
// or removes an entry moves the sequence. A preview that found nothing is
// not trusted: an insert, which changes no entry, does not move it. An
// entry or tier chain that does not decode is an ErrCorrupt naming the
// tier.
func (s *Segment) findPreviewed(p *preview, hash uint64, key []byte) (loc location, found bool, err error) {
	ok := true
	if !p.found || p.seq&1 != 0 || atomic.LoadUint64(s.seq) != p.seq {
		loc, found, ok = s.find(hash, key)
	} else {
		t := s.tb.tier(s.index)
		c := slotChunk(p.slot)
		klen, vlen, nch, good := s.tb.entryAt(&t, c)
		if good && s.tb.kindAt(&t, c) == 0 {
			return location{tier: t, slot: p.slot, pos: p.pos, chunk: c, klen: klen, vlen: vlen, nch: nch}, true, nil
		}
		loc, found, ok = s.find(hash, key) // cannot be, with the sequence unchanged; let find report it
	}
	if !ok {
		return loc, false, s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
	}
	if found && loc.kind != 0 {
		return loc, false, ErrLarge
	}
	return loc, found, nil
}
