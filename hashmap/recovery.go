package hashmap

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
)

// ErrNoRegistry: the file predates the process registry, so dead processes
// cannot be told from live ones and nothing is recovered.
var ErrNoRegistry = errors.New("sharedmap: the file has no process registry (created by an older version); recovery needs one")

// Recovery is what a recovery pass found and repaired.
type Recovery struct {
	DeadProcesses []DeadProcess   // processes that died with the map open
	Segments      []SegmentRepair // segments whose lock held something of the dead
	// Locks is what was done for the lock table (and the map's admin lock):
	// queue turns of the dead taken over, seats and TTAS locks given back.
	Locks LockRecovery
	// Mended describes damage outside the segments that was rewritten: a
	// copy of the file header that did not verify, rewritten from the
	// other, and the process registry's and the lock table's headers,
	// whose sizes the file's header also holds (mended by a writable
	// Open); padding of the file header, and registry words no process
	// writes (mended by Repair).
	Mended []string
}

// Repaired reports whether the pass changed anything.
func (r Recovery) Repaired() bool {
	l := r.Locks
	return len(r.Segments) > 0 || l.Adopted+l.Seats+l.Owners+l.Resets > 0 || len(r.Mended) > 0
}

// DeadProcess is a process that died with the map open, as the file's
// process registry recorded it when it opened the map.
type DeadProcess struct {
	PID      int       // its process id (which another process may have been given since)
	Slot     int       // its slot in the file's process registry
	OpenedAt time.Time // when it opened the map
}

// SegmentRepair is what a recovery pass or a Repair did to one segment.
type SegmentRepair struct {
	Segment  int64         // the segment's number, 0 to Stats.Segments-1
	Orphans  OrphanedLocks // what dead processes held of its lock, released for them
	Rebuilt  bool          // a dead process held it exclusively: its data was rebuilt
	Kept     int64         // entries kept by the rebuild
	Dropped  int64         // entries dropped: a slot's that is undecodable, fails its checksum or belongs elsewhere, and the sound ones of overflow tiers given up (cut from their chains by damage)
	Doubled  int64         // second copies of a key (a move across tiers cut short), dropped
	Salvaged int64         // Repair only: sound entries no slot named (a damaged slot), named again
	Relinked int64         // files with stamps: overflow tiers a damaged link (or a writer that died linking them) had left out of the chain, linked again
	Restored bool          // an in-place rewrite cut short was put right from the undo record: its entry is whole, with its old value or the new one
	Cleared  bool          // a Clear cut short was finished: the segment is empty
	Freed    int64         // chunks marked used that no kept entry occupies (work of a writer cut short), freed
	// Restamped counts tiers of the segment whose stamp (what a tier's
	// header says the tier is, in files with stamps) did not verify,
	// stamped again: damage to their headers.
	Restamped int64
	// Zeroed: the segment's first tier header was all zeros, its mark
	// gone, as a zeroed segment reads. What that tier held is lost, and
	// nothing tells how many entries.
	Zeroed bool
}

// OrphanedLocks is what processes that died held of one segment's lock.
type OrphanedLocks struct {
	Reads  uint32 // read locks
	Update bool   // the update lock
	Write  bool   // the write lock
	Waits  uint32 // waits registered by writers
}

// LockRecovery is what a recovery pass did for the lock table and the
// map's admin lock.
type LockRecovery struct {
	// Adopted counts lock-queue turns of dead processes that this process
	// took over: it takes their turns and hands each lock on, so the
	// waiters behind them keep their order.
	Adopted int
	// Seats counts places in a hapax-cr lock that dead processes held,
	// given back.
	Seats int
	// Owners counts ttas locks whose dead holder was released.
	Owners int
	// Resets counts locks reset because their queue could not be read
	// (two processes died in the same few instructions).
	Resets int
	// Pending counts what is left for a later pass: a live process was in
	// the middle of a step, or this process could take on no more.
	Pending int
}

// deadProcessOf is what a user is told of a dead process's registry slot.
func deadProcessOf(s registry.Slot) DeadProcess {
	return DeadProcess{PID: s.PID, Slot: s.Index, OpenedAt: s.ClaimedAt}
}

// segmentRepairOf is what a user is told of segment's recovery or
// rebuild.
func segmentRepairOf(r segment.Recovered) SegmentRepair {
	o := r.Orphans
	return SegmentRepair{
		Segment: r.Segment, Orphans: OrphanedLocks{Reads: o.Reads, Update: o.Update, Write: o.Write, Waits: o.Waits},
		Rebuilt: r.Rebuilt, Kept: r.Kept, Dropped: r.Dropped, Doubled: r.Doubled, Salvaged: r.Salvaged,
		Relinked: r.Relinked, Restored: r.Restored, Cleared: r.Cleared, Freed: r.Freed,
		Restamped: r.Restamped, Zeroed: r.Zeroed,
	}
}

