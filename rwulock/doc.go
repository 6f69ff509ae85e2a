// Package rwulock is the read/write/update lock of Chronicle Map, bit-exact
// to its spec (section 3.2), over a 64-bit word in memory that several
// processes share.
//
// # Overview
//
// A [Lock] is a handle on one word: bits 0..29 count readers, bit 30 is the
// update flag, bit 31 the write flag, bits 32..63 count waiting writers. The
// map takes the read lock to read a segment, the update lock to prepare a
// change (readers still enter), and upgrades to write only for the moment it
// modifies. Every procedure of the spec is here: try/release of each mode,
// the three downgrades, the upgrade, register/deregister wait, and the
// time-limited acquisitions.
//
// # Modes and fairness
//
// Writers have priority: a writer (or upgrader) that cannot enter at once
// registers a wait, and while any wait is registered new readers and
// updaters are refused. The waiter takes the lock and removes its wait in one
// 64-bit CAS, so no reader slips in between. Among writers there is no
// order: whoever's CAS lands first wins, so one writer can in principle lose
// many times in a row; each gives up at its timeout instead of waiting
// forever.
//
// # Waiting
//
// The spec leaves waiting to the implementation. Here a waiter spins
// briefly with a pause hint, yields a few times, then sleeps on a futex
// (shared between processes) on the half of the word that must change for
// it to proceed. With [AtWithSleepers] a sleeper count beside the word tells
// a releaser whether to wake anyone, so an uncontended release makes no
// system call; every sleep is bounded (10 ms at most) so a waiter whose
// waker died still notices the release. With [At] waiters poll with naps of
// at most 1 ms.
//
// # Concurrency
//
// Every access to the word is a sequentially consistent sync/atomic CAS
// (32-bit on the count or wait half, 64-bit for taking the write lock and
// removing a wait together), which is what makes a release in one process
// happen before the acquisition that sees it in another.
//
// # Repair
//
// Each process may account for its share of a lock in a ledger word of its
// own ([Lock.SetLedger]; a fast ledger on a hot write path, [FastNext]).
// [Lock.FindOrphans] compares the word with the live ledgers and returns
// what the dead held ([Orphans]); [Lock.ReleaseOrphans] removes it, taking
// an exclusive mode in the dead holder's place so that the caller repairs
// the data first.
//
// # Caveats
//
//   - The word holds no owner identity. A process killed while holding or
//     waiting for the lock (a registered wait) leaves it held, or readers
//     locked out, until a repair (see Repair); time-limited acquisition
//     turns that into ErrTimeout, not a hang.
//   - Read-to-update and read-to-write upgrades do not exist: two readers
//     upgrading would deadlock. Take update from the start when you may write.
//   - The lock is not reentrant: a goroutine that holds write and asks for
//     read waits for itself until its timeout.
//   - Each goroutine asleep on the futex holds an OS thread.
package rwulock
