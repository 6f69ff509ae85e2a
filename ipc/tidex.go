package ipc

import (
	"sync/atomic"
	"time"
)

// tidex is the Tidex lock (Ramalhete and Correia), the baseline Hapax
// improves on: Arrive and Depart hold identities, an arrival swaps its own
// into Arrive and waits for its predecessor's to appear in Depart. Every
// waiter watches Depart, so each handover disturbs all of them. An identity
// is reused after its episode, so an arrival that finds its own identity
// left in Depart uses the negated one.
type tidex struct{ body }

func openTidex(a *Arena, index int) Mutex { return &tidex{newBody(a, index)} }

func (l *tidex) Lock() { _ = l.LockTimeout(-1) }

func (l *tidex) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *tidex) lockWaiting(w waiter) error {
	if took, err := l.a.lockByTurn(l.index, &w); took {
		return err
	}
	if !l.a.reserveFor(1, &w) {
		return ErrTimeout
	}
	e := l.a.claim()
	for {
		id := l.a.tidexIDs.get()
		my := id
		if atomic.LoadUint64(l.depart) == id {
			my = -id
		}
		gen := atomic.LoadUint64(l.gen)
		e.set(jArriving, kindTidex, l.index, my, 0, gen)
		pred := atomic.SwapUint64(l.arrive, my)
		if l.arrived != nil {
			l.arrived()
		}
		e.queued(pred)
		switch l.waitDepart(pred, gen, &w) {
		case granted:
			atomic.StoreUint64(l.holder, my)
			return nil
		case timedOut:
			l.leaveTurn(pred, gen, my, e)
			return ErrTimeout
		}
		// A Reset voided the queue. The identity is retired, not pooled:
		// waiters of the old queue that have not seen the Reset yet may be
		// waiting for it to appear in Depart (its successor is), and a new
		// episode releasing it would let such a waiter in beside the new
		// queue's next holder. Identities are counted out of 2^64, so a
		// few lost to each Reset cost nothing.
	}
}

// leaveTurn gives up a wait for the turn after pred, queued as my under
// journal entry e: a substitute takes the turn and releases it at once, or
// hands it to a later waiter of this process (substituteTurn).
func (l *tidex) leaveTurn(pred, gen, my uint64, e entry) {
	l.a.substituteTurn(l.index, gen, func(w *waiter, t *pendingTurn) {
		switch l.waitDepart(pred, gen, w) {
		case granted:
			if l.a.handOver(t, func() { atomic.StoreUint64(l.holder, my) }) {
				return
			}
			e.phase(jReleasing)
			l.release(my)
			l.a.free(e)
		case reset:
			l.a.free(e)
		}
	})
}

// TryLock is Ramalhete's: claim Arrive by CAS when it equals Depart.
// Identities recur, so the CAS can succeed on a value that left and came
// back (ABA) while the lock is held; the episode is then queued behind that
// value like any arrival, so exclusion holds. A TryLock does not wait for
// that turn: it leaves it to a substitute, as a timed-out LockTimeout does,
// and fails. Hapax values never recur, which is what makes Hapax's TryLock
// succeed whenever its CAS does.
func (l *tidex) TryLock() bool {
	e0 := atomic.LoadUint64(l.depart)
	if atomic.LoadUint64(l.arrive) != e0 || !l.a.reserve(1, time.Time{}) {
		return false
	}
	e := l.a.claim()
	id := l.a.tidexIDs.get()
	my := id
	// Compare with Depart now, not with e0: the identity may have been
	// released into Depart since e0 was read, and then my == Depart would
	// make a held lock look free.
	if atomic.LoadUint64(l.depart) == id {
		my = -id
	}
	gen := atomic.LoadUint64(l.gen)
	e.set(jArriving, kindTidex, l.index, my, 0, gen)
	if !atomic.CompareAndSwapUint64(l.arrive, e0, my) {
		l.a.free(e)
		l.a.tidexIDs.put(id)
		return false
	}
	e.queued(e0)
	if atomic.LoadUint64(l.depart) != e0 {
		// e0 left Arrive and came back while this TryLock looked: the
		// lock is held, and this episode is queued behind e0's return.
		// (No reset check: a Reset since gen voids the turn, which the
		// substitute then sees.)
		l.leaveTurn(e0, gen, my, e)
		return false
	}
	atomic.StoreUint64(l.holder, my)
	return true
}

func (l *tidex) Unlock() error {
	my := atomic.SwapUint64(l.holder, 0)
	if my == 0 || atomic.LoadUint64(l.arrive) == atomic.LoadUint64(l.depart) {
		if my != 0 {
			atomic.StoreUint64(l.holder, my)
		}
		return ErrNotLocked
	}
	e, own := l.a.findEpisode(l.index, kindTidex, my)
	e.phase(jReleasing)
	l.release(my)
	l.a.endEpisode(e, own)
	return nil
}

func (l *tidex) release(my uint64) {
	atomic.StoreUint64(l.depart, my)
	if testHookBetweenStores != nil {
		testHookBetweenStores()
	}
	signal(l.dseq, l.dsleepers)
	id := my
	if int64(id) < 0 {
		id = -id
	}
	l.a.tidexIDs.put(id)
}
