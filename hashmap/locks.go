package hashmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/inflight"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
)

// ErrNoSuchLock: a lock table index outside 0..Len()-1.
var ErrNoSuchLock = errors.New("sharedmap: no such lock in the map's lock table")

// ErrNotAlone: LockTable.Reset, Upgrade or Resize needs the map to
// itself, and another process has it open for writing (or, for Resize,
// died with it open and has not been recovered from yet).
var ErrNotAlone = errors.New("sharedmap: other processes have the map open")

// ErrResetBusy: LockTable.Reset waited the map's LockTimeout for a write
// of this process to let go of the map's own lock, in vain. Nothing was
// reset.
var ErrResetBusy = errors.New("sharedmap: a write of this process holds the map's own lock")

// The lock record follows the segment layout record in the header. Files
// written before it existed have none: they open with an empty lock table.
const lockRecordMagic = "SMLOCKS1"

// lockLayout places the ipc arena right after the header; the process
// registry follows it, then the segments' areas (docs/FORMAT.md). Arena lock 0 is the map's own admin lock, application lock i
// is arena lock i+1.
type lockLayout struct {
	locks     int // application locks
	slots     int
	algorithm string
	words     int64 // arena size in 64-bit words
	bytes     int64 // arena size rounded up to whole pages
}

func newLockLayout(locks int, algorithm string) (lockLayout, error) {
	if locks < 0 || locks >= ipc.MaxLocks {
		return lockLayout{}, fmt.Errorf("%w: Locks %d must be in 0..%d", ErrBadOptions, locks, ipc.MaxLocks-1)
	}
	if _, err := ipc.Lookup(algorithm); err != nil {
		return lockLayout{}, fmt.Errorf("%w: LockAlgorithm: %v", ErrBadOptions, err)
	}
	l := lockLayout{locks: locks, slots: ipc.DefaultSlots, algorithm: algorithm}
	words, err := l.config().Words()
	if err != nil {
		return lockLayout{}, fmt.Errorf("%w: %v", ErrBadOptions, err)
	}
	l.words = int64(words)
	l.bytes = (l.words*8 + 4095) / 4096 * 4096
	return l, nil
}

// config is the arena's configuration. Only ticket-awn uses the arrays and
// node table of waiting nodes (alock the node table), so other algorithms' files go without them
// (as files from before ticket-awn do); ticket-awn files get the defaults.
func (l lockLayout) config() ipc.Config {
	c := ipc.Config{Slots: l.slots, Locks: l.locks + 1, AWNWaiters: -1, AWNNodes: -1}
	switch l.algorithm {
	case "ticket-awn":
		c.AWNWaiters, c.AWNNodes = 0, 0
	case "alock": // its other processes queue on nodes of the table
		c.AWNNodes = 0
	}
	return c
}

func (l lockLayout) encode() []byte {
	b := []byte(lockRecordMagic)
	b = binary.LittleEndian.AppendUint64(b, uint64(l.locks))
	b = binary.LittleEndian.AppendUint64(b, uint64(l.slots))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(l.algorithm)))
	return append(b, l.algorithm...)
}

// lockRecordLen is the length of the lock record at the start of b, as its
// own length field says (len(b) if b is too short to tell: decoding then
// reports the damage).
func lockRecordLen(b []byte) int {
	head := len(lockRecordMagic) + 24
	if len(b) < head {
		return len(b)
	}
	n := binary.LittleEndian.Uint64(b[len(lockRecordMagic)+16:])
	if n > uint64(len(b)-head) {
		return len(b)
	}
	return head + int(n)
}

func decodeLockLayout(b []byte) (lockLayout, error) {
	bad := fmt.Errorf("%w: damaged lock record in the header", ErrCorrupt)
	if len(b) < len(lockRecordMagic)+24 || string(b[:len(lockRecordMagic)]) != lockRecordMagic {
		return lockLayout{}, bad
	}
	b = b[len(lockRecordMagic):]
	locks, slots, n := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if n != uint64(len(b)-24) || locks >= ipc.MaxLocks {
		return lockLayout{}, bad
	}
	l, err := newLockLayout(int(locks), string(b[24:]))
	if err != nil {
		return lockLayout{}, fmt.Errorf("%w: %v", bad, err)
	}
	if uint64(l.slots) != slots {
		return lockLayout{}, bad
	}
	return l, nil
}

// LockTable is the map file's table of cross-process locks: lock i is the
// same lock in every process that opens the file. Locks are exclusive, and
// any goroutine may unlock a lock another one locked (with the cohort
// algorithms, one of the holder's process; with alock, one of its cohort: see
// package ipc). Create the map with Options.Locks and Options.LockAlgorithm.
// Hold no lock across Close: it stays held until another Open takes that
// Map's process slot and releases it as a dead process's; an alock can stay
// taken for good (mapctl recover --reset-locks frees it).
type LockTable struct {
	m         *Map
	arena     *ipc.Arena
	err       error // why a read-only open found no arena (Check reports it)
	algorithm string
	locks     []ipc.Mutex
	// looks holds, for each lock, the time (since epoch, in ns) before
	// which a failed TryLock does not look for a dead holder again (see
	// lookForDeadHolder). A monotonic reading, which costs less than a
	// time.Now.
	looks []atomic.Int64
	epoch time.Time
}

