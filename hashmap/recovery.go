package hashmap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
)

// DefaultMaxProcesses is how many processes may have a new map open for
// writing at once when Options.MaxProcesses is zero.
const DefaultMaxProcesses = 64

// registryRecordMagic starts the registry's part of the layout record.
// Files from before the registry have none; they open without one, and
// recovery then refuses to run (it could not tell the living from the dead).
const registryRecordMagic = "SMREGLY1"

func encodeRegistryRecord(slots int) []byte {
	return binary.LittleEndian.AppendUint64([]byte(registryRecordMagic), uint64(slots))
}

func decodeRegistryRecord(b []byte) (int, error) {
	if len(b) != len(registryRecordMagic)+8 || string(b[:len(registryRecordMagic)]) != registryRecordMagic {
		return 0, fmt.Errorf("%w: damaged process-registry record in the header", ErrCorrupt)
	}
	slots := binary.LittleEndian.Uint64(b[len(registryRecordMagic):])
	if slots == 0 || slots > maxProcesses {
		return 0, fmt.Errorf("%w: process registry of %d slots", ErrCorrupt, slots)
	}
	return int(slots), nil
}

// maxProcesses bounds Options.MaxProcesses: the liveness scan costs one
// system call per slot.
const maxProcesses = 4096

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
	Dropped  int64         // slots dropped: their entry is undecodable, fails its checksum, or belongs elsewhere
	Doubled  int64         // second copies of a key (a move across tiers cut short), dropped
	Salvaged int64         // Repair only: sound entries no slot named (a damaged slot), named again
	Relinked int64         // overflow tiers a damaged link (or a writer that died linking them) had left out of the chain, linked again
	Restored bool          // an in-place rewrite cut short was put right from the undo record: its entry is whole, with its old value or the new one
	Cleared  bool          // a Clear cut short was finished: the segment is empty
	Freed    int64         // chunks marked used that no kept entry occupies (work of a writer cut short), freed
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
	var rep Recovery
	unlock, err := m.reg.LockRecovery(wait)
	if err != nil {
		return rep, fmt.Errorf("recover %s: %w", m.Path(), err)
	}
	defer unlock()
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
	if only == nil {
		only = make([]int, m.layout.Segments)
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
	if len(only) == int(m.layout.Segments) && rep.Locks.Pending == 0 {
		// Everything the dead held is released: their slots need no more
		// attention.
		_, _ = m.reg.MarkDeadRecovered(dead)
	}
	return rep, nil
}

// waitInTurns waits for ipc lock l, lock index of the arena, up to d (d <
// 0: without end), in turns of the map's LockTimeout. Between turns it
// gives up, without the lock, with ErrClosed if closable and the map is
// closed, or with ErrTimeout once d has passed; and, if recovering, it
// recovers what dead processes left in the lock table before waiting
// again, so that a lock whose holder died is released for its survivors
// while a live holder is waited for as long as it takes. A FIFO waiter
// loses its place in the queue at each turn.
//
// When d has passed, recovering, and a process that died is a party to
// the lock (deadParty), it recovers the lock table and waits once more, up
// to d or LockTimeout, whichever is shorter, before it gives up: so a d
// too short for a turn between recoveries (any d up to LockTimeout) still
// gets a dead holder's lock, and ErrTimeout says a live process holds the
// lock, or one whose lock the pass could not release yet. In all, it
// returns within d, a recovery pass and that last wait.
func (m *Map) waitInTurns(l ipc.Mutex, index int, d time.Duration, closable, recovering bool) error {
	return m.waitInTurnsContext(context.Background(), l, index, d, closable, recovering)
}

// waitInTurnsContext is waitInTurns that also gives up, without the lock,
// with ctx.Err() once ctx is done: each turn's wait is bounded by ctx too
// (ipc.LockContext), so that it ends within about a millisecond of ctx.
func (m *Map) waitInTurnsContext(ctx context.Context, l ipc.Mutex, index int, d time.Duration, closable, recovering bool) error {
	recovering = recovering && m.reg != nil && m.reg.Self() >= 0
	if d < 0 && !closable && !recovering && ctx.Done() == nil {
		l.Lock()
		return nil
	}
	deadline := time.Now().Add(d)
	lastWait := false
	for {
		turn := m.opts.LockTimeout
		if d >= 0 {
			turn = max(0, min(turn, time.Until(deadline)))
		}
		if lockTurn(ctx, l, turn) == nil {
			return nil
		}
		switch err := contextEnded(ctx); {
		case err != nil:
			return err
		case closable && m.gate.Closed():
			return ErrClosed
		case d >= 0 && !time.Now().Before(deadline):
			if !recovering || lastWait || !m.deadParty(index) {
				return ErrTimeout
			}
			m.recoverLocks()
			lastWait = true
			deadline = time.Now().Add(min(d, m.opts.LockTimeout))
			continue
		}
		if recovering {
			_, _ = m.recoverSegments([]int{})
			m.recoveries.Add(1)
		}
	}
}

