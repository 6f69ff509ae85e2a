package ipc

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// alock is ALock (Nelson-Slivon, Tseng and Palmieri, SPAA 2024), the
// asymmetric lock: two cohorts, each with its own MCS-style queue, and a
// Peterson lock between the two queues built from loads and stores only.
// Across processes on one machine the local cohort is the lock's home
// process, whose queue descriptors live in its own memory, and the remote
// cohort is every other process, whose descriptors are nodes of the arena's
// node table. Only home goroutines CAS tailL, only other processes CAS
// tailR, and victim is only ever stored: between the cohorts
// there are loads and stores and nothing else, as the algorithm requires.
//
// Each queue's tail doubles as its cohort's Peterson flag. The head of a
// queue that was empty arbitrates (victim = me; wait while the other tail
// is set and victim is still me) and then holds the lock with a budget of
// handovers within its cohort: each unlock hands the lock to the next in
// its queue with the budget minus one, without arbitration; a successor
// handed budget 0 arbitrates again, so a waiting other cohort gets in after
// at most a budget of critical sections. Budgets set the split between the
// cohorts under saturation: about BudgetHome : BudgetRemote.
//
// The home is the first process to open the lock, and stays home until its
// arena closes. Any goroutine of the process that locked may unlock (the
// lock is thread-oblivious within a process); a lock taken by the home
// cannot be unlocked from another process, whose memory holds no
// descriptor of it.
//
// Lock body words: lArrive the home's pid, lHolder the holding episode,
// lDepartQ the futex for arbitration waits, lGen bumped by Reset, lWord
// tailR, lWaited victim, lRestrict tailL.
//
// A tail word holds the name at its end (a home descriptor's token or a
// node index, below 2^32) and, above it, the era of its queue: the low 32
// bits of the generation its waiters entered in. Both cohorts enter by CAS
// on a tail of the current era, so a place states which queue it is in: a
// Reset voids every place of an earlier era, and no waiter of a later one
// ever links behind it. A tail of an earlier era is an empty tail, once
// anyone turns it into one. (With bare names, a waiter that read the
// generation before a Reset and entered after it headed the new queue
// with the old generation, and a waiter that entered behind it was left
// waiting until the next Reset.)
type alock struct {
	a                       *Arena
	index                   int
	home, holder, gen       *uint64
	tailR, tailL, victim    *uint64
	aseq, asleepers         *uint32
	isHome                  bool
	local                   *alockLocal // the home's descriptors; nil in other processes
	budgetHome, budgetOther int32
}

// Default budgets: the home gets four handovers for each one of the others,
// a priority the lock exists to give. The paper's RDMA setting used 5/20
// the other way round, because there remote operations are the slow ones.
const (
	DefaultALockBudgetHome   = 20
	DefaultALockBudgetRemote = 5
)

const (
	alockVictimHome   = 1
	alockVictimRemote = 2
	// holder encoding: home episodes carry this bit, remote ones are node
	// indices.
	alockHomeEpisode = 1 << 62
	budgetWaiting    = ^uint32(0) // -1: queued, not yet handed the lock
)

// SetALockBudgets sets the budgets alock locks opened afterwards in this
// process use: home for the home process's cohort, remote for the others'.
// Each must be at least 1; 1 means arbitration at every handover.
func (a *Arena) SetALockBudgets(home, remote int) error {
	if home < 1 || remote < 1 || home > 1<<20 || remote > 1<<20 {
		return fmt.Errorf("%w: alock budgets %d/%d; want 1 to %d", ErrBadConfig, home, remote, 1<<20)
	}
	a.mu.Lock()
	a.alockBudgets = [2]int32{int32(home), int32(remote)}
	a.mu.Unlock()
	return nil
}

// queued is one episode's place in its cohort's queue: pointers to the
// budget half-words, the next link and its own name in the tail.
type queued struct {
	budget, sleepers *uint32
	next             *uint64
	era              *uint64 // the generation of the queue it entered (nodes: word 3)
	name             uint64
	desc             *alockDesc // home episodes
	pred             uint64     // the predecessor's episode (holder value), 0 at the head
}

