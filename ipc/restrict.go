package ipc

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// Concurrency restriction (after Dice and Kogan's GCR, "Avoiding Scalability
// Collapse by Restricting Concurrency", 2019) keeps a FIFO lock fast when
// waiters outnumber cores. A FIFO lock must hand over to its next waiter;
// when that waiter is not running, the lock stays idle for a wake-up and a
// trip through the scheduler, tens of microseconds on a loaded machine,
// which is what collapses Hapax at 8 processes on 2 cores. Restriction lets
// at most seats goroutines (the holder and its queue) circulate over the
// inner lock; later arrivals wait outside in a passive FIFO, asleep, so the
// inner lock only hands over to goroutines that are running. The passive
// queue's head takes a seat at its first look at which one is free or at
// which it has been the head for crPatience; it looks every crLook, but
// only when the OS runs it, so no bound in time holds where runnable
// threads outnumber cores. Short-run FIFO is given up; what bounds a
// waiter is a count. While passive waiters wait, a handle is admitted past
// them at most crStreak-1 times in a row (Lock's admissions at once and
// TryLock's alike), then queues behind them (yieldTurn; TryLock fails), so
// the circulating set rotates. With a handle per goroutine, each other
// goroutine using the lock runs at most crStreak critical sections from
// the CAS by which a goroutine draws its passive ticket to the CAS by
// which, at the head, it takes the ticket out of the queue with a seat
// (the section the other is in or queued ahead for, then its admissions
// past), and at most 1 from the goroutine's swap into the inner lock's
// Arrive to its entry (Hapax is FIFO): crStreak + 1 in all. Two stretches
// are bounded by nothing but the OS scheduler: from the call to the draw
// of its ticket (or its seat), and from its seat to its arrival at the
// inner lock, a few instructions each. Goroutines that share a handle
// share its streak, which each may restart once. A goroutine seated at
// once waits only for those arrived at the inner lock before it.
// TestCallersArePassedWithinTheStatedBounds checks every wait against
// these counts, with marks at those CASes and that swap.
//
// The state is one word (lRestrict) in the lock body's line:
// bits 0-15 the goroutines seated (admitted, not yet unlocked), bits 16-39
// the passive arrival ticket, bits 40-63 the ticket being served. Passive
// waiters sleep on the waiting-array slot of their ticket, salted apart
// from the inner lock's slots.
const (
	crSeatBits   = 16
	crTicketBits = 24
	crSeatMask   = 1<<crSeatBits - 1
	crTicketMask = 1<<crTicketBits - 1
	crServeShift = crSeatBits + crTicketBits
	crServeOne   = 1 << crServeShift

	// crStreak bounds a handle's admissions in a row past passive
	// waiters: it takes crStreak-1 and joins them at the next. It makes
	// the circulating set rotate in turn rather than by chance, and
	// bounds, in critical sections, how long a passive waiter is passed
	// (see above).
	crStreak = 512
	// crLook is how often the sleeping passive head looks for a free seat.
	crLook = 50 * time.Microsecond
)

// crPatience is how long the passive head looks for a free seat before it
// takes one anyway: a bound on its looking while the OS runs it, not on its
// wait, which the scheduler may stretch. A variable only so that tests can
// stop the clock.
var crPatience = 250 * time.Microsecond

type crState uint64

func (s crState) seated() uint64  { return uint64(s) & crSeatMask }
func (s crState) arrival() uint64 { return uint64(s) >> crSeatBits & crTicketMask }
func (s crState) serving() uint64 { return uint64(s) >> crServeShift }
func (s crState) passive() bool   { return s.arrival() != s.serving() }

// queued reports whether passive ticket t is drawn and not yet served.
func (s crState) queued(t uint64) bool {
	return (t-s.serving())&crTicketMask < (s.arrival()-s.serving())&crTicketMask
}

// restricted wraps a FIFO lock of the same body with concurrency restriction.
type restricted struct {
	inner Mutex
	a     *Arena
	index int
	state *uint64
	gen   *uint64
	seats uint64
	// streak counts this handle's admissions in a row past passive waiters.
	streak atomic.Uint32
	// Test hooks, nil outside tests (a predictable branch each): drew runs
	// right after the CAS by which the caller draws passive ticket t (the
	// passive queue's doorway), serving right before each CAS by which the
	// caller, at the head, would take its ticket out of the queue. The
	// bypass test marks the interval a ticket waits with them.
	drew    func(t uint64)
	serving func()
}

func openRestricted(open func(*Arena, int) Mutex) func(*Arena, int) Mutex {
	return func(a *Arena, index int) Mutex {
		w := a.lockBody(index)
		return &restricted{inner: open(a, index), a: a, index: index, state: &w[lRestrict], gen: &w[lGen],
			seats: crSeats()}
	}
}

