package ipc

import (
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// body holds pointers to one lock's words in the arena.
type body struct {
	a      *Arena
	index  int
	arrive *uint64
	depart *uint64
	holder *uint64 // the owner's episode value, written after acquiring
	waited *uint64 // 1 if the owner had to wait: predicts contention at unlock
	gen    *uint64
	// Waiters that watch Depart itself (Tidex, and Hapax-VW after a slot
	// collision) sleep on dseq; writers of Depart bump it when dsleepers > 0.
	dseq, dsleepers *uint32
	// arrived, a test hook, runs in Lock right after the doorway: the
	// atomic on Arrive that places the caller in the queue (Hapax's and
	// Tidex's swap, Ticket AWN's ticket). The bypass test marks a waiter's
	// place in the order of critical sections there; nil outside tests,
	// it costs Lock one predictable branch.
	arrived func()
}

func newBody(a *Arena, index int) body {
	w := a.lockBody(index)
	dseq, dsleepers := wait.Halves(&w[lDepartQ])
	return body{a: a, index: index, arrive: &w[lArrive], depart: &w[lDepart], holder: &w[lHolder],
		waited: &w[lWaited], gen: &w[lGen], dseq: dseq, dsleepers: dsleepers}
}

// pace decides how a waiter waits: spinning only pays for the one waiter
// whose predecessor holds the lock. On machines with fewer cores than
// waiters, everyone further back spinning takes the CPU the holder and the
// next waiter need, and a FIFO lock then hands over to waiters that are not
// running. So the others sleep at once, until a wake tells them to look again.
//
// holder is 0 for a moment at both ends of an episode: the predecessor
// clears it as it starts to unlock, and a waiter it hands over to records
// itself only after it sees the handover. A waiter that finds 0 watches
// for a few microseconds whether its predecessor shows up in holder or in
// Depart before it concludes it is not next: sleeping at such a moment
// makes the handover it is about to get wait for a futex wake-up, which
// costs far more than those microseconds of watching when processes
// outnumber cores.
func (b *body) pace(w *waiter, pred uint64) {
	h := atomic.LoadUint64(b.holder)
	for look := 0; h == 0 && look < paceLooks; look++ {
		if atomic.LoadUint64(b.depart) == pred {
			h = pred // released to us: the caller will see it
			break
		}
		wait.Spin(paceSpin)
		h = atomic.LoadUint64(b.holder)
	}
	w.setNext(h == pred)
}

// How long pace watches a holder word that reads 0: paceLooks x paceSpin
// pause instructions, a few microseconds.
const (
	paceLooks = 32
	paceSpin  = 30
)

// promoted reports whether a waiter that was not next has become next.
func (b *body) promoted(w *waiter, pred uint64) bool {
	return !w.next && atomic.LoadUint64(b.holder) == pred
}

// outcome of one wait for the lock.
type outcome int

const (
	granted outcome = iota
	timedOut
	reset // the lock was reset under us: queue again
)

// hapax is a Hapax lock (Dice and Kogan, PPoPP 2026). Each episode swaps a
// fresh hapax h into Arrive and gets its predecessor's value pred; the lock
// is free iff Arrive == Depart. The waiter watches the waiting slot
// ToSlot(pred): the predecessor's unlock writes its value there (invisible
// waiters) or clears the waiter's registration from it (visible waiters).
type hapax struct {
	body
	visible bool
}

// testHookBetweenStores, if set, runs in a release right after its Depart
// store (between the two stores of Hapax's release; before the only store
// of TTAS's): kill tests make a process die there.
var testHookBetweenStores func()

func openHapax(visible bool) func(*Arena, int) Mutex {
	return func(a *Arena, index int) Mutex { return &hapax{body: newBody(a, index), visible: visible} }
}

func (l *hapax) Lock() { _ = l.LockTimeout(-1) }

func (l *hapax) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *hapax) lockWaiting(w waiter) error {
	if !l.a.reserveFor(1, &w) {
		return ErrTimeout
	}
	return l.lockReserved(w)
}

func (l *hapax) kind() uint8 {
	if l.visible {
		return kindHapaxVW
	}
	return kindHapax
}