func openALock(a *Arena, index int) Mutex {
	b := a.lockBody(index)
	aseq, asleepers := wait.Halves(&b[lDepartQ])
	l := &alock{a: a, index: index, home: &b[lArrive], holder: &b[lHolder], gen: &b[lGen],
		tailR: &b[lWord], tailL: &b[lRestrict], victim: &b[lWaited], aseq: aseq, asleepers: asleepers}
	a.mu.Lock()
	budgets := a.alockBudgets
	if budgets[0] == 0 {
		budgets = [2]int32{DefaultALockBudgetHome, DefaultALockBudgetRemote}
	}
	l.budgetHome, l.budgetOther = budgets[0], budgets[1]
	pid, me := uint64(os.Getpid()), a.alockHomeID
	if atomic.CompareAndSwapUint64(l.home, 0, me) || atomic.CompareAndSwapUint64(l.home, pid, me) || atomic.LoadUint64(l.home) == me {
		if a.alockHomes == nil {
			a.alockHomes = make(map[int]*alockLocal)
		}
		if a.alockHomes[index] == nil {
			a.alockHomes[index] = &alockLocal{}
		}
		l.isHome, l.local = true, a.alockHomes[index]
	}
	a.mu.Unlock()
	return l
}

func (l *alock) Lock() { _ = l.LockTimeout(-1) }

func (l *alock) LockTimeout(d time.Duration) error { return l.lockWaiting(newWaiter(d)) }

func (l *alock) lockWaiting(w waiter) error {
	if took, err := l.a.lockByTurn(l.index, &w); took {
		return err
	}
	if !l.a.reserveFor(1, &w) {
		return ErrTimeout
	}
	e := l.a.claim()
	for {
		q, gen, ok := l.enqueue(e)
		if !ok {
			if !w.deadline.IsZero() && time.Now().After(w.deadline) || w.cancelled() {
				l.a.free(e)
				return ErrTimeout
			}
			time.Sleep(time.Millisecond) // node table used up for now
			continue
		}
		switch o := l.await(q, gen, &w); o {
		case granted:
			atomic.StoreUint64(l.holder, l.episode(q))
			return nil
		case timedOut:
			l.a.substituteTurn(l.index, gen, func(w *waiter, t *pendingTurn) {
				switch l.await(q, gen, w) {
				case granted:
					if l.a.handOver(t, func() { atomic.StoreUint64(l.holder, l.episode(q)) }) {
						return
					}
					e.phase(jReleasing)
					l.release(q)
					l.a.free(e)
					l.free(q)
				case reset:
					l.abandon(q, gen)
					l.a.free(e)
				}
				// Stopped by Close: the entry stays for recovery.
			})
			return ErrTimeout
		}
		// Reset: queue again with a fresh descriptor.
		l.abandon(q, gen)
	}
}

// abandon lets go of q, a place of generation gen's queue, which a Reset
// voided: if the tail still names it, the tail is emptied (the Reset's own
// clearing may not have landed yet, or it came before q entered). Nothing
// is handed on: every waiter behind q entered in the same generation and
// sees the Reset itself.
func (l *alock) abandon(q queued, gen uint64) {
	tail, _ := l.tails()
	if atomic.CompareAndSwapUint64(tail, tailWord(gen, q.name), 0) {
		signal(l.aseq, l.asleepers)
	}
}

