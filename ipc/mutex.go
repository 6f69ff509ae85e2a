package ipc

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// Mutex is an exclusive lock in an arena, shared by every process that maps
// it. Any goroutine of any process may unlock a lock another one locked:
// the context an unlock needs is kept in the lock body, not in the caller.
type Mutex interface {
	// Lock blocks until the lock is granted.
	Lock()
	// LockTimeout is Lock bounded by d; it returns ErrTimeout when d passes
	// first. A FIFO lock cannot take a waiter out of its queue, so a waiter
	// that gives up leaves a goroutine behind that takes its turn and
	// releases the lock at once.
	LockTimeout(d time.Duration) error
	// TryLock takes the lock only if it is free, without waiting.
	TryLock() bool
	// Unlock releases the lock. It returns ErrNotLocked when it can tell the
	// lock is not held (it cannot tell whose it is), and ErrHeldElsewhere
	// when it is held where this algorithm does not let this process
	// release it (see the package doc: cohort locks and alock).
	Unlock() error
}

// Algorithm describes one lock algorithm.
type Algorithm struct {
	// Name selects the algorithm, as in "hapax".
	Name string
	// Summary is a one-line description for help texts.
	Summary string
	// FIFO reports whether waiters are admitted in arrival order.
	FIFO bool

	open func(a *Arena, index int) Mutex
	// kinds has bit k set for each kind of journal entry k the algorithm
	// writes: recovery takes an entry of another kind for damage.
	kinds uint8
}

// algorithms is in the order Algorithms lists them, the default first.
var algorithms = []Algorithm{
	{Name: "hapax-cr", FIFO: false, open: openRestricted(openHapax(false)), kinds: 1<<kindCR | 1<<kindHapax,
		Summary: "Hapax with concurrency restriction (default): as many waiters as cores circulate, the rest queue asleep outside and rotate in (each passed by at most 513 sections per other goroutine)"},
	{Name: "hapax", FIFO: true, open: openHapax(false), kinds: 1 << kindHapax,
		Summary: "Hapax lock with invisible waiters: FIFO, waiters watch a slot of the shared waiting array"},
	{Name: "hapax-vw", FIFO: true, open: openHapax(true), kinds: 1 << kindHapaxVW,
		Summary: "Hapax lock with visible waiters: FIFO, assured handover through the waiting slot"},
	{Name: "cohort", FIFO: false, open: openCohort(openHapax(false)), kinds: 1 << kindHapax,
		Summary: "lock cohorting: a process's goroutines queue locally and pass a Hapax lock between them, up to 10 in a row"},
	{Name: "cohort-cr", FIFO: false, open: openCohort(openRestricted(openHapax(false))), kinds: 1<<kindCR | 1<<kindHapax,
		Summary: "lock cohorting over hapax-cr: for many goroutines in more processes than cores"},
	{Name: "ticket-awn", FIFO: true, open: openTicketAWN, kinds: 1 << kindTicket,
		Summary: "Ticket AWN, negative egress: a ticket lock whose waiters further back wait on their own node in the file"},
	{Name: "alock", FIFO: false, open: openALock, kinds: 1 << kindALock,
		Summary: "ALock: the home process's goroutines and all other processes queue apart and share by Peterson, 20:5 handovers"},
	{Name: "tidex", FIFO: true, open: openTidex, kinds: 1 << kindTidex,
		Summary: "Tidex lock: FIFO, every waiter watches the lock's Depart word"},
	{Name: "ttas", FIFO: false, open: openTTAS,
		Summary: "test-and-test-and-set word with futex parking (Chronicle Map style): not fair"},
}

// Algorithms lists the lock algorithms by name, the default first.
func Algorithms() []Algorithm { return slices.Clone(algorithms) }

// DefaultAlgorithm is the algorithm used when none is named.
const DefaultAlgorithm = "hapax-cr"

// Lookup returns the algorithm called name.
func Lookup(name string) (Algorithm, error) {
	for _, alg := range algorithms {
		if alg.Name == name {
			return alg, nil
		}
	}
	names := make([]string, len(algorithms))
	for i, alg := range algorithms {
		names[i] = alg.Name
	}
	return Algorithm{}, fmt.Errorf("%w %q; known: %v", ErrUnknownAlgorithm, name, names)
}

// Mutex returns lock index of the arena, run with the named algorithm. Every
// process must use the same algorithm for a given lock; the map records it
// in its header. A lock that ran with another algorithm needs a Reset
// (from this arena, once it has opened the lock) before it reads as free
// to the new one.
func (a *Arena) Mutex(algorithm string, index int) (Mutex, error) {
	alg, err := Lookup(algorithm)
	if err != nil {
		return nil, err
	}
	if err := a.checkIndex(index); err != nil {
		return nil, err
	}
	a.recordAlgorithm(index, alg.Name)
	return alg.open(a, index), nil
}

// testHookResetBumped, set only by tests, runs in Reset between its first
// bump of the generation (and Depart's store) and its other stores.
var testHookResetBumped func()

// testHookResetBeforeClear, set only by tests, runs in Reset after it has
// freed the lock (Depart or egress stored) and before it clears the
// ticket-awn array.
var testHookResetBeforeClear atomic.Pointer[func()] // atomic: goroutines of other tests' arenas may read it

// Reset forces lock index back to free and makes every goroutine waiting on
// it queue again. It is for recovery after a process died holding or
// waiting for the lock, and is only correct when no live process is inside
// the lock's critical section. An alock is reset otherwise than the other
// algorithms' locks (only its generation moves): Reset knows the algorithm
// of a lock this arena opened (Mutex); a process that has not opened the
// lock calls ResetAs.
func (a *Arena) Reset(index int) error {
	a.mu.Lock()
	algorithm := a.opened[index]
	a.mu.Unlock()
	return a.ResetAs(index, algorithm)
}

