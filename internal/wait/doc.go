// Package wait holds the waiting primitives shared by the lock packages: a
// cross-process futex on 32-bit words in shared memory, a CPU pause hint, and
// the spin-then-yield-then-sleep policy every lock uses.
//
// # Overview
//
// A waiter calls [Policy.Pause] between failed attempts. The first calls spin
// with a pause hint (the holder is probably running on the other core), the
// next ones yield the OS thread, and after that the waiter is expected to
// sleep in the kernel with [Sleep] on a word that the releaser changes.
//
// # Concurrency
//
// The futex calls never use FUTEX_PRIVATE_FLAG: the words live in a file
// mapped MAP_SHARED by several processes, and a private futex would only wake
// waiters of the calling process.
//
// # Caveats
//
// Every goroutine asleep in [Sleep] holds an OS thread for the duration. A
// waker can die between its store and its wake, so callers always sleep with
// a bounded timeout and re-check their condition on every return.
package wait