// enqueue takes a descriptor and puts it at the cohort's tail, linking it
// behind its predecessor, in the current generation's queue, which it
// returns. A queue that was empty leaves the descriptor with its cohort's
// budget, to arbitrate; otherwise it waits with -1.
//
// Both cohorts enter by CAS on a tail of the current era, with the
// predecessor expected written in the journal entry first, so that a
// survivor can finish an arrival of the other cohort that died between
// entering the queue and linking behind its predecessor (whose release
// waits for that link). (The home cohort needs no such care, as it dies
// whole with its process, but the era needs the CAS: a swap would put a
// waiter of an old generation into a new queue.)
func (l *alock) enqueue(e entry) (queued, uint64, bool) {
	q, ok := l.newQueued()
	if !ok {
		return q, 0, false
	}
	if testHookUnfindable != nil && !l.isHome {
		testHookUnfindable(uint32(q.name))
	}
	atomic.StoreUint32(q.budget, budgetWaiting)
	atomic.StoreUint64(q.next, 0)
	tail, _ := l.tails()
	var prev, gen uint64
	for {
		var t uint64
		t, gen = currentTail(tail, l.gen)
		prev = tailName(t)
		atomic.StoreUint64(q.era, gen)
		e.set(jArriving, kindALock, l.index, l.episode(q), prev, gen)
		if atomic.CompareAndSwapUint64(tail, t, tailWord(gen, q.name)) {
			break
		}
	}
	pred, linkable := l.queuedFor(prev)
	if !linkable {
		// A damaged tail names no descriptor: nobody can hand the lock on
		// to us from there, so we head the queue, as if it was empty, and
		// our name in the tail has mended the word.
		prev = 0
	}
	e.queued(prev)
	if prev == 0 {
		atomic.StoreUint32(q.budget, 0) // head of an empty queue: arbitrate
		return q, gen, true
	}
	atomic.StoreUint64(pred.next, q.name)
	q.pred = l.episode(queued{name: prev})
	return q, gen, true
}

func (l *alock) newQueued() (queued, bool) {
	if l.isHome {
		d := l.local.get()
		lo, hi := wait.Halves(&d.word)
		return queued{budget: lo, sleepers: hi, next: &d.next, era: &d.era, name: d.token, desc: d}, true
	}
	n := l.a.awnNodes.get()
	if n == 0 {
		return queued{}, false
	}
	l.a.stampNode(n, l.index, atomic.LoadUint64(l.gen)) // enqueue stores the era again as it enters
	return l.nodeQueued(uint64(n)), true
}

// nodeQueued: a remote descriptor is node n of the table: word 0 budget and
// sleepers, word 1 the owner's pid (as ticket-awn), word 2 next, word 3 the
// generation of the queue it entered.
func (l *alock) nodeQueued(n uint64) queued {
	off := l.a.nodeOffset(uint32(n))
	lo, hi := wait.Halves(&l.a.w[off])
	return queued{budget: lo, sleepers: hi, next: &l.a.w[off+2], era: &l.a.w[off+nodeGen], name: n}
}

// queuedFor finds a descriptor by the name its cohort's tail, a link or
// the holder word held. It reports false for a name that names none: a
// damaged word, which the callers treat as naming nobody rather than
// follow out of bounds.
func (l *alock) queuedFor(name uint64) (queued, bool) {
	if l.isHome {
		d := l.local.lookup(name)
		if d == nil {
			return queued{}, false
		}
		lo, hi := wait.Halves(&d.word)
		return queued{budget: lo, sleepers: hi, next: &d.next, era: &d.era, name: name, desc: d}, true
	}
	if !l.a.isNode(name) {
		return queued{}, false
	}
	return l.nodeQueued(name), true
}

// tails is this cohort's queue tail (its Peterson flag) and the other
// cohort's.
func (l *alock) tails() (own, other *uint64) {
	if l.isHome {
		return l.tailL, l.tailR
	}
	return l.tailR, l.tailL
}

// tailWord is the tail naming name in the queue of generation gen.
func tailWord(gen, name uint64) uint64 { return gen<<32 | name&0xffffffff }

// tailName is the name a tail word holds (0: the queue is empty).
func tailName(t uint64) uint64 { return t & 0xffffffff }

// sameEra reports whether tail word t is of generation gen's queue.
func sameEra(t, gen uint64) bool { return t>>32 == gen&0xffffffff }

// currentTail reads tail word *tail of the current generation, with that
// generation: a tail of an earlier one (voided by a Reset) is first turned
// into an empty tail of the current one. The tail is read before the
// generation: a tail of another era read so is of an earlier one.
func currentTail(tail, gen *uint64) (t, g uint64) {
	for {
		t, g = atomic.LoadUint64(tail), atomic.LoadUint64(gen)
		if sameEra(t, g) {
			return t, g
		}
		atomic.CompareAndSwapUint64(tail, t, tailWord(g, 0))
	}
}

// wanting reports whether tail word t names a waiter or holder of
// generation gen's queue: the cohort's Peterson flag is up.
func wanting(t, gen uint64) bool { return tailName(t) != 0 && sameEra(t, gen) }

