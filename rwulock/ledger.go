package rwulock

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"
)

// A ledger is a 64-bit word, kept by one process (in memory the other
// processes can read), that accounts for exactly what this process holds of
// one lock: so when a process dies, survivors can tell what in the lock
// word belonged to it. The lock word has no owner identity (the spec), so
// the ledger is the only place that knows.
//
// The rule that makes it exact: around every CAS a handle with a ledger
// makes on the lock word, the ledger is marked unsettled before and, after
// the CAS, unmarked with the CAS's effect on the word added. So whenever
// every live ledger of a lock is settled and none changed while the word was
// read, the word is the sum of the live ledgers plus what dead processes
// left: FindOrphans. Many goroutines of one process share its ledger; it
// is only ever changed by atomic adds.
//
//	bits 0..15   read locks held
//	bit  16      update lock held
//	bit  17      write lock held
//	bits 18..33  waits registered
//	bits 34..41  CASes in flight (unsettled while non-zero)
//	bits 42..63  version: +1 on every change, so a reader that sees the same
//	             value twice knows nothing changed in between
//
// Fields never go below zero, and begin keeps them within their widths, so
// one 64-bit add changes any mix of them exactly. A process's goroutines
// could otherwise overflow one: 256 of them stopped (preempted) between
// begin and settle would read as settled, and recovery would take their
// CASes for a dead process's; 65536 read locks or waits of one process
// would carry into the next field. Every CAS in flight adds at most one
// read lock or one wait, so begin lets another CAS in only while the
// in-flight field has room, and lets a CAS that may add a read lock or a
// wait begin only while that field would still fit one more for every CAS
// in flight: it waits for those to settle, and fails the attempt when the
// field itself is full (ErrReadCountOverflow, ErrWaitCountOverflow), as
// when the lock word's own count is full.
const (
	ledgerRead      uint64 = 1
	ledgerUpdate    uint64 = 1 << 16
	ledgerWrite     uint64 = 1 << 17
	ledgerWait      uint64 = 1 << 18
	ledgerUnsettled uint64 = 1 << 34
	ledgerVersion   uint64 = 1 << 42

	ledgerReadMask      = ledgerUpdate - 1
	ledgerWaitMask      = (ledgerUnsettled - 1) &^ (ledgerWait - 1)
	ledgerUnsettledMask = (ledgerVersion - 1) &^ (ledgerUnsettled - 1)

	ledgerMaxReads    = ledgerReadMask
	ledgerMaxWaits    = ledgerWaitMask / ledgerWait
	ledgerMaxInFlight = ledgerUnsettledMask / ledgerUnsettled
)

// SetLedger makes this handle account for every change it makes to the
// lock word in the ledger word at p (nil: no ledger). Every handle of one
// process on one lock must share one ledger word, zero when the process
// starts using it.
func (l *Lock) SetLedger(p *uint64) { l.ledger = p }

// Ledger returns the handle's ledger word, or nil.
func (l *Lock) Ledger() *uint64 { return l.ledger }

// begin marks a CAS in flight. It must be visible before the CAS: both are
// sequentially consistent atomics. It is beginCAS for a CAS that adds no
// read lock and no wait, which always begins.
func (l *Lock) begin() { l.beginCAS(false, false) }

// beginCAS marks a CAS in flight that may add a read lock (addsRead) or a
// wait (addsWait), and reports true. It reports false, marking nothing,
// when the field the CAS may add to is full: this process holds as many
// read locks of the lock, or waits on it, as the field counts, and only it
// can release them, so the caller fails the attempt (ledgerFull tells it
// why). It waits while there is room only once the CASes in flight have
// settled (each may add one), or while the in-flight field is full: those
// CASes are between two atomics and settle soon.
func (l *Lock) beginCAS(addsRead, addsWait bool) bool {
	if l.ledger == nil {
		return true
	}
	for {
		v := atomic.LoadUint64(l.ledger)
		reads, waits := v&ledgerReadMask, (v&ledgerWaitMask)/ledgerWait
		if addsRead && reads >= ledgerMaxReads || addsWait && waits >= ledgerMaxWaits {
			return false
		}
		inFlight := (v & ledgerUnsettledMask) / ledgerUnsettled
		if inFlight >= ledgerMaxInFlight || addsRead && reads+inFlight >= ledgerMaxReads || addsWait && waits+inFlight >= ledgerMaxWaits {
			runtime.Gosched()
			continue
		}
		if atomic.CompareAndSwapUint64(l.ledger, v, v+ledgerVersion+ledgerUnsettled) {
			return true
		}
	}
}

// ledgerFull reports whether the ledger's read (addsRead) or wait field is
// full: why a CAS that would add to it failed.
func (l *Lock) ledgerFull(addsRead, addsWait bool) bool {
	if l.ledger == nil {
		return false
	}
	v := atomic.LoadUint64(l.ledger)
	return addsRead && v&ledgerReadMask >= ledgerMaxReads || addsWait && (v&ledgerWaitMask)/ledgerWait >= ledgerMaxWaits
}