// crSeats is the number of goroutines that may circulate over one lock: as
// many as can run at once. Processes that see different CPU counts may
// disagree; that changes the policy, never the exclusion.
func crSeats() uint64 {
	return uint64(max(2, min(runtime.NumCPU(), crSeatMask/2)))
}

// passiveSlot is where the waiter with ticket t sleeps.
func (l *restricted) passiveSlot(t uint64) slot {
	return l.a.toSlot(MaxLocks+l.index, t&crTicketMask)
}

func (l *restricted) Lock() { _ = l.LockTimeout(-1) }

func (l *restricted) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *restricted) lockWaiting(w waiter) error {
	// The seat's entry and the inner lock's turn are reserved together, so
	// that goroutines holding seats never wait for entries other seated
	// goroutines would have to free.
	inner, journaled := l.inner.(*hapax)
	need := 1
	if journaled {
		need = 2
	}
	if !l.a.reserveFor(need, &w) {
		return ErrTimeout
	}
	e := l.a.claim()
	if err := l.takeSeat(&w, e); err != nil {
		l.a.unreserve(need - 1)
		return err
	}
	var err error
	if journaled {
		err = inner.lockReserved(w.fresh())
	} else {
		err = lockUntil(l.inner, &w)
	}
	if err != nil {
		l.leaveSeat(e)
		return err
	}
	e.phase(jSeatHold)
	return nil
}

func (l *restricted) TryLock() bool {
	// Past passive waiters a trylock is an admission of its handle's
	// streak, as Lock's are, and fails once the streak has run out: it
	// cannot queue behind them, and a caller that only tries would
	// otherwise pass them without end.
	if s := crState(atomic.LoadUint64(l.state)); s.passive() && l.streak.Load() >= crStreak-1 {
		return false
	}
	if !l.a.reserve(1, time.Time{}) {
		return false
	}
	e := l.a.claim()
	e.set(jSeatAsk, kindCR, l.index, 0, 0, atomic.LoadUint64(l.gen))
	if !l.inner.TryLock() {
		l.a.free(e)
		return false
	}
	for { // a holder always has a seat
		st := atomic.LoadUint64(l.state)
		if crState(st).seated() == crSeatMask {
			// Every seat the field counts is taken: one more would carry
			// into the arrival ticket.
			_ = l.inner.Unlock()
			l.a.free(e)
			return false
		}
		if atomic.CompareAndSwapUint64(l.state, st, st+1) {
			if crState(st).passive() {
				l.streak.Add(1)
			} else if l.streak.Load() != 0 {
				l.streak.Store(0)
			}
			break
		}
	}
	e.phase(jSeatHold)
	return true
}

func (l *restricted) Unlock() error {
	if err := l.inner.Unlock(); err != nil {
		return err
	}
	e, own := l.a.findSeat(l.index)
	leavingSeat(e)
	l.leaveSeat(entry{})
	l.a.endEpisode(e, own)
	return nil
}

// leavingSeat marks seat entry e as in a seat CAS before the seat is given
// back: between the CAS and the entry's end, a recovery pass would count
// the entry as a live seat the count no longer holds, give back too few
// of the dead's seats, and free their entries all the same, so the count
// would stay too high for good. A seat CAS in flight makes it look again.
func leavingSeat(e entry) {
	if e.ok() {
		atomic.StoreUint64(&e.w[1], 0) // no ticket: a dead seat asker with one goes on as a ticket
		e.phase(jSeatAsk)
	}
}

// leaveSeat gives a seat back and frees its entry, if given one. It never
// goes below zero: Reset zeroes the count while goroutines that hold seats
// are still running.
func (l *restricted) leaveSeat(e entry) {
	leavingSeat(e)
	for {
		s := atomic.LoadUint64(l.state)
		if crState(s).seated() == 0 || atomic.CompareAndSwapUint64(l.state, s, s-1) {
			break
		}
	}
	if e.ok() {
		l.a.free(e)
	}
}

// takeSeat admits the caller at once while a seat is free, even past
// passive waiters: they are asleep, and waiting for one to wake would idle
// the lock (the head's patience bounds the bypass). Else it queues the
// caller in the passive FIFO. Its journal entry e ends as jSeated, or is
// handed to the goroutine that takes the turn of a timed-out ticket.
func (l *restricted) takeSeat(w *waiter, e entry) error {
	yielded := false
	for {
		gen := atomic.LoadUint64(l.gen)
		s := atomic.LoadUint64(l.state)
		if crState(s).seated() < l.seats && l.admitsAtOnce(crState(s), &yielded) {
			e.set(jSeatAsk, kindCR, l.index, 0, 0, gen)
			if atomic.CompareAndSwapUint64(l.state, s, s+1) {
				e.phase(jSeated)
				return nil
			}
			continue
		}
		t := crState(s).arrival()
		e.set(jTicketAsk, kindCR, l.index, t, 0, gen)
		if hook := testHookBeforeDraw.Load(); hook != nil {
			(*hook)()
		}
		if !atomic.CompareAndSwapUint64(l.state, s, l.nextArrival(s)) {
			continue
		}
		if l.drew != nil {
			l.drew(t)
		}
		e.phase(jTicket)
		switch l.waitPassive(w, t, gen, false, e) {
		case granted:
			return nil
		case timedOut:
			l.a.substitute(func(w *waiter) {
				switch l.waitPassive(w, t, gen, true, e) {
				case granted, reset:
					l.a.free(e)
				}
			})
			return ErrTimeout
		}
	}
}