// lockReserved is LockTimeout once a journal entry has been reserved for
// the episode (restriction reserves its own and this one together).
func (l *hapax) lockReserved(w waiter) error {
	if took, err := l.a.lockByTurn(l.index, &w); took {
		l.a.unreserve(1) // the turn has its own entry
		return err
	}
	e := l.a.claim()
	for {
		h := l.a.nextHapax()
		gen := atomic.LoadUint64(l.gen)
		e.set(jArriving, l.kind(), l.index, h, 0, gen)
		pred := atomic.SwapUint64(l.arrive, h)
		if l.arrived != nil {
			l.arrived()
		}
		e.queued(pred)
		if atomic.LoadUint64(l.depart) == pred {
			l.acquired(h, false)
			return nil
		}
		vw := vwWait{e: e}
		switch l.wait(pred, gen, &w, &vw) {
		case granted:
			l.acquired(h, true)
			return nil
		case timedOut:
			l.a.substituteTurn(l.index, gen, func(w *waiter, t *pendingTurn) { l.takeTurnAndRelease(w, h, pred, gen, vw, e, t) })
			return ErrTimeout
		}
	}
}

// takeTurnAndRelease finishes an episode whose waiter gave up: the queue
// cannot skip it, so it waits its turn and hands the lock on, or over to a
// later waiter of this process that took the turn over (turns.go). Stopped
// by Close, it leaves the episode in the journal for recovery.
func (l *hapax) takeTurnAndRelease(w *waiter, h, pred, gen uint64, vw vwWait, e entry, t *pendingTurn) {
	switch l.wait(pred, gen, w, &vw) {
	case granted:
		if l.a.handOver(t, func() { l.acquired(h, true) }) {
			return
		}
		atomic.StoreUint64(l.waited, 1)
		e.phase(jReleasing)
		l.release(h)
		l.a.free(e)
	case reset:
		l.a.free(e)
	}
}

func (l *hapax) wait(pred, gen uint64, w *waiter, vw *vwWait) outcome {
	if l.visible {
		return l.waitVisible(pred, gen, w, vw)
	}
	return l.waitInvisible(pred, gen, w)
}

// acquired records the episode for Unlock. It does not wake the successor
// early: a futex wake issued while holding the lock gets the holder
// preempted by the woken waiter, which then only waits for the holder it
// displaced, so throughput falls several times over when processes
// outnumber cores.
func (l *hapax) acquired(h uint64, waited bool) {
	atomic.StoreUint64(l.holder, h)
	if waited {
		atomic.StoreUint64(l.waited, 1)
	} else {
		atomic.StoreUint64(l.waited, 0)
	}
}

// waitInvisible is HapaxIW's wait. It samples the slot before re-checking
// Depart, so any later write to the slot shows as a change; values never
// recur, so a change is never missed. A slot equal to pred is a direct
// handover; any other change (a collision) sends it back to Depart.
func (l *hapax) waitInvisible(pred, gen uint64, w *waiter) outcome {
	s := l.a.toSlot(l.index, pred)
	for {
		v := atomic.LoadUint64(s.value)
		if v == pred || atomic.LoadUint64(l.depart) == pred {
			return granted
		}
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		l.pace(w, pred)
	watch:
		for atomic.LoadUint64(s.value) == v {
			switch w.await(s.seq, s.sleepers, func() bool { return atomic.LoadUint64(s.value) != v || l.promoted(w, pred) }) {
			case expired:
				return timedOut
			case slept:
				break watch // after a sleep or a wake, look at Depart again
			}
		}
	}
}

// vwWait is the state of a visible waiter, kept across a timeout so that
// the goroutine that finishes an abandoned episode knows whether it owns a
// slot registration.
type vwWait struct {
	tried, registered bool
	e                 entry // the episode's journal entry
}