// settle ends a CAS begun with begin, accounting delta (the change the CAS
// made to what this process holds) if it succeeded, and returns ok.
func (l *Lock) settle(ok bool, delta uint64) bool {
	if l.ledger != nil {
		if !ok {
			delta = 0
		}
		atomic.AddUint64(l.ledger, ledgerVersion-ledgerUnsettled+delta)
	}
	return ok
}

// countDelta is the ledger change for a count word going from old to new.
func countDelta(old, new uint32) uint64 {
	d := uint64(new&ReadCountMask) - uint64(old&ReadCountMask)
	d += (uint64(new&UpdateFlag>>30) - uint64(old&UpdateFlag>>30)) * ledgerUpdate
	d += (uint64(new&WriteFlag>>31) - uint64(old&WriteFlag>>31)) * ledgerWrite
	return d
}

// waitDelta is the ledger change for a wait word going from old to new.
func waitDelta(old, new uint32) uint64 { return (uint64(new) - uint64(old)) * ledgerWait }

// forgetWait takes out of the ledger a wait of this process that the word
// no longer holds (someone reset or damaged it: ErrWaitCountUnderflow).
// Kept, it would stand for a wait nobody registered, and a dead process's
// real wait would then pass for it and never be removed.
func (l *Lock) forgetWait() {
	if l.ledger == nil {
		return
	}
	for {
		v := atomic.LoadUint64(l.ledger)
		if v&ledgerWaitMask == 0 || atomic.CompareAndSwapUint64(l.ledger, v, v+ledgerVersion-ledgerWait) {
			return
		}
	}
}

// The three CASes of the lock word, with the ledger kept.

func (l *Lock) casCountNoted(old, new uint32) bool {
	if !l.beginCAS(new&ReadCountMask > old&ReadCountMask, false) {
		return false
	}
	return l.settle(l.casCount(old, new), countDelta(old, new))
}

// casCountDelta is casCountNoted for a caller that knows the ledger change,
// countDelta(old, new), as a constant adding no read lock: the write lock's
// taking and release, on every Put's path, where countDelta cost 23
// instructions a call.
func (l *Lock) casCountDelta(old, new uint32, delta uint64) bool {
	l.begin()
	return l.settle(l.casCount(old, new), delta)
}

func (l *Lock) casWaitNoted(old, new uint32) bool {
	if !l.beginCAS(false, new > old) {
		return false
	}
	return l.settle(atomic.CompareAndSwapUint32(l.wait, old, new), waitDelta(old, new))
}

func (l *Lock) casWordNoted(old, new uint64) bool {
	if !l.beginCAS(countWord(new)&ReadCountMask > countWord(old)&ReadCountMask, waitWord(new) > waitWord(old)) {
		return false
	}
	return l.settle(l.casWord(old, new), countDelta(countWord(old), countWord(new))+waitDelta(waitWord(old), waitWord(new)))
}

// LedgerHolds decodes a ledger word: the lock state it accounts for (as a
// lock word: reads, flags, waits) and whether it is settled (no CAS of its
// process is in flight).
func LedgerHolds(v uint64) (held uint64, settled bool) {
	count := uint32(v&ledgerReadMask) | uint32(v&ledgerUpdate>>16)<<30 | uint32(v&ledgerWrite>>17)<<31
	waits := uint32((v & ledgerWaitMask) / ledgerWait)
	return makeState(count, waits), v&ledgerUnsettledMask == 0
}

// Orphans is what a lock word holds that no live process accounts for: the
// share of processes that died holding the lock or waiting for it.
type Orphans struct {
	Reads  uint32 // read locks
	Update bool   // the update lock
	Write  bool   // the write lock
	Waits  uint32 // registered waits
}

// None reports that nothing is orphaned.
func (o Orphans) None() bool { return o == Orphans{} }

// Exclusive reports that a dead process held the update or write lock, so
// the data under the lock may be half changed.
func (o Orphans) Exclusive() bool { return o.Update || o.Write }

// Errors of lock repair.
var (
	// ErrUnsettled: a live process kept a change to the lock in flight for
	// the whole time allowed, so its share could not be told apart. Nothing
	// was changed; try again later.
	ErrUnsettled = errors.New("rwulock: a live holder stayed mid-change; lock not repaired")
	// ErrUnexplained: the live ledgers account for more than the lock word
	// holds. Some process changed the word without its ledger (an old
	// binary, or a handle without SetLedger), so no repair is safe.
	ErrUnexplained = errors.New("rwulock: live ledgers disagree with the lock word; lock not repaired")
	// ErrChanged: the word moved between FindOrphans and ReleaseOrphans.
	// Nothing was changed; find the orphans again.
	ErrChanged = errors.New("rwulock: lock word changed during repair")
)