// admitsAtOnce reports whether a caller that finds a seat free in s takes
// it at once rather than queue. Once its handle's streak has run out
// (yielded), the call queues behind the passive waiters for as long as
// any wait, across every retry of a draw whose CAS failed: yieldTurn has
// restarted the streak, and asking it again would admit the caller past
// the same waiters for a whole new streak, once per failed draw.
func (l *restricted) admitsAtOnce(s crState, yielded *bool) bool {
	if *yielded && s.passive() {
		return false
	}
	if l.yieldTurn(s) {
		*yielded = true
		return false
	}
	return true
}

// yieldTurn reports whether a handle that would be admitted past passive
// waiters has had its streak and should queue behind them instead.
func (l *restricted) yieldTurn(s crState) bool {
	if !s.passive() {
		if l.streak.Load() != 0 {
			l.streak.Store(0)
		}
		return false
	}
	if l.streak.Add(1) < crStreak {
		return false
	}
	l.streak.Store(0)
	return true
}

func (l *restricted) nextArrival(s uint64) uint64 {
	return s&^(crTicketMask<<crSeatBits) | (crState(s).arrival()+1)&crTicketMask<<crSeatBits
}

// testHookBeforeDraw, set only by tests, runs in takeSeat right before the
// CAS that draws a passive ticket.
var testHookBeforeDraw atomic.Pointer[func()]

// testHookPassiveLook, set only by tests, runs in waitPassive at each look,
// before it reads the state word.
var testHookPassiveLook atomic.Pointer[func()] // atomic: substitutes of other tests' arenas may read it

// waitPassive waits until ticket t is served, then until a seat is free or
// its patience runs out, and takes the seat; a pass (the turn of a waiter
// that timed out) moves the queue on without taking one.
func (l *restricted) waitPassive(w *waiter, t, gen uint64, pass bool, e entry) outcome {
	sl := l.passiveSlot(t)
	var headSince time.Time
	for {
		if hook := testHookPassiveLook.Load(); hook != nil {
			(*hook)()
		}
		s := atomic.LoadUint64(l.state)
		if !crState(s).queued(t) {
			// Voided: a Reset zeroed the word, or a waiter or surrogate
			// that had not yet seen one took this number's turn in the
			// new queue. Queue again. The ticket's place decides, not the
			// generation: a waiter that read the new generation may hold a
			// ticket drawn from the word before the Reset zeroed it, and
			// one that read the old generation may have drawn its ticket
			// after, in the new queue; waiting on the first, or giving up
			// the second, leaves a ticket nobody serves or passes on.
			return reset
		}
		if crState(s).serving() == t {
			if headSince.IsZero() {
				headSince = time.Now()
			}
			// Patience admits past the seats, but never past the seat
			// field's width: the count would carry into the arrival ticket.
			if pass || crState(s).seated() < l.seats || time.Since(headSince) >= crPatience && crState(s).seated() < crSeatMask {
				ns := s + crServeOne
				if !pass {
					ns++
					// Says the serving CAS, which also takes a seat, may
					// have happened; value is the ticket + 1.
					e.set(jSeatAsk, kindCR, l.index, t+1, 0, gen)
				}
				if !pass && l.serving != nil {
					l.serving()
				}
				if !atomic.CompareAndSwapUint64(l.state, s, ns) {
					e.set(jTicket, kindCR, l.index, t, 0, gen)
					continue
				}
				if !pass {
					e.phase(jSeated)
				}
				if crState(ns).passive() {
					next := l.passiveSlot(t + 1)
					signal(next.seq, next.sleepers)
				}
				return granted
			}
		}
		if w.stopped() {
			return timedOut
		}
		// Passive waiters never spin: spinning is the CPU the circulating
		// goroutines need. The head naps briefly to look for a free seat;
		// the others sleep until the head before them enters.
		nap := wait.MaxNap
		if !headSince.IsZero() {
			nap = crLook
		} else if w.done != nil {
			nap = cancelNap
		}
		if left := time.Until(w.deadline); left <= 0 {
			return timedOut
		} else if left < nap {
			nap = left
		}
		atomic.AddUint32(sl.sleepers, 1)
		seq := atomic.LoadUint32(sl.seq)
		if crState(atomic.LoadUint64(l.state)).serving() != t || !headSince.IsZero() {
			wait.Sleep(sl.seq, seq, nap)
		}
		atomic.AddUint32(sl.sleepers, ^uint32(0))
	}
}