func newLockTable(m *Map, r *offheap.Region, l lockLayout) (*LockTable, error) {
	t := &LockTable{m: m, algorithm: l.algorithm}
	if l.words == 0 {
		return t, nil // no table: a file from before lock tables
	}
	words := r.Uint64s(offheap.HeaderSize, l.words)
	a, err := ipc.Attach(words)
	if err != nil && !r.ReadOnly() {
		// The arena header's sizes are copies of the file header's lock
		// record, which Open has checked: rewrite them rather than refuse
		// the map for good (Repair needs a writable open).
		if n, merr := ipc.MendHeader(words, l.config()); merr == nil && n > 0 {
			m.mended = append(m.mended, fmt.Sprintf("lock table header: %s rewritten from the file's layout", countOf(n, "word", "words")))
			a, err = ipc.Attach(words)
		}
	}
	switch {
	case err != nil && r.ReadOnly():
		// Read-only: the entries can still be read (and dumped); Check
		// reports this, and a writable open mends it.
		t.err = fmt.Errorf("%w: lock table: %v", ErrCorrupt, err)
		return t, nil
	case err != nil:
		return nil, fmt.Errorf("%w: lock table: %v", ErrCorrupt, err)
	}
	t.arena = a
	if r.ReadOnly() {
		return t, nil // attached for Check only: taking a lock writes
	}
	t.locks = make([]ipc.Mutex, l.locks+1)
	for i := range t.locks {
		if t.locks[i], err = a.Mutex(l.algorithm, i); err != nil {
			return nil, err
		}
	}
	m.admin = t.locks[0]
	t.locks = t.locks[1:]
	t.looks, t.epoch = make([]atomic.Int64, len(t.locks)), time.Now()
	return t, nil
}

func (t *LockTable) close() {
	if t.arena != nil {
		t.arena.Close()
	}
}

// Reset forces every lock of the table, and the map's own lock, back to
// free, and makes whatever waits for one queue again; it returns how many
// locks it reset. It is for locks that damage to the file left taken, or
// queued for good: recovery releases only what processes that died held,
// and Check reads no lock words. It needs the map to itself: it holds the
// registry's recovery lock, so no process opens the map meanwhile, and
// returns an error matching ErrNotAlone if another process has it open. It
// waits, up to the map's LockTimeout, for a write of this process that
// holds the map's own lock (linking an overflow tier) to let it go, and
// fails with ErrResetBusy if it does not. No goroutine of this process may
// hold or wait for any lock of the table while it runs.
func (t *LockTable) Reset() (int, error) {
	m := t.m
	c, err := m.enterAny(true)
	if err != nil {
		return 0, err
	}
	defer c.Leave()
	switch {
	case t.arena == nil:
		return 0, nil // a file from before lock tables
	case m.reg == nil:
		return 0, ErrNoRegistry
	}
	unlock, err := m.reg.LockRecovery(m.opts.LockTimeout)
	if err != nil {
		return 0, fmt.Errorf("reset the locks of %s: %w", m.Path(), err)
	}
	defer unlock()
	live, err := m.reg.Live(nil)
	if err != nil {
		return 0, fmt.Errorf("reset the locks of %s: %w", m.Path(), err)
	}
	var pids []int
	for _, i := range live {
		if i == m.reg.Self() {
			continue
		}
		if s, err := m.reg.Slot(i); err == nil {
			pids = append(pids, s.PID)
		}
	}
	if len(pids) > 0 {
		return 0, fmt.Errorf("reset the locks of %s: %w (pids %v)", m.Path(), ErrNotAlone, pids)
	}
	// Writes of this process hold the map's own lock in adminLock, which
	// holds adminLocal too: forcing the lock free under one would let a
	// second write in beside it, and both link the same tier.
	for deadline := time.Now().Add(m.opts.LockTimeout); !m.adminLocal.TryLock(); {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("reset the locks of %s: %w", m.Path(), ErrResetBusy)
		}
		time.Sleep(time.Millisecond)
	}
	defer m.adminLocal.Unlock()
	n := t.Len() + 1 // and the map's own, lock 0 of the arena
	for i := range n {
		if err := t.arena.Reset(i); err != nil {
			return i, err
		}
	}
	return n, nil
}

// Locks returns the map's lock table.
func (m *Map) Locks() *LockTable { return m.lockTable }

// Len is the number of locks in the table.
func (t *LockTable) Len() int { return t.m.lockLayout.locks }