// FindOrphans works out what in the lock word no live ledger accounts for.
// live appends the ledgers of every live process for this lock to dst and
// returns it. It waits, up to deadline, for those ledgers to be settled, and
// returns the word (exact for it) to pass to ReleaseOrphans.
func (l *Lock) FindOrphans(live func(dst []uint64) []uint64, deadline time.Time) (uint64, Orphans, error) {
	// The caller knows which processes live; a process that dies during
	// the call only makes the result leave its share in place, never take
	// a live one. It waits, up to deadline, for those ledgers
	// to be settled; the word is read between two identical snapshots of
	// them, which makes the answer exact for that word. The returned word
	// is the one to pass to ReleaseOrphans.
	var before, after [16]uint64
	for spins := 0; ; spins++ {
		a := live(before[:0])
		settled := true
		var sum uint64
		for _, v := range a {
			held, ok := LedgerHolds(v)
			settled = settled && ok
			sum += held // never carries: each field is far below its width
		}
		if settled {
			w := l.load()
			b := live(after[:0])
			if equalWords(a, b) {
				return orphansOf(w, sum)
			}
		}
		if !time.Now().Before(deadline) {
			return 0, Orphans{}, ErrUnsettled
		}
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func equalWords(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// orphansOf subtracts what the live processes hold from the word.
func orphansOf(w, live uint64) (uint64, Orphans, error) {
	wc, lc := countWord(w), countWord(live)
	if wc&ReadCountMask < lc&ReadCountMask || lc&UpdateFlag > wc&UpdateFlag ||
		lc&WriteFlag > wc&WriteFlag || waitWord(live) > waitWord(w) {
		return w, Orphans{}, ErrUnexplained
	}
	return w, Orphans{
		Reads:  wc&ReadCountMask - lc&ReadCountMask,
		Update: wc&UpdateFlag != 0 && lc&UpdateFlag == 0,
		Write:  wc&WriteFlag != 0 && lc&WriteFlag == 0,
		Waits:  waitWord(w) - waitWord(live),
	}, nil
}

// AbandonWrite leaves the write lock this handle holds to recovery, for a
// holder that stopped in the middle of a change it cannot finish (a panic on
// a page fault): the next FindOrphans takes it for a dead holder's.
func (l *Lock) AbandonWrite() {
	// The word keeps the flag, and this process's ledger no longer
	// accounts for it, so the next FindOrphans takes it for a dead
	// holder's and recovery repairs the data under it, as after a death
	// there.
	if l.ledger != nil {
		atomic.AddUint64(l.ledger, ledgerVersion-ledgerWrite)
	}
}

// AbandonUpdate gives back to the dead the update lock ReleaseOrphans took
// over for them, for a caller that cannot repair the data now: the word
// keeps the flag and the next FindOrphans finds it again. Only for a handle
// holding that update lock and no other of its process's update locks.
func (l *Lock) AbandonUpdate() {
	// Unlocking instead would free the lock with the data unrepaired, and
	// no later pass would know. Only for a handle holding the update lock
	// it took over, and no other of its process's update locks.
	if l.ledger != nil {
		atomic.AddUint64(l.ledger, ledgerVersion-ledgerUpdate)
	}
}

// ReleaseOrphans removes the orphans FindOrphans found in word, with one CAS
// against that exact word (ErrChanged if it moved: find them again). If the
// orphans held the update or write lock, the data may be half changed, so
// this handle takes that lock in their place instead (takenOver; its ledger
// says so): the write lock if they held it, else the update lock, which the
// caller upgrades before repairing the data and releasing as usual.
func (l *Lock) ReleaseOrphans(word uint64, o Orphans) (takenOver bool, err error) {
	// Whatever live processes did between FindOrphans and the CAS nets
	// out, so a CAS that succeeds is right. If the orphans held the update or write
	// lock, the data under the lock may be half changed, so instead of
	// freeing the lock this handle takes it in their place (takenOver is
	// true, and its ledger says so): the write lock if they held it, and
	// then no reader can be inside or come in before the caller has
	// repaired the data and released as usual (the update lock would let
	// readers in at once, onto data half changed); else the update lock,
	// which the caller upgrades first.
	if o.None() {
		return false, nil
	}
	c := countWord(word) - o.Reads
	var took uint64
	switch {
	case o.Write:
		// The write flag stays, now this handle's. A write lock admits
		// no other holder, so nothing else of the word is a live lock.
		c &^= UpdateFlag
		took = ledgerWrite
	case o.Update:
		took = ledgerUpdate // the update flag stays, now this handle's
	}
	next := makeState(c, waitWord(word)-o.Waits)
	l.begin()
	if !l.settle(l.casWord(word, next), took) {
		return false, ErrChanged
	}
	l.wake()
	return o.Exclusive(), nil
}