// waitVisible is HapaxVW's wait: register in the slot by CAS 0 -> pred and
// wait for the predecessor to clear it, or, when another waiter holds the
// slot, fall back to watching Depart as Tidex does.
func (l *hapax) waitVisible(pred, gen uint64, w *waiter, vw *vwWait) outcome {
	s := l.a.toSlot(l.index, pred)
	if !vw.tried {
		vw.tried = true
		vw.registered = atomic.CompareAndSwapUint64(s.value, 0, pred)
		if vw.registered {
			vw.e.markRegistered()
		}
	}
	if !vw.registered {
		return l.waitDepart(pred, gen, w)
	}
	for {
		if atomic.LoadUint64(s.value) != pred {
			return granted // the predecessor's CAS handed over
		}
		// Ratify: the predecessor may have released before it could see us.
		// Only a CAS may clear our registration: a plain store could erase a
		// colliding waiter's fresh one and make it think it was granted.
		if atomic.LoadUint64(l.depart) == pred {
			atomic.CompareAndSwapUint64(s.value, pred, 0)
			return granted
		}
		if atomic.LoadUint64(l.gen) != gen {
			if atomic.CompareAndSwapUint64(s.value, pred, 0) {
				return reset
			}
			return granted // handed over as we withdrew
		}
		l.pace(w, pred)
	watch:
		for atomic.LoadUint64(s.value) == pred {
			switch w.await(s.seq, s.sleepers, func() bool { return atomic.LoadUint64(s.value) != pred || l.promoted(w, pred) }) {
			case expired:
				return timedOut
			case slept:
				break watch
			}
		}
	}
}

// waitDepart watches Depart itself: Tidex's global spinning, and HapaxVW's
// fallback after a slot collision.
func (b *body) waitDepart(pred, gen uint64, w *waiter) outcome {
	for atomic.LoadUint64(b.depart) != pred {
		if atomic.LoadUint64(b.gen) != gen {
			return reset
		}
		b.pace(w, pred)
		if w.await(b.dseq, b.dsleepers, func() bool { return atomic.LoadUint64(b.depart) == pred || b.promoted(w, pred) }) == expired {
			return timedOut
		}
	}
	return granted
}

func (l *hapax) TryLock() bool {
	a := atomic.LoadUint64(l.arrive)
	if atomic.LoadUint64(l.depart) != a || !l.a.reserve(1, time.Time{}) {
		return false
	}
	e := l.a.claim()
	// Values never recur, so a successful CAS proves the lock was still
	// free (a, a) at that instant.
	h := l.a.nextHapax()
	e.set(jArriving, l.kind(), l.index, h, 0, atomic.LoadUint64(l.gen))
	if !atomic.CompareAndSwapUint64(l.arrive, a, h) {
		l.a.free(e)
		return false
	}
	e.queued(a)
	l.acquired(h, false)
	return true
}

func (l *hapax) Unlock() error {
	h := atomic.SwapUint64(l.holder, 0)
	if h == 0 || atomic.LoadUint64(l.arrive) == atomic.LoadUint64(l.depart) {
		if h != 0 {
			atomic.StoreUint64(l.holder, h)
		}
		return ErrNotLocked
	}
	e, own := l.a.findEpisode(l.index, l.kind(), h)
	e.phase(jReleasing)
	l.release(h)
	l.a.endEpisode(e, own)
	return nil
}

func (l *hapax) release(h uint64) {
	s := l.a.toSlot(l.index, h)
	if !l.visible {
		atomic.StoreUint64(l.depart, h)
		if testHookBetweenStores != nil {
			testHookBetweenStores()
		}
		if atomic.LoadUint64(l.arrive) == h {
			return // nobody queued: a later arrival sees Depart == h
		}
		// The slot store must follow the Depart store: a colliding value
		// sends the successor to Depart, which must already be h.
		atomic.StoreUint64(s.value, h)
		signal(s.seq, s.sleepers)
		return
	}
	contended := atomic.LoadUint64(l.waited) == 1
	// The assured handover leaves Depart behind, naming an older episode.
	// Recovery reads the queue from Depart (whose turn it is, whether a
	// dead episode's release happened), so with journals the release
	// always stores Depart first and hands over through the slot after.
	if contended && l.a.journals == nil && atomic.CompareAndSwapUint64(s.value, h, 0) {
		signal(s.seq, s.sleepers) // assured handover: Depart stays as it is
		return
	}
	atomic.StoreUint64(l.depart, h)
	if testHookBetweenStores != nil {
		testHookBetweenStores()
	}
	signal(l.dseq, l.dsleepers)
	if !contended && atomic.LoadUint64(l.arrive) == h {
		return // nobody queued
	}
	// A successor may have registered after our first look and read the old
	// Depart when it ratified; SC atomics order our Depart store before this
	// CAS, so either it saw Depart or this CAS sees its registration.
	if atomic.CompareAndSwapUint64(s.value, h, 0) {
		signal(s.seq, s.sleepers)
	}
}