// lockRecoveryOf is what a user is told of the lock arena's recovery.
func lockRecoveryOf(r ipc.Recovery) LockRecovery {
	return LockRecovery{Adopted: r.Adopted, Seats: r.Seats, Owners: r.Owners, Resets: r.Resets, Pending: r.Pending}
}

// Recover finds processes that died with the map open and releases
// everything they held: read, update and write locks and registered waits
// of every segment (segments a dead process was modifying are rebuilt from
// their entries, as Repair rebuilds a damaged one). It is safe while other
// processes use the map: it only removes what no live process accounts
// for. Operations run it by themselves when a lock wait times out; call it
// (or `mapctl recover`) to repair at a time of your choosing.
func (m *Map) Recover() (Recovery, error) {
	c, err := m.enterAny(true)
	if err != nil {
		return Recovery{}, err
	}
	defer c.Leave()
	if m.reg == nil {
		return Recovery{}, ErrNoRegistry
	}
	return m.recoverSegments(nil)
}

// RecoveredAtOpen is what Open repaired: when processes had died with the
// map open, Open released what they held before returning; Mended lists
// the headers (of the lock table, the process registry) a writable Open
// rewrote from the file's layout.
func (m *Map) RecoveredAtOpen() Recovery {
	r := m.atOpen
	r.Mended = slices.Clone(m.mended)
	return r
}

// recoverSegments recovers the segments listed (all if nil) under the
// recovery lock, then frees dead slots if every segment came out clean.
func (m *Map) recoverSegments(only []int) (Recovery, error) {
	return m.recoverWithin(only, m.opts.LockTimeout)
}

// recoverWithin is recoverSegments waiting at most wait for the recovery
// lock.
func (m *Map) recoverWithin(only []int, wait time.Duration) (Recovery, error) {
	unlock, err := m.reg.LockRecovery(wait)
	if err != nil {
		return Recovery{}, fmt.Errorf("recover %s: %w", m.Path(), err)
	}
	defer unlock()
	return m.recoverHeld(only)
}

// recoverHeld is recoverSegments for a caller that holds the recovery
// lock.
func (m *Map) recoverHeld(only []int) (Recovery, error) {
	var rep Recovery
	slots, err := m.reg.Slots()
	if err != nil {
		return rep, fmt.Errorf("recover %s: %w", m.Path(), err)
	}
	var dead []registry.Slot // as Slots listed them, for MarkDeadRecovered
	for _, s := range slots {
		if s.Dead() {
			dead = append(dead, s)
			rep.DeadProcesses = append(rep.DeadProcesses, deadProcessOf(s))
		}
	}
	live, err := m.reg.Live(nil)
	if err != nil {
		return rep, fmt.Errorf("recover %s: %w", m.Path(), err)
	}
	all := only == nil
	if all {
		// Those in use and the next, which a split cut short may have
		// left locked (see segment.Table.SegmentsTouched); and the split
		// claim of a dead process, held until the pass ends.
		if release, ok := m.table.TakeOverSplitClaim(m.splitClaimerGone); ok {
			defer release()
		}
		only = make([]int, m.table.SegmentsTouched())
		for i := range only {
			only[i] = i
		}
	}
	if m.lockTable.arena != nil {
		alive := make(map[int]bool, len(live))
		for _, slot := range live {
			alive[slot] = true
		}
		locks, err := m.lockTable.arena.Recover(m.lockTable.algorithm, func(slot int) bool { return alive[slot] })
		rep.Locks = lockRecoveryOf(locks)
		if err != nil {
			return rep, fmt.Errorf("recover %s: locks: %w", m.Path(), err)
		}
	}
	deadline := time.Now().Add(m.opts.LockTimeout)
	var firstErr error
	for _, i := range only {
		ledgers := func(dst []uint64) []uint64 {
			for _, slot := range live {
				dst = m.appendLedgers(dst, slot, i)
			}
			return dst
		}
		r, err := m.table.Segment(i).Recover(ledgers, deadline)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if !r.Orphans.None() {
			rep.Segments = append(rep.Segments, segmentRepairOf(r))
		}
	}
	if rep.Repaired() {
		m.repairs.Add(1)
	}
	if firstErr != nil {
		return rep, fmt.Errorf("recover %s: %w", m.Path(), firstErr)
	}
	if all && rep.Locks.Pending == 0 {
		// Everything the dead held is released: their slots need no more
		// attention.
		_, _ = m.reg.MarkDeadRecovered(dead)
	}
	return rep, nil
}

