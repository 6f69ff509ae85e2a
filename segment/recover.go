package segment

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/rwulock"
)

// Recovered is what one segment's recovery did.
type Recovered struct {
	Segment  int64
	Orphans  rwulock.Orphans // what dead processes held of its lock
	Rebuilt  bool            // a dead process held it exclusively: its data was rebuilt
	Kept     int64           // entries kept by the rebuild
	Dropped  int64           // entries dropped: a slot's that is undecodable, fails its checksum or belongs elsewhere, and the sound ones of overflow tiers given up
	Doubled  int64           // second copies of a key (a move across tiers cut short), dropped
	Salvaged int64           // Repair only: sound entries no slot named (a damaged slot), named again
	Relinked int64           // files with stamps: overflow tiers a damaged link (or a writer that died linking them) had left out of the chain, linked again
	Restored bool            // an in-place rewrite cut short was put right from the undo record: its entry is whole, with its old value (the general path's record) or the new one (Put's fast path's)
	Cleared  bool            // a Clear cut short was finished: the segment is empty
	Freed    int64           // chunks marked used that no kept entry occupies (work of a writer cut short), freed
	// Files with stamps: Restamped counts tiers of the chain whose stamp
	// did not verify, stamped again (damage to the tier's header); Zeroed
	// says the first tier's header was all zeros, the segment's mark gone:
	// what the tier held before is lost, and no count says how much.
	Restamped int64
	Zeroed    bool
}

// Recover releases what dead processes left in segment s's lock word,
// rebuilding the segment if one held the update or write lock. live appends
// the ledger words of every live process for this segment. Callers serialize
// recoveries.
func (s *Segment) Recover(live func(dst []uint64) []uint64, deadline time.Time) (Recovered, error) {
	// Recover releases what dead processes left in segment s's lock word.
	// live appends the ledger words of every live process for this segment
	// (this process's included). If a dead process held the update or
	// write lock, the segment's data may be half changed: Recover takes
	// the lock in its place, rebuilds the hash lookup of every tier from
	// the entries themselves (dropping entries whose checksum fails, and
	// second copies of a key), fixes the counters, and releases it. It
	// gives up with an error if live processes keep the lock word moving
	// until deadline.
	//
	// Callers serialize recoveries (the registry's recovery lock).
	rep := Recovered{Segment: s.index}
	for {
		word, o, err := s.lock.FindOrphans(live, deadline)
		if err != nil {
			return rep, s.lockErr("recover", err)
		}
		rep.Orphans = o
		took, err := s.lock.ReleaseOrphans(word, o)
		if errors.Is(err, rwulock.ErrChanged) {
			continue
		}
		if err != nil {
			return rep, s.lockErr("recover", err)
		}
		if !took {
			return rep, nil
		}
		break
	}
	// We hold the dead holder's lock: its write lock, under which nobody
	// else is inside, or its update lock, under which readers may be
	// inside, so wait for them. (Under the update lock a writer changes
	// nothing readers depend on, but it may have placed an entry it had
	// not yet counted, or linked a tier.) If they stay past the deadline
	// the lock goes back to the dead, for the next pass to find again:
	// released, it would leave the data unrepaired with nothing to say so.
	if !rep.Orphans.Write {
		if err := s.lock.UpgradeUpdateToWrite(time.Until(deadline)); err != nil {
			s.lock.AbandonUpdate()
			return rep, s.lockErr("recover", err)
		}
	}
	rep.Restored = s.restoreUndo() // before the sequence changes: the record names it
	// Likewise: the clearing word names the odd sequence.
	rep.Cleared = s.finishClear(&rep)
	if atomic.LoadUint64(s.seq)&1 == 0 {
		atomic.AddUint64(s.seq, 1) // odd: optimistic readers retry until we are done
	}
	s.finishMoves(&rep)
	s.rebuild(&rep, false)
	atomic.AddUint64(s.seq, 1)
	_ = s.lock.WriteUnlock()
	rep.Rebuilt = true
	return rep, nil
}

// Rebuild rewrites segment s's metadata from its entries under its write
// lock, for damage Check reports that no death explains; ErrTimeout if a
// live process holds the lock throughout.
func (s *Segment) Rebuild() (Recovered, error) {
	// Rebuild rewrites segment s's metadata from its entries, as Recover
	// does for a segment a dead process was modifying, for damage that no
	// death explains and Check reports: pages of the file torn by a
	// machine crash, a stray write. It takes the segment's write lock as
	// any writer does (and fails with ErrTimeout if a live process holds
	// it throughout), drops the entries that do not decode or fail their
	// checksum and second copies of a key, and recounts. Unlike Recover it
	// also takes back sound entries that no slot names, when no slot names
	// their key (see rebuild's salvage). An odd sequence left by a writer
	// that died inside comes out even.
	return s.rebuildIf(func() bool { return true })
}

// Repair is Rebuild for a segment Check found damaged, done only if Check
// still finds it so under the update lock. It reports whether it rebuilt.
func (s *Segment) Repair() (Recovered, bool, error) {
	// Only under the lock: a Check that raced with a writer (an insert
	// changes no sequence) is not damage. It reports whether it rebuilt.
	rebuilt := false
	rep, err := s.rebuildIf(func() bool {
		s.check(func(error) { rebuilt = true }, true)
		return rebuilt
	})
	return rep, rebuilt, err
}

// rebuildIf takes the update lock and, if damaged says so, the write lock
// and rebuilds (see Rebuild).
func (s *Segment) rebuildIf(damaged func() bool) (Recovered, error) {
	rep := Recovered{Segment: s.index}
	w, err := s.beginUpdate("rebuild")
	if err != nil {
		return rep, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	if !damaged() {
		return rep, nil
	}
	if err := w.upgrade("rebuild"); err != nil {
		return rep, err
	}
	rep.Restored = s.restoreUndo()
	rep.Cleared = s.finishClear(&rep)
	if atomic.LoadUint64(s.seq)&1 == 0 {
		atomic.AddUint64(s.seq, 1) // odd: optimistic readers retry until we are done
	}
	s.finishMoves(&rep)
	s.rebuild(&rep, true)
	s.clearReserved()
	rep.Rebuilt = true
	return rep, nil // the deferred end makes the sequence even again
}

// finishMoves completes the compaction moves a dead process cut short in
// the segment's tiers (see compact); rep counts what chain linked again
// or dropped. Caller holds write.
func (s *Segment) finishMoves(rep *Recovered) {
	for _, t := range s.chain(rep) {
		tv := s.tb.tier(t)
		s.tb.finishMove(&tv)
	}
}
