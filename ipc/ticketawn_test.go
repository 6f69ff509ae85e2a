//go:build linux

package ipc

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// ticketAWNConfigs cover every way a ticket-awn waiter can wait: on its node
// (default), on egress because the array is full (4 entries leave room for
// 2 nodes) or the node table is used up (2 nodes), and with no arrays at all
// (a plain ticket lock, as in arenas from before ticket-awn).
var ticketAWNConfigs = []Config{
	{Locks: 1},
	{Locks: 1, AWNWaiters: 4, AWNNodes: 2},
	{Locks: 1, AWNWaiters: 2},
	{Locks: 1, AWNWaiters: -1, AWNNodes: -1},
}

// TestTicketAWNInProcess: exclusion and progress for each configuration,
// with critical sections long enough that queues form and nodes are used.
func TestTicketAWNInProcess(t *testing.T) {
	for _, cfg := range ticketAWNConfigs {
		t.Run(fmt.Sprintf("waiters=%d/nodes=%d", cfg.AWNWaiters, cfg.AWNNodes), func(t *testing.T) {
			tf := openTestFile(t, createTestFile(t, cfg))
			defer tf.close()
			const goroutines = 8
			iters := 2000
			if testing.Short() {
				iters = 600
			}
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := tf.mutex(t, "ticket-awn", 0)
					for i := range iters {
						if i%5 == 0 && m.TryLock() {
						} else {
							m.Lock()
						}
						criticalSection(tf.scratch)
						if i%16 == 0 {
							time.Sleep(20 * time.Microsecond) // let a queue build behind us
						}
						if err := m.Unlock(); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			n := tf.scratch[scratchCounter]
			if n != uint64(goroutines*iters) || tf.scratch[scratchPRNG] != replay(n) {
				t.Fatalf("%d critical sections, PRNG replays: %v; want %d: exclusion failed", n, tf.scratch[scratchPRNG] == replay(n), goroutines*iters)
			}
			handovers := tf.arena.awnNodeHandovers.Load()
			t.Logf("%d of %d acquisitions handed over through a node", handovers, n)
			withNodes := cfg.AWNWaiters >= 0 && cfg.AWNWaiters != 2
			if withNodes && handovers == 0 {
				t.Fatal("no acquisition went through a waiting node: the test did not exercise AWN")
			}
			if !withNodes && handovers != 0 {
				t.Fatalf("%d handovers through nodes in an arena that cannot have any", handovers)
			}
			if m := tf.mutex(t, "ticket-awn", 0); !m.TryLock() {
				t.Fatal("lock not free after every goroutine unlocked")
			} else if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTicketAWNAcrossProcesses: 4 processes x 3 goroutines, nodes from one
// table drawn by every process, array wrap-around with a short array.
func TestTicketAWNAcrossProcesses(t *testing.T) {
	const procs, goroutines = 4, 3
	iters := 3000
	if testing.Short() {
		iters = 1000
	}
	for _, cfg := range ticketAWNConfigs[:2] {
		t.Run(fmt.Sprintf("waiters=%d/nodes=%d", cfg.AWNWaiters, cfg.AWNNodes), func(t *testing.T) {
			path := createTestFile(t, cfg)
			cmds := testutil.Commands("exclusion", procs, "LOCKS_PATH="+path, "LOCKS_ALGO=ticket-awn",
				"LOCKS_GOROUTINES="+strconv.Itoa(goroutines), "LOCKS_ITERS="+strconv.Itoa(iters), "LOCKS_HOLD_EVERY=50")
			if reports := testutil.Run(t, cmds...); len(reports) != procs {
				t.Fatalf("%d of %d helpers reported", len(reports), procs)
			}
			tf := openTestFile(t, path)
			defer tf.close()
			want := uint64(procs * goroutines * iters)
			if got := tf.scratch[scratchCounter]; got != want || tf.scratch[scratchPRNG] != replay(want) {
				t.Fatalf("counter %d (want %d), PRNG replays %v: exclusion failed", got, want, tf.scratch[scratchPRNG] == replay(want))
			}
			if drawn := tf.arena.w[hAWNCursor]; cfg.AWNNodes == 0 && drawn == 0 {
				t.Fatal("no process drew a node from the table")
			}
		})
	}
}

// TestTicketAWNAttachesOldArena: an arena whose header has no ticket-awn
// sizes (written before ticket-awn existed) attaches, and ticket-awn runs
// on it as a ticket lock.
func TestTicketAWNAttachesOldArena(t *testing.T) {
	n, _ := Config{Slots: 2, Locks: 1, AWNWaiters: -1, AWNNodes: -1}.Words()
	old, _ := Config{Slots: 2, Locks: 1}.Words()
	if n >= old {
		t.Fatalf("an arena without arrays (%d words) should be smaller than one with (%d)", n, old)
	}
	w := make([]uint64, n)
	if err := Format(w, Config{Slots: 2, Locks: 1, AWNWaiters: -1, AWNNodes: -1}); err != nil {
		t.Fatal(err)
	}
	if w[hAWNArrays] != 0 || w[hAWNNodes] != 0 {
		t.Fatal("an arena without arrays must leave the header words zero, as old files have them")
	}
	a, err := Attach(w)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := a.Mutex("ticket-awn", 0)
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock succeeded on a held lock")
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(); err == nil {
		t.Fatal("double unlock not reported")
	}
}

// slowNodeTable makes an arena of one ticket-awn lock whose node table is
// all drawn and pooled idle by a live process other than this one (pid 1),
// but for its last node, given back: a waiter's node get then scans the
// whole table, which opens the windows the tests below need.
func slowNodeTable(t *testing.T) *Arena {
	t.Helper()
	const nodes = 1 << 17
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: nodes}) // arrays of 16 waiters
	atomic.StoreUint64(&a.w[hAWNCursor], nodes)
	for i := uint32(1); i < nodes; i++ {
		atomic.StoreUint64(a.awnNode(i).owner, 1|idleNode)
	}
	atomic.StoreUint64(a.awnNode(nodes).owner, returnedNode)
	return a
}

// TestTicketAWNResetWhilePublishing: a far-back waiter takes a node (slowly)
// while a Reset clears the waiting array, and publishes the node after the
// clear. It must take the entry back: a stale entry would make the
// releaser of the ticket 16 on hand the lock to that node, which nobody
// waits on, while that ticket's waiter waits on egress, and the lock would
// stick for good.
func TestTicketAWNResetWhilePublishing(t *testing.T) {
	a := slowNodeTable(t)
	b := a.lockBody(0)
	atomic.StoreUint64(&b[lDepart], 0) // ticket 0 holds (a process about to die), 1 waits
	atomic.StoreUint64(&b[lArrive], 2)
	m, _ := a.Mutex("ticket-awn", 0)
	done := make(chan error, 1)
	go func() { done <- m.LockTimeout(10 * time.Second) }() // ticket 2: far back, takes a node
	time.Sleep(200 * time.Millisecond)
	if err := a.Reset(0); err != nil { // recovery resets the lock meanwhile
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("LockTimeout across the Reset: %v", err)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	for atomic.LoadUint64(&b[lArrive]) < 40 { // past every array index twice
		if !m.TryLock() {
			t.Fatalf("TryLock of a free lock failed at ingress %d, egress %d", atomic.LoadUint64(&b[lArrive]), int64(atomic.LoadUint64(&b[lDepart])))
		}
		if err := m.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.LockTimeout(time.Second); err != nil {
		t.Fatalf("Lock of a free lock: %v (ingress %d, egress %d)", err, atomic.LoadUint64(&b[lArrive]), int64(atomic.LoadUint64(&b[lDepart])))
	}
	_ = m.Unlock()
}

// TestTicketAWNTimeoutWhileReleaserDecides: a far-back waiter publishes its
// node just as its predecessor becomes the holder, so it waits for the
// releaser's choice between its node and egress; that wait keeps to the
// LockTimeout's deadline (it yielded in a loop that never looked at it,
// for as long as the holder held), and the substitute that takes over the
// abandoned turn passes it on.
func TestTicketAWNTimeoutWhileReleaserDecides(t *testing.T) {
	a := slowNodeTable(t)
	b := a.lockBody(0)
	atomic.StoreUint64(&b[lDepart], 5) // tickets 0..4 served, 5 holds, 6 queued: the next arrival draws 7
	atomic.StoreUint64(&b[lArrive], 7)
	m, _ := a.Mutex("ticket-awn", 0)
	done := make(chan error, 1)
	go func() { done <- m.LockTimeout(50 * time.Millisecond) }()
	time.Sleep(20 * time.Millisecond)
	atomic.StoreUint64(&b[lDepart], 6) // 5 released; 6 now holds, and keeps holding
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("LockTimeout while 6 holds: %v, want ErrTimeout", err)
		}
	case <-time.After(5 * time.Second):
		atomic.StoreUint64(&b[lDepart], 7)
		t.Fatalf("LockTimeout(50ms) still waiting after 5 s; once 6 released it returned %v", <-done)
	}
	atomic.StoreUint64(&b[lDepart], 7) // 6 releases through egress: the substitute holds 7, then releases
	if !testutil.WaitFor(5*time.Second, func() bool { return int64(atomic.LoadUint64(&b[lDepart])) == 8 }) {
		t.Fatalf("the abandoned turn was not passed on: egress %d", int64(atomic.LoadUint64(&b[lDepart])))
	}
}

// TestTicketRestartGrantsNoStaleTicket: a ticket-awn waiter drew ticket 1 and was preempted before it waited. Its
// holder died, ingress was damaged past 2^63, and a Reset restarted the
// tickets (freeTickets). New arrivals take the lock in turn; while one
// holds it, the stale waiter resumes and must not be granted. Were the
// restart at 0, the new arrivals would draw 0 and 1 again, and the stale
// waiter would take the new ticket 1's egress for its turn: two holders.
func TestTicketRestartGrantsNoStaleTicket(t *testing.T) {
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1})
	defer closeWithin(t, a, 5*time.Second)
	m, err := a.Mutex("ticket-awn", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*ticketAWN)
	m.Lock() // ticket 0: its process then dies holding it

	// The stale waiter: LockTimeout's draw, then preempted before l.wait.
	gen := atomic.LoadUint64(l.gen)
	stale := int64(atomic.AddUint64(l.arrive, 1) - 1)
	if stale != 1 {
		t.Fatalf("drew ticket %d, want 1", stale)
	}

	atomic.StoreUint64(l.arrive, 1<<63|5) // damage
	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}

	// New arrivals: ticket 0 comes and goes, ticket 1 holds the lock.
	m.Lock()
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	m.Lock()
	if h := atomic.LoadUint64(l.holder); h != ticketRestart+2 {
		t.Fatalf("holder word %d, want the second restarted ticket + 1 (%d)", h, uint64(ticketRestart+2))
	}

	// The stale waiter resumes.
	w := newWaiter(200 * time.Millisecond)
	var node uint32
	if o := l.wait(stale, gen, &node, &w); o == granted {
		t.Fatalf("the waiter of ticket %d from before the Reset was granted the lock the new ticket %d holds: two holders", stale, stale)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestTicketAWNResetClearSparesNewWaiters: Reset clears the waiting array
// after it has freed the lock, so arrivals of the new generation can come
// in between: ticket I takes the lock, I+1 waits on egress, and I+2, far
// back, publishes its node and waits on it. The clear then erases that
// node, the releaser of I+1 finds no node and hands over through egress
// (+I+2), and the waiter on its node must still see that: it waited on
// the node alone, until its LockTimeout, and a Lock forever, with the
// lock held by nobody.
func TestTicketAWNResetClearSparesNewWaiters(t *testing.T) {
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1}) // arrays of 16 waiters
	defer closeWithin(t, a, 5*time.Second)
	m, err := a.Mutex("ticket-awn", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*ticketAWN)
	m.Lock() // ticket 0: its process then dies holding it

	errB, errC := make(chan error, 1), make(chan error, 1)
	var far int64
	var beforeClear func()
	beforeClear = func() {
		testHookResetBeforeClear.Store(nil)
		ingress, ok := holdAndQueueNext(t, m, l, errB)
		if !ok {
			return
		}
		far = ingress + 2
		go func() { // ticket I+2: far back, waits on its node
			err := m.LockTimeout(2 * time.Second)
			if err == nil {
				err = m.Unlock()
			}
			errC <- err
		}()
		if !testutil.WaitFor(5*time.Second, func() bool {
			nd := atomic.LoadUint32(l.waiters.at(far))
			return nd != 0 && atomic.LoadUint32(l.a.awnNode(nd).sleepers) != 0
		}) {
			t.Error("ticket I+2 did not publish its node and sleep on it")
		}
	}
	testHookResetBeforeClear.Store(&beforeClear)
	defer testHookResetBeforeClear.Store(nil)
	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	if err := m.Unlock(); err != nil { // ticket I releases: I+1 holds, then releases to I+2
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("ticket I+1: %v", err)
	}
	if err := <-errC; err != nil {
		t.Fatalf("ticket %d, whose node the Reset's clear erased after it was published: %v (egress %d)", far, err, l.egress())
	}
}

// holdAndQueueNext, run by a test while a Reset of ticket-awn lock l (m)
// has freed the lock and not yet cleared its array, takes ticket I, the
// one the Reset freed, and has a goroutine draw ticket I+1, which waits on
// egress and then sends the error of its Lock and Unlock to next. It
// returns I, or false once it has reported why not.
func holdAndQueueNext(t *testing.T, m Mutex, l *ticketAWN, next chan<- error) (int64, bool) {
	ingress := int64(atomic.LoadUint64(l.arrive))
	if err := m.LockTimeout(time.Second); err != nil { // ticket I: the lock is free
		t.Errorf("first Lock after the Reset freed the lock: %v", err)
		return 0, false
	}
	go func() { // ticket I+1: next, waits on egress
		err := m.LockTimeout(5 * time.Second)
		if err == nil {
			err = m.Unlock()
		}
		next <- err
	}()
	if !testutil.WaitFor(5*time.Second, func() bool { return int64(atomic.LoadUint64(l.arrive)) == ingress+2 }) {
		t.Error("ticket I+1 not drawn")
		return 0, false
	}
	return ingress, true
}