func (l *alock) episode(q queued) uint64 {
	if l.isHome {
		return alockHomeEpisode | q.name
	}
	return q.name
}

// await waits for the handover and arbitrates when it must: at the head of
// an empty queue, or handed budget 0.
func (l *alock) await(q queued, gen uint64, w *waiter) outcome {
	for atomic.LoadUint32(q.budget) == budgetWaiting {
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		// Only the waiter whose predecessor holds the lock spins; the rest
		// sleep at once, leaving the cores to the holder (see body.pace).
		w.setNext(atomic.LoadUint64(l.holder) == q.pred)
		if w.await(q.budget, q.sleepers, func() bool { return atomic.LoadUint32(q.budget) != budgetWaiting }) == expired {
			return timedOut
		}
	}
	if atomic.LoadUint32(q.budget) != 0 {
		// Handed over within the cohort, which keeps the Peterson lock;
		// unless a Reset voided the queue meanwhile (its tail no longer
		// leads here, so new arrivals start another queue of this cohort,
		// whose head does not wait for us).
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		return granted
	}
	if o := l.arbitrate(gen, w); o != granted {
		return o
	}
	budget := l.budgetOther
	if l.isHome {
		budget = l.budgetHome
	}
	atomic.StoreUint32(q.budget, uint32(budget))
	return granted
}

// arbitrate is the modified Peterson lock: our flag (our tail) is already
// up; yield to the other cohort if it is waiting.
func (l *alock) arbitrate(gen uint64, w *waiter) outcome {
	me := uint64(alockVictimRemote)
	if l.isHome {
		me = alockVictimHome
	}
	_, other := l.tails()
	if atomic.LoadUint64(l.gen) != gen {
		return reset // a voided queue's waiter stores no victim: it could let the other cohort in
	}
	atomic.StoreUint64(l.victim, me)
	signal(l.aseq, l.asleepers)
	mustWait := func() bool { return wanting(atomic.LoadUint64(other), gen) && atomic.LoadUint64(l.victim) == me }
	for mustWait() {
		if atomic.LoadUint64(l.gen) != gen {
			return reset
		}
		if w.await(l.aseq, l.asleepers, func() bool { return !mustWait() }) == expired {
			return timedOut
		}
	}
	if atomic.LoadUint64(l.gen) != gen {
		// A Reset emptied the tails, which ended the wait: this queue is
		// void, and the head of a new one of this cohort may be entering.
		return reset
	}
	return granted
}

// TryLock takes the lock only if neither cohort holds or wants it: raise
// our flag by CAS of our tail from empty, enter if the other tail is empty
// (Peterson's first case), else lower it again. If a successor linked in
// between, it is handed budget 0, so it arbitrates as the head of a fresh
// queue would.
func (l *alock) TryLock() bool {
	tail, other := l.tails()
	t, gen := currentTail(tail, l.gen)
	if tailName(t) != 0 || wanting(atomic.LoadUint64(other), gen) {
		return false
	}
	if !l.a.reserve(1, time.Time{}) {
		return false
	}
	q, ok := l.newQueued()
	if !ok {
		l.a.unreserve(1)
		return false
	}
	e := l.a.claim()
	atomic.StoreUint64(q.next, 0)
	atomic.StoreUint32(q.budget, 0)
	atomic.StoreUint64(q.era, gen)
	e.set(jArriving, kindALock, l.index, l.episode(q), 0, gen)
	if testHookBeforeTailCAS != nil {
		testHookBeforeTailCAS()
	}
	if !atomic.CompareAndSwapUint64(tail, t, tailWord(gen, q.name)) {
		// The entry ends before the node is pooled, as in Unlock: killed
		// in between, this process leaves an idle node no entry names,
		// never an entry naming a node a newcomer may have taken.
		l.a.free(e)
		l.free(q)
		return false
	}
	e.queued(0)
	// The generation again: a tail read as empty may be of a generation a
	// Reset has voided since (the tail of a fresh lock, 0, is also the
	// empty tail of generation 0), and a place there is no place.
	// The other tail first, as arbitrate reads it: read after the check, it
	// could be of a generation a Reset began since, entered by a waiter
	// that took our era's tail for void.
	if o := atomic.LoadUint64(other); atomic.LoadUint64(l.gen) == gen && !wanting(o, gen) {
		budget := l.budgetOther
		if l.isHome {
			budget = l.budgetHome
		}
		atomic.StoreUint32(q.budget, uint32(budget))
		atomic.StoreUint64(l.holder, l.episode(q))
		return true
	}
	// Back out: hand a successor budget 0 so that it arbitrates.
	atomic.StoreUint32(q.budget, 1)
	e.phase(jReleasing)
	l.release(q)
	l.a.free(e)
	l.free(q)
	return false
}