// contextEnded is ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed and its timer has yet to say so.
func contextEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// lockTurn is one turn of waitInTurnsContext: l.LockTimeout(turn), bounded
// by ctx too when ctx can end.
func lockTurn(ctx context.Context, l ipc.Mutex, turn time.Duration) error {
	if ctx.Done() == nil {
		return l.LockTimeout(turn)
	}
	tctx, cancel := context.WithTimeout(ctx, turn)
	defer cancel()
	return ipc.LockContext(tctx, l)
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

// adminLock is the map's admin lock as the segment table takes it, inside
// calls that Close waits for. It holds adminLocal too, for LockTable.Reset.
type adminLock struct{ m *Map }

func (a adminLock) Lock() {
	a.m.adminLocal.Lock()
	_ = a.m.waitInTurns(a.m.admin, 0, -1, false, true)
}

func (a adminLock) Unlock() error {
	defer a.m.adminLocal.Unlock()
	return a.m.admin.Unlock()
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

// StrayLocks describes, for a person, the locks that processes hold on the
// map file and that no writer of the map takes: a flock, or POSIX or OFD
// read locks over the file, such as a user who may only read the map can
// take. They stop no writer and no recovery (docs/RELIABILITY.md, "What
// read permission grants"); mapctl check names them so that nobody waiting
// on a map mistakes them for the cause. Empty where the platform does not
// list locks, or the file has no process registry.
func (m *Map) StrayLocks() []string {
	if m.reg == nil {
		return nil
	}
	return m.reg.StrayLocks()
}

// Problem is one thing Check found wrong.
type Problem struct {
	Segment int   // -1 for problems not tied to a segment
	Err     error // what is wrong, said for a person (damage matches ErrCorrupt)
}

// Check verifies the whole map read-only: every segment's lock word and
// sequence, tier chains, hash slots, entries and their checksums, and
// counters; the process registry, for processes that died without their
// locks being recovered; and the lock journals, for entries no lock
// episode could have written. A segment that a live writer is changing
// is looked at again, so a busy map is not reported as damaged; a lock
// held longer than LockTimeout is reported. It returns every problem found
// (none: the file is sound).
func (m *Map) Check() ([]Problem, error) {
	c, err := m.enterAny(false)
	if err != nil {
		return nil, err
	}
	defer c.Leave()
	var out []Problem
	for _, err := range m.file.HeaderProblems() {
		out = append(out, Problem{-1, alsoIs{err, ErrCorrupt}})
	}
	if m.regErr != nil {
		out = append(out, Problem{-1, m.regErr})
	}
	if m.lockTable.err != nil {
		out = append(out, Problem{-1, m.lockTable.err})
	}
	if m.reg != nil {
		m.reg.Check(func(err error) { out = append(out, Problem{-1, err}) })
		slots, err := m.reg.Slots()
		if err != nil {
			return nil, err
		}
		for _, s := range slots {
			if s.Dead() {
				out = append(out, Problem{-1, fmt.Errorf("process %d (slot %d, opened %s) died with the map open; run recover",
					s.PID, s.Index, s.ClaimedAt.Format(time.RFC3339))})
			}
		}
		if a := m.lockTable.arena; a != nil {
			for i := range m.reg.Layout().Slots {
				for _, err := range a.CheckJournal(m.reg.Journal(i)) {
					out = append(out, Problem{-1, fmt.Errorf("process slot %d: %w", i, err)})
				}
			}
		}
	}
	m.table.CheckGlobal(func(err error) { out = append(out, Problem{-1, err}) })
	for i := range int(m.layout.Segments) {
		s := m.table.Segment(i)
		deadline := time.Now().Add(m.opts.LockTimeout)
		for {
			// An insert changes no sequence (it changes no value), but the
			// count of entries, under the update lock: a pass is quiet when
			// the lock was free on both sides of it and neither moved.
			before, entries, free := s.Seq(), s.Len(), s.Lock().State().Free()
			var found []error
			s.Check(func(err error) { found = append(found, err) })
			quiet := free && before&1 == 0 && s.SeqAfterReads() == before && s.Len() == entries && s.Lock().State().Free()
			if quiet || len(found) == 0 || !time.Now().Before(deadline) {
				for _, err := range found {
					out = append(out, Problem{i, err})
				}
				// A lock held all this time is a live process's or a dead
				// one's: say which, as only the dead one's is recover's.
				if len(found) > 0 && !s.Lock().State().Free() {
					live, passedOn := m.liveHolders(i)
					if live != "" {
						out = append(out, Problem{i, fmt.Errorf("the lock is held by a live process (%s), longer than the lock timeout: busy, or stopped (SIGSTOP, a debugger); check again when it lets go", live)})
					}
					if passedOn != "" {
						out = append(out, Problem{i, fmt.Errorf("the lock is held by a process that is no longer running (%s), whose slot stays live: a process it passed the map's file descriptor to (an exec with it among the child's files, a fork) keeps the slot's lock; the lock is released once that descriptor is closed, or its process exits", passedOn)})
					}
				}
				break
			}
			time.Sleep(time.Millisecond) // a writer is at work: look again
		}
	}
	return out, nil
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

// liveHolders names the processes with the map open whose ledgers account
// for a hold of segment i's lock (a read, update or write lock, not a
// wait), or a change to it in flight: in live those running, in passedOn
// those whose slot lives on after them (registry.Slot.ProcessGone); ""
// for none, or when the file has no registry to tell.
func (m *Map) liveHolders(i int) (live, passedOn string) {
	if m.reg == nil {
		return "", ""
	}
	slots, err := m.reg.Live(nil)
	if err != nil {
		return "", ""
	}
	holding := func(ledger uint64) bool {
		held, settled := rwulock.LedgerHolds(ledger)
		st := rwulock.Decode(held)
		return st.Readers > 0 || st.Update || st.Write || !settled
	}
	var running, gone []string
	var ledgers []uint64
	for _, slot := range slots {
		ledgers = m.appendLedgers(ledgers[:0], slot, i)
		if !slices.ContainsFunc(ledgers, holding) {
			continue
		}
		sl, err := m.reg.Slot(slot)
		switch {
		case err != nil:
			running = append(running, fmt.Sprintf("slot %d", slot))
		case sl.ProcessGone():
			gone = append(gone, fmt.Sprintf("pid %d, slot %d", sl.PID, slot))
		default:
			running = append(running, fmt.Sprintf("pid %d, slot %d", sl.PID, slot))
		}
	}
	return strings.Join(running, "; "), strings.Join(gone, "; ")
}

// countOf is n with the noun for its number: "1 word", "3 words".
func countOf(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Repaired is what Repair did.
type Repaired struct {
	Recovery Recovery        // what dead processes held, released first
	Rebuilt  []SegmentRepair // the segments rebuilt for damage Check found
	Failed   []Problem       // segments Repair could not rebuild, and why
	// NoRegistry: the file predates the process registry, so Repair could
	// not run Recover (what dead processes hold stays held; see
	// ErrNoRegistry) and only checked and rebuilt the segments.
	NoRegistry bool
}

// Repair makes a damaged map sound again, as far as its entries allow. It
// mends the file header (a copy that does not verify is rewritten from the
// header the map was opened with, and padding that is not zero is
// zeroed), the process registry (words no process writes, and slots whose
// state is garbage, which then count as dead processes'), runs Recover
// (which also clears damaged free entries of dead processes' lock
// journals), then Check, and rebuilds every segment Check finds
// damaged from its entries: entries that do
// not decode or fail their checksum, as a machine crash can leave them
// (see Sync), are dropped; every other entry is kept, including those of
// an overflow tier that a damaged link or owner word cut from its chain,
// when the tier's own words say whose it is and where (Rebuilt's Relinked
// counts such tiers). Before the rebuilds it mends the count of overflow
// tiers handed out, if damage moved it below the tiers in use or beyond
// the pool, and clears owner words that damage wrote in tiers the pool
// has not handed out (Recovery.Mended says so). It
// is safe while other processes use the map, which wait for each
// segment's rebuild as for any writer. What is still wrong afterwards is for Check to say. In a
// file without a process registry it skips Recover and says so
// (Repaired.NoRegistry).
func (m *Map) Repair() (Repaired, error) {
	var rep Repaired
	c, err := m.enterAny(true)
	if err != nil {
		return rep, err
	}
	defer c.Leave()
	if m.reg != nil {
		// Slots with a garbage state become dead processes' first, for
		// Recover to release and free.
		n, err := m.reg.Mend(m.opts.LockTimeout)
		if err != nil {
			return rep, fmt.Errorf("repair %s: %w", m.Path(), err)
		}
		rep.Recovery, err = m.Recover()
		if n > 0 {
			rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("process registry: %s rewritten", countOf(n, "place", "places")))
		}
		if err != nil {
			return rep, err
		}
	} else {
		rep.NoRegistry = true
	}
	// The file header first: a copy that does not verify, or padding that
	// is not zero, rewritten from the header this process opened with.
	headerFixed, err := m.file.RepairHeader()
	rep.Recovery.Mended = append(rep.Recovery.Mended, headerFixed...)
	if err != nil {
		return rep, fmt.Errorf("repair %s: %w", m.Path(), err)
	}
	m.table.ClearReservedGlobal()
	// Before the rebuilds: a rebuild keeps a linked tier that lost its
	// owner word only if the count covers it.
	if from, to, strays, mended := m.table.MendPoolCount(); mended {
		if from != to {
			rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("the count of overflow tiers handed out: %d, now %d", from, to))
		}
		if strays > 0 {
			rep.Recovery.Mended = append(rep.Recovery.Mended, fmt.Sprintf("%s beyond that count, not blank, that no chain keeps: zeroed", countOf(strays, "overflow tier", "overflow tiers")))
		}
	}
	problems, err := m.Check()
	if err != nil {
		return rep, err
	}
	done := make(map[int]bool)
	for _, p := range problems {
		if p.Segment < 0 || done[p.Segment] {
			continue
		}
		done[p.Segment] = true
		r, rebuilt, err := m.table.Segment(p.Segment).Repair()
		switch {
		case err != nil:
			rep.Failed = append(rep.Failed, Problem{p.Segment, err})
		case rebuilt:
			rep.Rebuilt = append(rep.Rebuilt, segmentRepairOf(r))
		}
	}
	m.relinkCutTiers(&rep)
	if len(rep.Rebuilt) > 0 {
		m.repairs.Add(1)
	}
	return rep, nil
}

// relinkCutTiers rebuilds again each segment that an overflow tier of its
// own is cut from (segment.Table.UnlinkedTiers): a segment's rebuild
// cannot take back a tier that another chain's damaged link still
// reaches, and that chain's rebuild, later in the same Repair, cuts the
// link; the second rebuild links the tier back or counts its entries as
// dropped. Each segment is rebuilt again at most once a round, for a few
// rounds: one more rebuild can free one more such tier.
func (m *Map) relinkCutTiers(rep *Repaired) {
	for round := 0; round < 3; round++ {
		var segs []int64
		m.table.UnlinkedTiers(func(seg, _ int64) {
			if !slices.Contains(segs, seg) {
				segs = append(segs, seg)
			}
		})
		if len(segs) == 0 {
			return
		}
		for _, seg := range segs {
			r, err := m.table.Segment(int(seg)).Rebuild()
			if err != nil {
				rep.Failed = append(rep.Failed, Problem{int(seg), err})
				continue
			}
			rep.Rebuilt = mergeRebuilt(rep.Rebuilt, segmentRepairOf(r))
		}
	}
}

// mergeRebuilt adds r to list, folding it into an earlier rebuild of the
// same segment: the later one's count of entries kept, the sum of what
// each dropped, relinked, salvaged and freed.
func mergeRebuilt(list []SegmentRepair, r SegmentRepair) []SegmentRepair {
	for i := range list {
		if e := &list[i]; e.Segment == r.Segment {
			e.Kept = r.Kept
			e.Dropped += r.Dropped
			e.Doubled += r.Doubled
			e.Salvaged += r.Salvaged
			e.Relinked += r.Relinked
			e.Freed += r.Freed
			e.Restored = e.Restored || r.Restored
			e.Cleared = e.Cleared || r.Cleared
			return list
		}
	}
	return append(list, r)
}

func loadLedger(p *uint64) uint64 { return atomic.LoadUint64(p) }
