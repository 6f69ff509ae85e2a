package ipc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPassLimit is how many critical sections one tenure of a cohort
// lock's global lock may hold before the process must let others in (ck's
// CK_COHORT_DEFAULT_LOCAL_PASS_LIMIT).
const DefaultPassLimit = 10

// cohort is lock cohorting (Dice, Marathe and Shavit; ck_cohort) with the OS
// process as the cohort. Goroutines of one process queue on a process-local
// lock, parked by the Go scheduler; only the local holder takes the shared,
// thread-oblivious global lock, and it passes the global lock to the next
// local waiter for up to passLimit critical sections in a row. So at most
// one goroutine per process waits on shared memory, and a hot lock changes
// process (and cache) once per tenure instead of once per critical section.
//
// Every handle of one lock index in one Arena shares one cohortRecord: the
// Arena stands for the process.
type cohort struct {
	a         *Arena
	rec       *cohortRecord
	global    Mutex
	passLimit int
}

// cohortRecord is the process-local half of a cohort lock.
type cohortRecord struct {
	local sync.Mutex
	// waiting counts goroutines blocked on local: the releaser's "is anyone
	// of my process waiting?" test. Only blocking waiters advertise: a
	// TryLock that counted itself could make an unlock keep the global lock
	// for a process that then leaves, stalling every other process.
	waiting atomic.Int32
	held    atomic.Bool // a critical section is on: Unlock's guard against a double unlock
	// Guarded by local:
	keepsGlobal bool // the global lock is held for this process (ck's LOCAL state)
	tenure      int  // critical sections in this tenure of the global lock
	// Counters for tests and stats: global acquisitions, local handovers.
	globalTakes, localPasses atomic.Int64
}

// openCohort runs cohorting over a thread-oblivious global lock, so that any
// goroutine of the process can end the tenure. Over Hapax ("cohort"), which
// is FIFO, a process's representative, from its swap into the global
// lock's Arrive to its entry, waits for at most passLimit critical
// sections of each other process (one tenure, counting the section it is
// in), (processes-1) x passLimit in all. A caller of Lock sees more. It first waits for its
// process's local mutex, a sync.Mutex, which lets running goroutines of
// its process in before it (it hands over in order only to a waiter of
// more than 1 ms), so it may wait through several tenures of its process.
// And between two tenures, while no goroutine of its process is queued at
// the global lock (until the OS runs the one that queues next), other
// processes run without bound. So the bound holds per tenure the caller
// waits through, for the time its process is queued
// (TestCallersArePassedWithinTheStatedBounds checks the bound at every
// arrival and reports what callers see). Over hapax-cr
// ("cohort-cr") the bound is traded for throughput when processes
// outnumber cores.
func openCohort(global func(*Arena, int) Mutex) func(*Arena, int) Mutex {
	return func(a *Arena, index int) Mutex {
		return &cohort{a: a, rec: a.cohortRecord(index), global: global(a, index), passLimit: DefaultPassLimit}
	}
}

// cohortRecord returns this process's record for lock index.
func (a *Arena) cohortRecord(index int) *cohortRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cohorts == nil {
		a.cohorts = make(map[int]*cohortRecord)
	}
	r := a.cohorts[index]
	if r == nil {
		r = new(cohortRecord)
		a.cohorts[index] = r
	}
	return r
}

func (l *cohort) Lock() { _ = l.LockTimeout(-1) }

func (l *cohort) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *cohort) lockWaiting(w waiter) error {
	r := l.rec
	if !r.local.TryLock() {
		if w.deadline == forever && w.done == nil {
			r.waiting.Add(1)
			r.local.Lock()
			r.waiting.Add(-1)
		} else if !l.lockLocalUntil(&w) {
			return ErrTimeout
		}
	}
	if !r.keepsGlobal {
		if err := lockUntil(l.global, &w); err != nil {
			r.local.Unlock()
			return err
		}
		r.globalTakes.Add(1)
	} else {
		r.localPasses.Add(1)
	}
	r.tenure++
	r.held.Store(true)
	return nil
}

// lockLocalUntil waits for the local lock within w's bounds (its deadline
// and context). sync.Mutex cannot time out, so a helper goroutine waits
// for it; when the caller gives up first, the helper, once it gets the
// lock, releases it as an unlock would (a holder may have kept the global
// lock for it), so nothing is stranded.
func (l *cohort) lockLocalUntil(w *waiter) bool {
	r := l.rec
	const (
		pending = iota
		delivered
		abandoned
	)
	var state atomic.Int32
	got := make(chan struct{})
	r.waiting.Add(1)
	// Close waits for the helper up to CloseWait, not for good: a holder
	// that never unlocks (the map was closed while it held the lock) would
	// keep it waiting forever. Once the helper has the lock, it releases
	// it, touching the shared words only if Close is not finished; if it
	// is, a global lock kept for it stays held, as any lock held at Close
	// does, for recovery to release once this process has left.
	l.a.waitLocal()
	go func() {
		r.local.Lock()
		r.waiting.Add(-1)
		if state.CompareAndSwap(pending, delivered) {
			l.a.gotLocal(false)
			close(got)
			return
		}
		if !l.a.gotLocal(true) {
			r.local.Unlock()
			return
		}
		defer l.a.leave()
		if r.keepsGlobal {
			l.release() // pass the global lock on, or release it
		} else {
			r.local.Unlock()
		}
	}()
	timer := time.NewTimer(time.Until(w.deadline))
	defer timer.Stop()
	select {
	case <-got:
		return true
	case <-timer.C:
	case <-w.done:
	}
	if state.CompareAndSwap(pending, abandoned) {
		return false
	}
	<-got // delivered just as the timer fired
	return true
}

func (l *cohort) TryLock() bool {
	r := l.rec
	if !r.local.TryLock() {
		return false
	}
	if !r.keepsGlobal {
		if !l.global.TryLock() {
			r.local.Unlock()
			return false
		}
		r.globalTakes.Add(1)
	}
	r.held.Store(true)
	r.tenure++
	return true
}

func (l *cohort) Unlock() error {
	if !l.rec.held.CompareAndSwap(true, false) {
		// Whether another process holds it, this one cannot tell: its
		// record is that process's.
		return fmt.Errorf("%w by this process (a cohort lock is released only in the process that holds it)", ErrNotLocked)
	}
	return l.release()
}

// release ends a critical section: it keeps the global lock for a local
// waiter while the tenure is under the pass limit, else releases it; then it
// releases the local lock.
func (l *cohort) release() error {
	r := l.rec
	var err error
	if r.waiting.Load() > 0 && r.tenure < l.passLimit {
		r.keepsGlobal = true
	} else {
		r.keepsGlobal = false
		r.tenure = 0
		err = l.global.Unlock()
	}
	r.local.Unlock()
	return err
}
