package rwulock

import "errors"

// Errors returned by lock operations. Match them with errors.Is.
var (
	// ErrTimeout: a time-limited acquisition did not succeed within its
	// limit. The lock is unchanged (a wait the call registered is removed).
	ErrTimeout = errors.New("rwulock: timed out acquiring the lock")

	// ErrNotHeld: a release, downgrade or upgrade found the lock not held
	// in the mode the caller claimed. The lock is unchanged. It points to a
	// bug in the caller, or to a lock word repaired under it.
	ErrNotHeld = errors.New("rwulock: lock not held in that mode")

	// ErrReadCountOverflow: 2^30 - 1 readers already hold the lock, or
	// this process's ledger counts as many of them as it can (65535).
	ErrReadCountOverflow = errors.New("rwulock: read lock count overflow")

	// ErrWaitCountOverflow: 2^31 - 1 waits are already registered, or
	// this process's ledger counts as many of them as it can (65535).
	ErrWaitCountOverflow = errors.New("rwulock: wait count overflow")

	// ErrWaitCountUnderflow: a wait was deregistered, or a waiting writer
	// tried to consume its wait, while the wait count was 0. Someone removed
	// a wait they had not registered.
	ErrWaitCountUnderflow = errors.New("rwulock: wait count underflow")
)
