package ipc

import (
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// forever is the deadline of a Lock without a timeout.
var forever = time.Unix(1<<62, 0)

// waiter is one goroutine's wait for a lock: spin, yield, then timed futex
// sleeps, as wait.Policy paces them.
type waiter struct {
	policy   wait.Policy
	deadline time.Time
	next     bool         // the waiter's predecessor holds the lock
	stop     *atomic.Bool // if set and true, the wait ends as if expired
}

func newWaiter(d time.Duration) waiter { return waiter{deadline: deadlineAfter(d)} }

// setNext records whether the waiter is next in line (its predecessor
// holds the lock). Only the next waiter spins, from a fresh policy when it
// becomes next; the others skip spinning and sleep at once, leaving the
// cores to the holder.
func (w *waiter) setNext(next bool) {
	switch {
	case next && !w.next:
		w.policy = wait.Policy{}
	case !next:
		w.policy.SkipSpin()
	}
	w.next = next
}

func newWaiterUntil(deadline time.Time) waiter { return waiter{deadline: deadline} }

// deadlineAfter is the deadline of a wait bounded by d; d < 0 means none.
func deadlineAfter(d time.Duration) time.Time {
	if d < 0 {
		return forever
	}
	return time.Now().Add(d)
}

// lockUntil locks m, giving up at deadline: the second stage of a layered
// lock (restriction, cohorting) spends what is left of the caller's wait.
func lockUntil(m Mutex, deadline time.Time) error {
	if deadline == forever {
		m.Lock()
		return nil
	}
	return m.LockTimeout(max(0, time.Until(deadline)))
}

// step is what one call of await did.
type step int

const (
	spun    step = iota // spun or yielded: the caller may re-check cheaply
	slept               // slept or was woken: the caller re-checks the ground truth
	expired             // the deadline passed
)

// await makes one step of waiting for changed to turn true; the party that
// makes it true bumps seq and wakes it (see signal) if sleepers is non-zero.
// After a wake by another party (seq moved) the waiter spins afresh: wakes
// come when the lock is about to be handed over, and spinning then is what
// makes the handover fast. Sleeps are bounded (wait.MaxNap) so that a waiter
// whose waker died between its store and its wake still re-checks.
func (w *waiter) await(seq, sleepers *uint32, changed func() bool) step {
	if w.stop != nil && w.stop.Load() {
		return expired
	}
	if w.policy.Pause() {
		return spun
	}
	nap := w.policy.Nap(w.deadline)
	if nap == 0 {
		return expired
	}
	atomic.AddUint32(sleepers, 1)
	s := atomic.LoadUint32(seq)
	if !changed() {
		wait.Sleep(seq, s, nap)
	}
	atomic.AddUint32(sleepers, ^uint32(0))
	if atomic.LoadUint32(seq) != s {
		w.policy = wait.Policy{}
	}
	return slept
}