func (l *alock) Unlock() error {
	h := atomic.SwapUint64(l.holder, 0)
	if h == 0 {
		return ErrNotLocked
	}
	if (h&alockHomeEpisode != 0) != l.isHome {
		atomic.StoreUint64(l.holder, h) // another cohort's episode: not ours to end
		if l.isHome {
			return fmt.Errorf("%w: alock %d is held by a process other than its home, and only those release it", ErrHeldElsewhere, l.index)
		}
		return fmt.Errorf("%w: alock %d is held by its home process, and only that process releases it", ErrHeldElsewhere, l.index)
	}
	q, ok := l.queuedFor(h &^ alockHomeEpisode)
	if !ok {
		// A damaged holder word: whose episode to end cannot be told.
		return fmt.Errorf("%w: alock %d holder word %#x names no waiter", ErrNotLocked, l.index, h)
	}
	e, own := l.a.findEpisode(l.index, kindALock, h)
	e.phase(jReleasing)
	l.release(q)
	if testHookReleased != nil {
		testHookReleased(q.name)
	}
	l.a.endEpisode(e, own)
	l.free(q)
	return nil
}

// testHookReleased, set only by tests, runs in an alock Unlock between the
// release and the end of the episode's journal entry.
var testHookReleased func(node uint64)

// testHookBeforeTailCAS, set only by tests, runs in an alock TryLock
// between its journal entry and its CAS into the tail.
var testHookBeforeTailCAS func()

// testHookPooling, set only by tests, runs as an alock of the other cohort
// gives its node back to the pool.
var testHookPooling func(node uint64)

// release is qUnlock: empty the queue by CAS of the tail (which also lowers
// our Peterson flag), or hand the successor our budget minus one. The
// caller frees q's descriptor once the episode's journal entry has ended:
// a pooled node may be taken by another process (see nodePool.get), and
// a live entry naming it would let recovery release on its behalf.
func (l *alock) release(q queued) {
	tail, _ := l.tails()
	gen := atomic.LoadUint64(q.era)
	if atomic.CompareAndSwapUint64(tail, tailWord(gen, q.name), tailWord(gen, 0)) {
		signal(l.aseq, l.asleepers) // the other cohort may be waiting on our flag
		return
	}
	var next uint64
	for p := (wait.Policy{}); ; {
		if next = atomic.LoadUint64(q.next); next != 0 {
			break // the successor took the tail and has now linked
		}
		if atomic.LoadUint64(l.gen) != gen {
			return // reset: the successor queues afresh and never links
		}
		if !p.Pause() {
			time.Sleep(time.Microsecond)
		}
	}
	succ, ok := l.queuedFor(next)
	if !ok {
		return // a damaged link names nobody to hand the lock to
	}
	if testHookBetweenStores != nil {
		testHookBetweenStores()
	}
	// Only after this may the descriptor be reused: until the successor is
	// handed the lock, a journal naming our descriptor as its predecessor
	// means this episode (recovery relies on it).
	l.handOver(succ, atomic.LoadUint32(q.budget)-1)
}

func (l *alock) handOver(succ queued, budget uint32) {
	atomic.StoreUint32(succ.budget, budget)
	if atomic.LoadUint32(succ.sleepers) != 0 {
		wait.WakeAll(succ.budget)
	}
}

func (l *alock) free(q queued) {
	if l.isHome {
		l.local.put(q.desc)
		return
	}
	if testHookPooling != nil {
		testHookPooling(q.name)
	}
	l.a.awnNodes.put(uint32(q.name))
}