// deadParty reports whether a process that died with the map open is a
// party to lock index of the arena: holds it, waits for it, or drives a
// dead process's episode on it, as its journal or (ttas) the lock's word
// says (ipc.Arena.Parties). A recovery pass then has work on the lock. It
// costs a load of every journal entry's state and one question to the
// kernel per party, and takes no lock. A process that closed the map
// while it held a lock is no party that died (see LockTable): its lock
// waits for the next Open of its slot.
func (m *Map) deadParty(index int) bool {
	t := m.lockTable
	if t.arena == nil || m.reg == nil || m.reg.Self() < 0 {
		return false
	}
	var buf [8]int
	for _, slot := range t.arena.Parties(t.algorithm, index, buf[:0]) {
		if s, err := m.reg.Slot(slot); err == nil && s.Dead() {
			return true
		}
	}
	return false
}

// recoverLocks is a recovery pass over the lock table alone, for a wait
// that found a party to its lock dead (deadParty). It does not wait for
// the recovery lock: the pass that holds it, this process's or another's,
// releases what the dead left too, or the next look finds it still there.
// A lock whose turn a surrogate takes over (see ipc.Arena.Recover) is
// released by it soon after, not by the time this returns.
func (m *Map) recoverLocks() {
	_, _ = m.recoverWithin([]int{}, 0)
	m.recoveries.Add(1)
}

// recoverAfterTimeout is the segment table's hook for a lock wait on
// segment seg that timed out: it repairs what dead processes left there
// and says to wait once more whenever the pass ran, since another process
// (a restarted one, at open) may have repaired the segment meanwhile. A
// lock that a live process holds too long still ends in ErrTimeout, after
// the second wait.
func (m *Map) recoverAfterTimeout(seg int64) bool {
	_, err := m.recoverSegments([]int{int(seg)})
	m.recoveries.Add(1)
	return err == nil
}

// splitClaimID is this process's split claim id (segment.Table.SetSplitter):
// its registry slot + 1 and the low 32 bits of the slot's generation.
func splitClaimID(slot int, generation uint64) uint64 {
	return uint64(slot+1)<<32 | uint64(uint32(generation))
}

// splitClaimerGone reports whether the process a split claim id names has
// left its registry slot: died, closed, or was succeeded by another. An id
// that names no slot (a damaged claim word) names no process either: the
// claim is taken over, or no split could ever run again.
func (m *Map) splitClaimerGone(id uint64) bool {
	s, err := m.reg.Slot(int(id>>32) - 1)
	if errors.Is(err, registry.ErrNoSlot) {
		return true
	}
	return err == nil && (!s.Alive || uint32(s.Generation) != uint32(id))
}

// recoverSplit is the segment table's hook for a split claim held by a
// process that is gone: under the recovery lock, it releases the claim
// and recovers the segments a split cut short may hold (SplitHeld), and
// reports whether it released the claim. It runs inside an insert (or a
// Clear's pause), so it does not wait for the recovery lock, and leaves
// the rest of the map to the recovery passes that look at all of it: a
// process busy recovering releases the claim itself, or the next
// would-be splitter finds it still there.
func (m *Map) recoverSplit() bool {
	unlock, err := m.reg.LockRecovery(0)
	if err != nil {
		return false
	}
	defer unlock()
	release, ok := m.table.TakeOverSplitClaim(m.splitClaimerGone)
	if !ok {
		return false
	}
	defer release()
	held := m.table.SplitHeld()
	only := make([]int, len(held))
	for i, seg := range held {
		only[i] = int(seg)
	}
	_, _ = m.recoverHeld(only)
	m.recoveries.Add(1)
	return true
}

// recoverSplitSegment is the segment table's hook for the segment a split
// would split into found locked: only a split cut short (in this process,
// or in one that died) leaves it so.
func (m *Map) recoverSplitSegment(seg int64) {
	_, _ = m.recoverSegments([]int{int(seg)})
	m.recoveries.Add(1)
}

// appendLedgers appends what registry slot's process accounts for on
// segment i's lock: its ledger and, in files with them, its fast ledger
// read as one.
func (m *Map) appendLedgers(dst []uint64, slot, i int) []uint64 {
	dst = append(dst, loadLedger(m.reg.Ledger(slot, i)))
	if m.layout.FastLedgers {
		dst = append(dst, rwulock.FastAsLedger(loadLedger(m.fastLedger(slot, i))))
	}
	return dst
}

func loadLedger(p *uint64) uint64 { return atomic.LoadUint64(p) }
