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
	// done is a caller's context's (LockContext): once it is closed the
	// wait ends as if expired, and while it is set no sleep lasts longer
	// than cancelNap. nil: none.
	done <-chan struct{}
}

// cancelNap bounds each sleep of a wait that a context can end, so that
// the waiter sees the context done within about that long: a waiter
// asleep on a futex word in the file cannot be woken by its own process
// without waking everyone asleep on that word, and a word another
// process's waiters share is not this one's to disturb. It costs such a
// waiter up to 1000 wake-ups a second once it sleeps, against 100
// (wait.MaxNap) for a wait bounded by time alone.
const cancelNap = time.Millisecond

// cancelled reports whether the wait's context is done.
func (w *waiter) cancelled() bool {
	if w.done == nil {
		return false
	}
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// stopped reports whether the wait must end now, as if expired: Close
// stops it (stop) or its context is done.
func (w *waiter) stopped() bool {
	return w.stop != nil && w.stop.Load() || w.cancelled()
}

// napUntilDeadline is the policy's next sleep bound (0: the deadline has
// passed), no longer than cancelNap for a wait a context can end.
func (w *waiter) napUntilDeadline() time.Duration {
	nap := w.policy.Nap(w.deadline)
	if w.done != nil && nap > cancelNap {
		nap = cancelNap
	}
	return nap
}

// fresh is a new wait with w's bounds (deadline, stop and context): the
// second stage of a layered lock (restriction, cohorting) spends what is
// left of the caller's wait, from a fresh policy.
func (w *waiter) fresh() waiter { return waiter{deadline: w.deadline, stop: w.stop, done: w.done} }

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

// deadlineAfter is the deadline of a wait bounded by d; d < 0 means none.
func deadlineAfter(d time.Duration) time.Time {
	if d < 0 {
		return forever
	}
	return time.Now().Add(d)
}

// lockUntil locks m within w's bounds: the second stage of a layered lock
// (restriction, cohorting) spends what is left of the caller's wait. A
// lock of this package gets w's context too (waitLocker); another only
// the deadline.
func lockUntil(m Mutex, w *waiter) error {
	if wl, ok := m.(waitLocker); ok {
		return wl.lockWaiting(w.fresh())
	}
	if w.deadline == forever {
		m.Lock()
		return nil
	}
	return m.LockTimeout(max(0, time.Until(w.deadline)))
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
	if w.stopped() {
		return expired
	}
	if w.policy.Pause() {
		return spun
	}
	nap := w.napUntilDeadline()
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