// Algorithm is the lock algorithm the map was created with.
func (t *LockTable) Algorithm() string { return t.algorithm }

// lock counts a call on lock i in (see Map.enter); the caller leaves c.
func (t *LockTable) lock(i int) (l ipc.Mutex, c *inflight.Count, err error) {
	if c, err = t.m.enterAny(true); err != nil {
		return nil, nil, err
	}
	if i < 0 || i >= len(t.locks) {
		c.Leave()
		return nil, nil, fmt.Errorf("%w: lock %d of %d", ErrNoSuchLock, i, t.Len())
	}
	return t.locks[i], c, nil
}

// Lock blocks until lock i is granted. A holder or waiter that died is
// recovered: each time the map's LockTimeout passes, the lock table is
// recovered before waiting again. If the map is closed meanwhile, Lock
// gives up at the end of that wait and returns ErrClosed.
func (t *LockTable) Lock(i int) error {
	l, c, err := t.lock(i)
	if err != nil {
		return err
	}
	defer c.Leave()
	if err := t.m.waitInTurns(l, i+1, -1, true, true); err != nil {
		return fmt.Errorf("lock %d: %w", i, err)
	}
	return nil
}

// LockTimeout is Lock bounded by d (d < 0: not bounded); it returns an error
// matching ErrTimeout if d passes first. A d longer than the map's
// LockTimeout is waited in turns of LockTimeout, between which the map's
// closing ends the wait (ErrClosed), dead holders and waiters are recovered,
// and a FIFO lock takes the waiter back at the end of its queue. When d has
// passed and a dead process is a party to the lock, the lock table is
// recovered and the lock waited for once more, up to min(d, LockTimeout): so
// a d up to LockTimeout gets a dead holder's lock within twice d and a
// recovery pass, and ErrTimeout means a live holder (or a dead one the pass
// could not yet release).
func (t *LockTable) LockTimeout(i int, d time.Duration) error {
	l, c, err := t.lock(i)
	if err != nil {
		return err
	}
	defer c.Leave()
	switch err := t.m.waitInTurns(l, i+1, d, true, true); {
	case errors.Is(err, ErrTimeout):
		return fmt.Errorf("%w: lock %d after %v", ErrTimeout, i, d)
	case err != nil:
		return fmt.Errorf("lock %d: %w", i, err)
	}
	return nil
}

// TryLock takes lock i if it is free, without waiting. Finding it taken, it
// looks (at most once per quarter of the map's LockTimeout per lock in this
// process) for a dead process among those holding or waiting for it; if
// there is one, it recovers the lock table and tries once more. So polling
// with TryLock gets a dead holder's lock within a quarter of LockTimeout of
// the death, plus a recovery pass, without a new Open.
func (t *LockTable) TryLock(i int) (bool, error) {
	// A lock a live process holds costs a failed TryLock a clock
	// read.
	l, c, err := t.lock(i)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	if l.TryLock() {
		return true, nil
	}
	if !t.lookForDeadHolder(i) {
		return false, nil
	}
	return l.TryLock(), nil
}

// lookForDeadHolder is the slow path of a TryLock of lock i that found the
// lock taken: unless this process looked less than a quarter of
// LockTimeout ago, it looks for a dead party to the lock (deadParty: a
// scan of the journals and a system call per party, too much for every
// failed TryLock of a poller) and, if it finds one, runs a recovery pass of
// the lock table. It reports whether a pass ran. A quarter of LockTimeout
// keeps a TryLock poller's wait for a dead holder's lock well within one
// LockTimeout, the bound a blocked Lock waits before its first recovery
// pass, at a cost of a few looks per LockTimeout.
func (t *LockTable) lookForDeadHolder(i int) bool {
	next, now := &t.looks[i], int64(time.Since(t.epoch))
	n := next.Load()
	if now < n || !next.CompareAndSwap(n, now+int64(t.m.opts.LockTimeout/4)) {
		return false
	}
	if !t.m.deadParty(i + 1) {
		return false
	}
	t.m.recoverLocks()
	return true
}

// Unlock releases lock i; it returns an error matching ErrNotLocked when the
// lock is not held, or (with the cohort algorithms) not held by this
// process, and one matching ErrHeldElsewhere when an alock is held by the
// other cohort, which alone may release it.
func (t *LockTable) Unlock(i int) error {
	l, c, err := t.lock(i)
	if err != nil {
		return err
	}
	defer c.Leave()
	if err := l.Unlock(); err != nil {
		return fmt.Errorf("lock %d: %w", i, err)
	}
	return nil
}

// ErrNotLocked: Unlock of a lock that is not held.
var ErrNotLocked = ipc.ErrNotLocked

// ErrHeldElsewhere: Unlock of a lock held where this process may not
// release it (an alock held by the other cohort); it stays held.
var ErrHeldElsewhere = ipc.ErrHeldElsewhere