// ResetAs is Reset of a lock run with the named algorithm, for a process
// that has not opened the lock. "" resets it as a hapax lock, which suits
// every algorithm but alock, and ticket-awn whose ingress damage put past
// 2^63.
func (a *Arena) ResetAs(index int, algorithm string) error {
	if err := a.checkIndex(index); err != nil {
		return err
	}
	if algorithm != "" {
		if _, err := Lookup(algorithm); err != nil {
			return err
		}
	}
	// Between the surrogate's steps (see Arena.steps): a step after the
	// Reset sees the new generation and leaves the lock alone.
	a.steps.Lock()
	defer a.steps.Unlock()
	a.reset(index, algorithm)
	return nil
}

// reset is Reset of a lock run with algorithm, or "" for one of the others
// than alock; recovery, which knows, says so itself.
func (a *Arena) reset(index int, algorithm string) {
	isALock := algorithm == "alock"
	b := a.lockBody(index)
	holder := atomic.LoadUint64(&b[lHolder]) // the dead holder's, before the generation moves
	// Depart := Arrive frees the lock for whoever arrived last or arrives
	// next; everyone queued before that waits for a predecessor that will
	// never release, sees the generation move and queues again. A grant a
	// waiter sees is always real, because Hapax values never recur, and the
	// tidex identities a Reset voids are never handed out again (see
	// tidex.LockTimeout).
	if isALock {
		nextALockGeneration(b)
	} else {
		// Depart := Arrive as Arrive was before the bump, stored right
		// after it. A waiter that sees the bump queues again behind the
		// last arrival. Arrive read after the bump could include the
		// arrival of a waiter that swapped it first: the store would cover
		// it, and the waiter would wait for a predecessor that never
		// departs, until its timeout (TestTidexResetGrantsNoStaleWaiter
		// holds this). What is left: an arrival of its own between this load and
		// the bump that then sees the bump before the store also queues
		// again, and whoever queued behind its first place waits so; a
		// window of two instructions, which only holding arrivals off
		// during a Reset would close.
		arrived := atomic.LoadUint64(&b[lArrive])
		atomic.AddUint64(&b[lGen], 1)
		atomic.StoreUint64(&b[lHolder], 0)
		if algorithm == "ticket-awn" {
			freeTickets(b)
		} else {
			atomic.StoreUint64(&b[lDepart], arrived)
		}
	}
	if testHookResetBumped != nil {
		testHookResetBumped()
	}
	a.dropTurns(index)
	if isALock {
		// Its holder word only if nobody was granted the lock since.
		atomic.CompareAndSwapUint64(&b[lHolder], holder, 0)
	} else {
		atomic.StoreUint64(&b[lWord], 0)
		atomic.StoreUint64(&b[lRestrict], 0)
		if hook := testHookResetBeforeClear.Load(); hook != nil {
			(*hook)()
		}
		a.awnArray(index).clear()
	}
	// An alock needs the generation alone: its tail words carry the
	// generation of their queue, so the old queues' tails read as empty,
	// and arrivals replace them. Stores here would erase the places of
	// waiters that arrive in the new generation, and void a holder granted
	// in it, letting in a second holder.
	seq, _ := wait.Halves(&b[lDepartQ])
	atomic.AddUint32(seq, 1)
	wait.WakeAll(seq)
	word, _ := wait.Halves(&b[lWord])
	wait.WakeAll(word)
}

// freeTickets is Depart := Arrive for a ticket-awn lock. Tickets count up
// from 0 and never reach 2^63 (the sign of egress is the handover's flag),
// so an ingress past it is damage, which would leave the lock taken for
// good: both restart at ticketRestart. A CAS, so that no ticket drawn
// meanwhile is lost (its holder then queues again, as after any Reset).
func freeTickets(b []uint64) {
	for {
		ingress := atomic.LoadUint64(&b[lArrive])
		if int64(ingress) >= 0 {
			atomic.StoreUint64(&b[lDepart], ingress)
			return
		}
		if atomic.CompareAndSwapUint64(&b[lArrive], ingress, ticketRestart) {
			atomic.StoreUint64(&b[lDepart], ticketRestart)
			return
		}
	}
}

// ticketRestart is where the tickets of a ticket-awn lock restart after
// ingress damage: above any ticket a lock draws in practice (2^62 episodes),
// and below the damaged ones, so that no ticket a waiter drew before the
// Reset recurs while that waiter has yet to see the Reset and could take
// the new holder's egress for its own turn. (Restarting at 0 would let a
// stale ticket 1 stand beside the new ticket 1.)
// Tickets then still only count up, which TryLock relies on, for 2^62 more.
// A second such damage after a restart can make restarted tickets recur.
const ticketRestart = 1 << 62

// nextALockGeneration moves an alock's generation on to one that neither
// tail word carries, so that both read as empty. A tail of a live queue
// carries the current generation or an earlier one; one that carries the
// next is damage (FuzzDamagedLockBody), and would otherwise name a queue of
// the new generation that nobody is in, for good.
func nextALockGeneration(b []uint64) {
	for {
		gen := atomic.LoadUint64(&b[lGen])
		tailR, tailL := atomic.LoadUint64(&b[lWord]), atomic.LoadUint64(&b[lRestrict])
		next := gen + 1
		for sameEra(tailR, next) || sameEra(tailL, next) {
			next++
		}
		if atomic.CompareAndSwapUint64(&b[lGen], gen, next) {
			return
		}
	}
}
