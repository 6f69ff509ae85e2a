package rwulock

// The fast ledger exists because the ledger's protocol takes four locked
// instructions around a write lock's taking and release (begin and settle
// at each CAS of the word); the fast ledger takes one. Only the goroutine
// that moved it from FastEmpty to FastAcquiring by CAS writes it; every
// other change is a plain store of its owner (offheap.StoreExclusive). Each
// store is seen before the lock word's next CAS and after its last (x86
// orders stores with locked instructions; elsewhere StoreExclusive is
// atomic), so the fast ledger is unsettled whenever the word may hold a
// write lock it does not account for.

// A fast ledger is a second ledger word of one process for one lock, for a
// write lock taken and released on a hot path, with one CAS on it and two
// on the lock word:
//
//	FastEmpty -CAS-> FastAcquiring, CAS the word (write), -> FastHeld
//	(or -> FastEmpty if the word's CAS failed); FastHeld -> FastReleasing,
//	CAS the word (free), -> FastEmpty
//
// FindOrphans (through FastAsLedger) waits for an unsettled fast ledger
// (FastAcquiring, FastReleasing) as for any unsettled ledger. FastClosed:
// the process closed its map; nothing begins there any more.
//
//	bits 0..2   state
//	bits 3..63  version: +1 on every change, as in the ledger
const (
	FastEmpty     uint64 = 0
	FastAcquiring uint64 = 1
	FastHeld      uint64 = 2
	FastReleasing uint64 = 3
	FastClosed    uint64 = 4
	FastStateMask uint64 = 7

	fastVersion uint64 = 8
)

// FastSeed is the FastEmpty value a fast ledger starts at for the
// generation-th owner of a process slot, so that a late CAS of an earlier
// owner's goroutine never matches the new owner's word. Owners' values
// differ while each makes fewer than 2^37 changes.
func FastSeed(generation uint64) uint64 {
	// A goroutine of the slot's last owner may still CAS from a FastEmpty
	// value it loaded before its Map closed (takeFast loads, checks
	// closing, then CASes): were versions to start at 0 with every owner,
	// as Join leaves them, that CAS would take the new owner's word
	// whenever both had made as many changes, leaving it unsettled, for
	// good if the old process exits first.
	return generation << 40
}

// FastNext is fast ledger word v moved to state, with its version one more.
func FastNext(v, state uint64) uint64 { return v&^FastStateMask + fastVersion | state }

// FastAsLedger is fast ledger word v in the form of a ledger word, for the
// live function of FindOrphans: a write lock held and settled, unsettled,
// or nothing, with v's version, so that two reads agree only if v did not
// change in between. A state no protocol step writes (damage) reads as
// unsettled: recovery then waits rather than take a lock its process may
// hold.
func FastAsLedger(v uint64) uint64 {
	version := (v >> 3) * ledgerVersion // its low 22 bits, as the ledger keeps
	switch v & FastStateMask {
	case FastEmpty, FastClosed:
		return version
	case FastHeld:
		return version | ledgerWrite
	}
	return version | ledgerUnsettled
}

// TryWriteLockUnnoted takes the write lock as TryWriteLockFair does, but
// leaves the handle's ledger as it is: for a caller that accounts for the
// hold in a fast ledger (see FastNext) around this call.
func (l *Lock) TryWriteLockUnnoted() bool { return l.casWord(0, uint64(writeLocked)) }

// WriteUnlockUnnoted releases a write lock taken with TryWriteLockUnnoted,
// leaving the ledger as it is. ErrNotHeld unless the count word is exactly
// the write flag.
func (l *Lock) WriteUnlockUnnoted() error {
	if !l.casCount(writeLocked, 0) {
		return ErrNotHeld
	}
	l.wake()
	return nil
}
