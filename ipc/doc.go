// Package ipc holds value-based exclusive locks that work across OS
// processes: every word they use lives in an Arena, a run of 64-bit words
// the caller maps from a shared file, and nothing in it is an address, so
// processes that map the file at different places share the locks.
//
// To use them, size an arena with a Config (Config.Words), lay it out once
// with Format in words the processes share, Attach it in every process, and
// take a lock by algorithm and index with Arena.Mutex; LockContext bounds a
// wait by a context. Arena.SetJournals, Arena.Recover and Arena.Reset
// recover the locks of processes that die (see the last paragraph).
//
// The algorithms (see Algorithms) are Tidex, the Hapax locks of Dice and
// Kogan with invisible ("hapax") and visible ("hapax-vw") waiters, Hapax
// under concurrency restriction ("hapax-cr", the default: strict FIFO
// collapses when waiters outnumber cores, because every handover then waits
// for a sleeping waiter to be scheduled; restriction keeps the circulating
// set as large as the core count and rotates the others in), cohort locks
// ("cohort", "cohort-cr": a process's goroutines queue on a local mutex and
// pass the shared lock among themselves up to a limit), Ticket AWN of
// Ramalhete and Correia ("ticket-awn": a ticket lock whose waiters far back
// in the queue each wait on a node of their own), ALock of Nelson-Slivon,
// Tseng and Palmieri ("alock": the lock's home process and every other
// process queue as two cohorts, with loads and stores only between them),
// and a test-and-test-and-set word with futex parking ("ttas", the
// Chronicle Map style baseline). All but three are thread-oblivious: the
// context an unlock needs is kept in the lock body, so any goroutine of any
// process may release a lock another acquired. The cohort locks keep their
// local half in each process, so only a goroutine of the holding process
// may release one (elsewhere Unlock says ErrNotLocked); alock only one of
// the holder's cohort, the home process or the others (ErrHeldElsewhere).
//
// Waiting is polite on machines with fewer cores than waiters: a short spin
// with a pause hint, a few OS yields, then a timed futex sleep on a 32-bit
// sequence word beside the watched value. A waiter re-checks the ground
// truth (Depart, the generation) on every wake, because a waker may die
// between its store and its wake, and signals interrupt sleeps. A wait
// bounded by a context (LockContext) also looks at the context at every
// wake, and sleeps at most a millisecond at a time; it gives up as a
// LockTimeout that ran out does, leaving its turn to be passed on.
//
// Fairness is counted in critical sections, from a point inside Lock: a
// waiter the OS does not run is passed until the others' turns run out,
// so no algorithm bounds a wait in time, and none orders a caller before
// it reaches its place. The FIFO locks order waiters from their arrival,
// one atomic step into Lock. hapax-cr: a waiter queued outside is passed by
// at most 513 (crStreak + 1) critical sections per other goroutine using
// the lock, given a handle per goroutine; the head of that queue takes a
// seat at its first look after 250 µs at the head, when the OS runs it.
// cohort: a process's representative, from its arrival at the global lock,
// waits for at most (P-1) x 10 critical sections of the P-1 other
// processes; a caller may wait through several tenures of its own process,
// and between two of them, while its process has nobody queued there,
// other processes run without bound. cohort-cr and ttas bound nothing.
//
// Processes that die holding or queued in a lock are recovered from
// journals of lock episodes kept in the file (Arena.SetJournals,
// Arena.Recover): a survivor takes the dead process's turns and releases
// on its behalf, for every algorithm.
package ipc
