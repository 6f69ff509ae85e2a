package rwulock

import (
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// Lock is a read/write/update lock whose whole state is one 64-bit word in
// memory shared between processes: many readers; one update holder
// alongside readers (it may later upgrade to write); or one writer, alone.
// A registered wait makes new read and update acquisitions fail, so readers
// cannot starve a writer.
//
// Happens-before: a release (or downgrade) of the lock by any goroutine of
// any process happens before every later acquisition that observes it.
//
// The word carries no owner identity: any goroutine, in any process, may
// release a mode that is held; callers release only what they acquired, and
// errors report only what the word shows. A Lock value is only a handle:
// copying it is fine, and it allocates nothing per operation.
type Lock struct {
	word  *uint64 // the whole lock state
	count *uint32 // bits 0..31 of word: readers, update, write
	wait  *uint32 // bits 32..63 of word: wait count

	// sleepers counts goroutines asleep (or about to sleep) on the count or
	// wait half, in every process. A release calls futex wake only when it
	// is non-zero, so an uncontended release makes no system call. Nil
	// means the lock has no sleeper word: waiters nap for short bounded
	// times and releases never wake anyone.
	sleepers *uint32

	// ledger, if set, accounts for what this process holds (ledger.go).
	ledger *uint64
}

// napCapNoSleepers bounds one nap of a waiter on a lock without a sleeper
// word: with no wake-up coming, the nap length is the hand-over latency.
const napCapNoSleepers = time.Millisecond

// At returns the lock whose whole state is the word at p. p must be 8-byte
// aligned and must only ever be accessed through this package. Without a
// sleeper word waiters poll with short naps (at most 1 ms) instead of being
// woken; use AtWithSleepers where a word for it can be placed beside the
// lock.
func At(p *uint64) *Lock {
	lo, hi := wait.Halves(p)
	return &Lock{word: p, count: lo, wait: hi}
}

// AtWithSleepers returns the lock at p whose waiters sleep in the kernel and
// are woken by releases. sleepers is a 32-bit word in the same shared memory
// (zero when created) that every process must pass for this lock; it is not
// part of the lock state and holds no lock.
func AtWithSleepers(p *uint64, sleepers *uint32) *Lock {
	l := At(p)
	l.sleepers = sleepers
	return l
}

// Word returns the address of the lock word.
func (l *Lock) Word() *uint64 { return l.word }

// State decodes the current lock word.
func (l *Lock) State() State { return Decode(atomic.LoadUint64(l.word)) }

// load reads the whole lock state (spec: "read the lock state").
func (l *Lock) load() uint64 { return atomic.LoadUint64(l.word) }

// casCount is the spec's CAS on the count word.
func (l *Lock) casCount(old, new uint32) bool { return atomic.CompareAndSwapUint32(l.count, old, new) }

// wake wakes every sleeper on both halves if any sleeper is registered. It
// is called after every change that can let a waiter proceed. Both halves,
// because a waiter blocked only by the wait count sleeps on the wait half.
func (l *Lock) wake() {
	if l.sleepers == nil || atomic.LoadUint32(l.sleepers) == 0 {
		return
	}
	wait.WakeAll(l.count)
	wait.WakeAll(l.wait)
}

// TryReadLock acquires the read lock if no writer holds it, no writer or
// upgrader waits, and the read count is below its maximum. It never waits
// for another holder (with a ledger it may yield briefly to its own
// process's CASes in flight).
func (l *Lock) TryReadLock() bool {
	// In detail, with a ledger (SetLedger) it may yield while 255 of its
	// process's CASes on the lock are in flight, or while its process's
	// read locks of it plus those CASes reach 65535, each of which a few
	// instructions of those CASes' goroutines end.
	s := l.load()
	c := countWord(s)
	if c&WriteFlag != 0 || waitWord(s) != 0 || c&ReadCountMask == MaxReadCount {
		return false
	}
	return l.casCountNoted(c, c+1)
}

// ReadUnlock releases one read lock. ErrNotHeld if no reader holds it.
func (l *Lock) ReadUnlock() error {
	for {
		c := countWord(l.load())
		if c&ReadCountMask == 0 {
			return ErrNotHeld
		}
		if l.casCountNoted(c, c-1) {
			if c&ReadCountMask == 1 {
				l.wake() // the last reader leaves: a writer or upgrader may proceed
			}
			return nil
		}
	}
}

// TryUpdateLock acquires the update lock if neither update nor write is held
// and nobody waits. Readers may hold the lock meanwhile.
func (l *Lock) TryUpdateLock() bool {
	s := l.load()
	c := countWord(s)
	if c&(UpdateFlag|WriteFlag) != 0 || waitWord(s) != 0 {
		return false
	}
	return l.casCountNoted(c, c|UpdateFlag)
}

// UpdateUnlock releases the update lock. ErrNotHeld if the flag is not set.
func (l *Lock) UpdateUnlock() error {
	for {
		c := countWord(l.load())
		if c&UpdateFlag == 0 {
			return ErrNotHeld
		}
		if l.casCountNoted(c, c&^UpdateFlag) {
			l.wake()
			return nil
		}
	}
}

// TryWriteLock acquires the write lock if the count word is 0 (no readers,
// update or write), ignoring waits: a waiting writer that loses simply waits
// on.
func (l *Lock) TryWriteLock() bool { return l.casCountDelta(0, writeLocked, ledgerWrite) }

// TryWriteLockFair acquires the write lock if nobody holds or waits for any
// part of the lock: unlike TryWriteLock it never goes ahead of a registered
// waiter. It never waits for another holder (with a ledger, see
// TryReadLock).
func (l *Lock) TryWriteLockFair() bool {
	// One CAS with no pre-read, as the spec advises when success is
	// likely.
	// One CAS of the whole word from 0, so a wait registered at any moment
	// before it makes it fail. It never waits for another holder (with a
	// ledger, see TryReadLock).
	l.begin()
	return l.settle(l.casWord(0, uint64(writeLocked)), ledgerWrite)
}

// WriteUnlock releases the write lock. ErrNotHeld unless the count word is
// exactly the write flag.
func (l *Lock) WriteUnlock() error {
	if !l.casCountDelta(writeLocked, 0, ^(ledgerWrite - 1)) { // minus ledgerWrite, modulo 2^64
		return ErrNotHeld
	}
	l.wake()
	return nil
}

// DowngradeWriteToUpdate turns the held write lock into the update lock, so
// readers may enter while the holder keeps others from modifying.
func (l *Lock) DowngradeWriteToUpdate() error { return l.fromWrite(updateLocked) }

// DowngradeWriteToRead turns the held write lock into one read lock.
func (l *Lock) DowngradeWriteToRead() error { return l.fromWrite(1) }

// fromWrite is the spec's single CAS from the write-locked count word.
func (l *Lock) fromWrite(to uint32) error {
	if !l.casCountNoted(writeLocked, to) {
		return ErrNotHeld
	}
	l.wake()
	return nil
}

// DowngradeUpdateToRead turns the held update lock into one read lock.
func (l *Lock) DowngradeUpdateToRead() error {
	for {
		c := countWord(l.load())
		if c&UpdateFlag == 0 || c&WriteFlag != 0 {
			return ErrNotHeld
		}
		if c&ReadCountMask == MaxReadCount {
			return ErrReadCountOverflow
		}
		if l.casCountNoted(c, (c&^UpdateFlag)+1) {
			l.wake() // another updater may now enter
			return nil
		}
		if l.ledgerFull(true, false) {
			return ErrReadCountOverflow // this process's share of the count
		}
	}
}

// TryUpgradeUpdateToWrite turns the held update lock into the write lock if
// no reader holds the lock.
func (l *Lock) TryUpgradeUpdateToWrite() bool { return l.casCountNoted(updateLocked, writeLocked) }

// RegisterWait adds one to the wait count, which makes new read and update
// acquisitions fail until it is removed. The time-limited write and upgrade
// procedures use it; call it directly only to build such a procedure.
func (l *Lock) RegisterWait() error {
	for {
		w := atomic.LoadUint32(l.wait)
		if w >= MaxWaitCount {
			return ErrWaitCountOverflow
		}
		if l.casWaitNoted(w, w+1) {
			return nil
		}
		if l.ledgerFull(false, true) {
			return ErrWaitCountOverflow // this process's share of the count
		}
	}
}

// DeregisterWait removes one wait registered with RegisterWait.
func (l *Lock) DeregisterWait() error {
	for {
		w := atomic.LoadUint32(l.wait)
		if w == 0 {
			l.forgetWait()
			return ErrWaitCountUnderflow
		}
		if l.casWaitNoted(w, w-1) {
			if w == 1 {
				l.wake() // readers and updaters held back by the wait may enter
			}
			return nil
		}
	}
}

// casWord is the spec's CAS on the whole lock structure.
func (l *Lock) casWord(old, new uint64) bool { return atomic.CompareAndSwapUint64(l.word, old, new) }

func atomicAdd(p *uint32, d uint32) { atomic.AddUint32(p, d) }
