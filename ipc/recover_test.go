//go:build linux

package ipc

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// Kill tests: journal slots and flags live in the test file's scratch words.
const (
	killSlots      = 8
	killJournal    = 3072 // killSlots journals of killJournalLen words
	killJournalLen = 16 * journalEntryWords
	killHeld       = 3000 // + slot: the helper holds the lock
	killGot        = 3016 // + slot: the helper got the lock after waiting
	killGo         = 3032 // the dying unlocker may unlock
)

// journaledAlgorithms are the algorithms Recover covers.
var journaledAlgorithms = []string{"hapax-cr", "hapax", "hapax-vw", "cohort", "cohort-cr", "tidex", "ttas", "ticket-awn", "alock"}

func (tf *testFile) journals() [][]uint64 {
	all := make([][]uint64, killSlots)
	for i := range all {
		off := killJournal + i*killJournalLen
		all[i] = tf.scratch[off : off+killJournalLen : off+killJournalLen]
	}
	return all
}

// killHelper is a helper process in a journal slot.
type killHelper struct {
	slot int
	cmd  *exec.Cmd
	done chan struct{}
}

func startKillHelper(t *testing.T, role, path, algo string, slot int) *killHelper {
	t.Helper()
	cmd := testutil.Command(role, "LOCKS_PATH="+path, "LOCKS_ALGO="+algo, "KILL_SLOT="+strconv.Itoa(slot))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &killHelper{slot: slot, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() { h.kill(t) })
	return h
}

func (h *killHelper) dead() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

func (h *killHelper) kill(t *testing.T) {
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("helper in slot %d did not die", h.slot)
	}
}

// liveness answers for Recover: slot 0 is the test process.
func liveness(helpers ...*killHelper) func(int) bool {
	return func(slot int) bool {
		if slot == 0 {
			return true
		}
		for _, h := range helpers {
			if h.slot == slot {
				return !h.dead()
			}
		}
		return false
	}
}

func openJournaled(t *testing.T, path string, slot int) *testFile {
	t.Helper()
	tf := openTestFile(t, path)
	if err := tf.arena.SetJournals(tf.journals(), slot); err != nil {
		t.Fatal(err)
	}
	return tf
}

// queuedIn reports whether journal slot has an episode on lock 0 past its
// arrival (queued in the lock, or holding a passive ticket or a seat).
func queuedIn(tf *testFile, slot int) bool {
	j := tf.journals()[slot]
	for i := 0; i < len(j); i += journalEntryWords {
		switch atomic.LoadUint64(&j[i]) & 0x7f {
		case jQueued, jTicket, jSeated:
			return true
		}
	}
	return false
}

func recoverUntil(t *testing.T, tf *testFile, algo string, live func(int) bool, cond func() bool) Recovery {
	t.Helper()
	var total Recovery
	ok := testutil.WaitFor(5*time.Second, func() bool {
		r, err := tf.arena.Recover(algo, live)
		if err != nil {
			t.Fatal(err)
		}
		total.Adopted += r.Adopted
		total.Seats += r.Seats
		total.Owners += r.Owners
		total.Cleared += r.Cleared
		total.Resets += r.Resets
		return testutil.WaitFor(50*time.Millisecond, cond)
	})
	if !ok {
		t.Fatalf("%s: the others did not get going after recovery (%+v)", algo, total)
	}
	return total
}

// forJournaled runs scene for every journaled algorithm on a fresh file
// whose lock 0 the test process (journal slot 0) holds a handle to.
func forJournaled(t *testing.T, scene func(t *testing.T, algo, path string, tf *testFile, m Mutex)) {
	for _, algo := range journaledAlgorithms {
		t.Run(algo, func(t *testing.T) {
			path := createTestFile(t, Config{Locks: 1})
			tf := openJournaled(t, path, 0)
			defer tf.close()
			scene(t, algo, path, tf, tf.mutex(t, algo, 0))
		})
	}
}

func waitHeld(t *testing.T, tf *testFile, slot int) {
	t.Helper()
	if !testutil.WaitFor(10*time.Second, func() bool { return atomic.LoadUint64(&tf.scratch[killHeld+slot]) == 1 }) {
		t.Fatalf("helper %d never held the lock", slot)
	}
}

// waitQueued waits until helper slot is in the queue (TTAS keeps none).
func waitQueued(t *testing.T, tf *testFile, algo string, slot int) {
	t.Helper()
	if algo != "ttas" && !testutil.WaitFor(10*time.Second, func() bool { return queuedIn(tf, slot) }) {
		t.Fatalf("helper %d never queued", slot)
	}
}

func got(tf *testFile, slot int) func() bool {
	return func() bool { return atomic.LoadUint64(&tf.scratch[killGot+slot]) == 1 }
}

// lockAfterRecovery checks the survivor gets the lock too.
func lockAfterRecovery(t *testing.T, m Mutex, r Recovery) {
	t.Helper()
	if err := m.LockTimeout(5 * time.Second); err != nil {
		t.Fatalf("lock after recovery: %v", err)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
}

// TestRecoverKilledOwner: a process killed while it holds the lock; the
// survivor times out, recovers, and gets the lock.
func TestRecoverKilledOwner(t *testing.T) {
	forJournaled(t, func(t *testing.T, algo, path string, tf *testFile, m Mutex) {
		h := startKillHelper(t, "kill-hold", path, algo, 1)
		waitHeld(t, tf, 1)
		h.kill(t)
		if err := m.LockTimeout(100 * time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("the dead holder's lock was granted before recovery: %v", err)
		}
		// The timed-out wait above left a turn in the queue; once recovery
		// releases the dead holder, that turn passes and the lock is free.
		r := recoverUntil(t, tf, algo, liveness(h), func() bool { return m.TryLock() && m.Unlock() == nil })
		lockAfterRecovery(t, m, r)
	})
}

// TestRecoverKilledWaiter: a process killed while it waits in the middle of
// the queue; the one behind it gets the lock once the survivors recover.
func TestRecoverKilledWaiter(t *testing.T) {
	forJournaled(t, func(t *testing.T, algo, path string, tf *testFile, m Mutex) {
		m.Lock()
		mid := startKillHelper(t, "kill-wait", path, algo, 1)
		waitQueued(t, tf, algo, 1)
		behind := startKillHelper(t, "kill-wait", path, algo, 2)
		waitQueued(t, tf, algo, 2)
		time.Sleep(20 * time.Millisecond) // let both settle into their waits
		mid.kill(t)
		if algo == "hapax" || algo == "hapax-vw" {
			// As if this owner had waited: its release then hands over
			// through a registered successor's slot alone, leaving Depart
			// as it is, and the surrogate must know the dead waiter had
			// registered.
			atomic.StoreUint64(&tf.arena.lockBody(0)[lWaited], 1)
		}
		if err := m.Unlock(); err != nil {
			t.Fatal(err)
		}
		if slices.Contains([]string{"hapax", "hapax-vw", "tidex", "cohort", "ticket-awn"}, algo) {
			// FIFO: the dead waiter's turn blocks the queue until recovery.
			if testutil.WaitFor(200*time.Millisecond, got(tf, 2)) {
				t.Fatal("the waiter behind the dead one got the lock without recovery: the test cannot tell")
			}
		}
		lockAfterRecovery(t, m, recoverUntil(t, tf, algo, liveness(mid, behind), got(tf, 2)))
	})
}

// TestRecoverKilledUnlocker: a process killed between the two stores of its
// release; the waiter behind it gets the lock.
func TestRecoverKilledUnlocker(t *testing.T) {
	forJournaled(t, func(t *testing.T, algo, path string, tf *testFile, m Mutex) {
		// For ticket-awn the one behind must arrive two tickets back, so
		// that it waits on its node: the dying release then chooses the
		// node handover, whose two stores are egress and the node's flag.
		nodeHandover := algo == "ticket-awn"
		if nodeHandover {
			m.Lock()
		}
		dying := startKillHelper(t, "kill-unlock", path, algo, 1)
		if nodeHandover {
			waitQueued(t, tf, algo, 1)
		} else {
			waitHeld(t, tf, 1)
		}
		behind := startKillHelper(t, "kill-wait", path, algo, 2)
		waitQueued(t, tf, algo, 2)
		if nodeHandover {
			if !testutil.WaitFor(5*time.Second, func() bool { return atomic.LoadUint32(tf.arena.awnArray(0).at(2)) != 0 }) {
				t.Fatal("the waiter behind published no node: the test would not cover the node handover")
			}
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
			waitHeld(t, tf, 1)
		}
		atomic.StoreUint64(&tf.scratch[killGo], 1)
		select {
		case <-dying.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the unlocker did not die in its release")
		}
		lockAfterRecovery(t, m, recoverUntil(t, tf, algo, liveness(dying, behind), got(tf, 2)))
	})
}

// TestRecoverDeadALockHome: the alock's home process (its cohort's queue
// lives in that process's memory) dies holding the lock; another process,
// of the other cohort, gets it after recovery.
func TestRecoverDeadALockHome(t *testing.T) {
	path := createTestFile(t, Config{Locks: 1})
	tf := openJournaled(t, path, 0)
	defer tf.close()
	home := startKillHelper(t, "kill-hold", path, "alock", 1)
	waitHeld(t, tf, 1)
	m := tf.mutex(t, "alock", 0) // opened after the helper: not the home
	if tf.arena.IsALockHome(0) {
		t.Fatal("the test process became the home: the test would not cover a dead home")
	}
	home.kill(t)
	if err := m.LockTimeout(100 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("the dead home's lock was granted before recovery: %v", err)
	}
	r := recoverUntil(t, tf, "alock", liveness(home), func() bool { return m.TryLock() && m.Unlock() == nil })
	lockAfterRecovery(t, m, r)
}

func helperKill(t *testing.T) {
	slot, _ := strconv.Atoi(os.Getenv("KILL_SLOT"))
	tf := openJournaled(t, os.Getenv("LOCKS_PATH"), slot)
	m := tf.mutex(t, os.Getenv("LOCKS_ALGO"), 0)
	switch testutil.Role() {
	case "kill-hold":
		m.Lock()
		atomic.StoreUint64(&tf.scratch[killHeld+slot], 1)
	case "kill-wait":
		m.Lock()
		criticalSection(tf.scratch)
		atomic.StoreUint64(&tf.scratch[killGot+slot], 1)
		m.Unlock()
	case "kill-unlock":
		m.Lock()
		atomic.StoreUint64(&tf.scratch[killHeld+slot], 1)
		for atomic.LoadUint64(&tf.scratch[killGo]) == 0 {
			time.Sleep(time.Millisecond)
		}
		testHookBetweenStores = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		m.Unlock()
		t.Fatal("still alive after the release")
	case "kill-unfindable":
		// Stop holding a node that no recovery step can find yet; the
		// node's number goes to the test.
		testHookUnfindable = func(n uint32) {
			atomic.StoreUint64(&tf.scratch[killHeld+slot], uint64(n))
			time.Sleep(time.Hour)
		}
		m.Lock()
	}
	time.Sleep(time.Hour) // the test kills it (select{} would end in Go's deadlock report)
}

// TestUnfindableNodesOfKilledWaitersGoBack: a ticket-awn or alock waiter
// SIGKILLed after drawing its node from the table and before making it
// findable (in the lock's array, in its journal entry) leaves the node in
// use under a dead pid, named nowhere. Recover's sweep gives it back:
// before the sweep, no recovery step ever did, and each such death cost
// the table a node for good.
func TestUnfindableNodesOfKilledWaitersGoBack(t *testing.T) {
	for _, algo := range []string{"ticket-awn", "alock"} {
		t.Run(algo, func(t *testing.T) {
			path := createTestFile(t, Config{Locks: 1, AWNNodes: 4})
			tf := openJournaled(t, path, 0)
			defer tf.close()
			m := tf.mutex(t, algo, 0) // for alock: this process is the home, the helpers queue on nodes
			m.Lock()
			var all []*killHelper
			if algo == "ticket-awn" {
				// The next in line waits on egress; only those behind it draw nodes.
				all = append(all, startKillHelper(t, "kill-wait", path, algo, 1))
				waitQueued(t, tf, algo, 1)
			}
			h := startKillHelper(t, "kill-unfindable", path, algo, len(all)+1)
			all = append(all, h)
			var node uint64
			if !testutil.WaitFor(10*time.Second, func() bool {
				node = atomic.LoadUint64(&tf.scratch[killHeld+h.slot])
				return node != 0
			}) {
				t.Fatal("the helper never drew a node")
			}
			if owner := atomic.LoadUint64(tf.arena.awnNode(uint32(node)).owner); owner != uint64(h.cmd.Process.Pid) {
				t.Fatalf("node %d owner %#x, want the helper's pid %d", node, owner, h.cmd.Process.Pid)
			}
			if nodeFindable(tf, algo, uint64(h.cmd.Process.Pid), h.slot) {
				t.Fatal("the helper's node is findable already: the test cannot tell")
			}
			h.kill(t)
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
			r := recoverUntil(t, tf, algo, liveness(all...), func() bool {
				return deadNodes(tf) == 0 && m.TryLock() && m.Unlock() == nil
			})
			if owner := atomic.LoadUint64(tf.arena.awnNode(uint32(node)).owner); owner != returnedNode {
				t.Fatalf("node %d owner %#x after recovery, want it given back (%+v)", node, owner, r)
			}
		})
	}
}

// TestKilledWaitersReturnTheirNodes: ticket-awn and alock waiters that
// queue on nodes of the table and are SIGKILLed while they wait leave
// those nodes in use under a dead pid. Once recovery has taken their
// turns, the nodes go back to the table, and the next round of waiters
// queues on them: with a table of two nodes, an alock waiter of the second
// round would otherwise find none (ticket-awn ones would fall back to
// waiting on egress, so the owners are checked as well).
func TestKilledWaitersReturnTheirNodes(t *testing.T) {
	for _, algo := range []string{"ticket-awn", "alock"} {
		t.Run(algo, func(t *testing.T) {
			const nodes = 2
			path := createTestFile(t, Config{Locks: 1, AWNNodes: nodes})
			tf := openJournaled(t, path, 0)
			defer tf.close()
			m := tf.mutex(t, algo, 0) // for alock: this process is the home, the helpers queue on nodes
			var all []*killHelper
			start := func() *killHelper {
				h := startKillHelper(t, "kill-wait", path, algo, len(all)+1)
				all = append(all, h)
				return h
			}
			for round := range 2 {
				m.Lock()
				if algo == "ticket-awn" {
					// The next in line waits on egress; those behind it on nodes.
					waitQueued(t, tf, algo, start().slot)
				}
				var onNodes []*killHelper
				for range nodes {
					h := start()
					// Where recovery can find its node, not merely holding
					// one: this test is about the steps that give back
					// findable nodes. A waiter killed between drawing its
					// node and making it findable is the sweep's case
					// (TestUnfindableNodesOfKilledWaitersGoBack); on a slow
					// or busy machine a helper can be killed there, so a
					// wait for the node alone is not enough.
					if !testutil.WaitFor(10*time.Second, func() bool {
						return nodesOf(tf, uint64(h.cmd.Process.Pid)) == 1 && nodeFindable(tf, algo, uint64(h.cmd.Process.Pid), h.slot)
					}) {
						t.Fatalf("round %d: helper %d never queued on a node", round, h.slot)
					}
					onNodes = append(onNodes, h)
				}
				for _, h := range onNodes {
					h.kill(t)
				}
				if err := m.Unlock(); err != nil {
					t.Fatal(err)
				}
				recoverUntil(t, tf, algo, liveness(all...), func() bool {
					return deadNodes(tf) == 0 && m.TryLock() && m.Unlock() == nil
				})
			}
		})
	}
}

// nodeFindable reports whether recovery can find the node of process pid's
// waiter (journal slot slot) on lock 0: for alock its journal entry, queued,
// names the node; for ticket-awn the node is published in the lock's
// waiting array.
func nodeFindable(tf *testFile, algo string, pid uint64, slot int) bool {
	if algo == "alock" {
		return queuedIn(tf, slot)
	}
	waiters := tf.arena.awnArray(0)
	for t := range waiters.n {
		if nd := atomic.LoadUint32(waiters.at(t)); nd != 0 && atomic.LoadUint64(tf.arena.awnNode(nd).owner) == pid {
			return true
		}
	}
	return false
}

// countNodes counts the nodes of the table whose owner word satisfies is.
func countNodes(tf *testFile, is func(owner uint64) bool) int {
	n := 0
	for node := uint32(1); node <= uint32(tf.arena.cfg.AWNNodes); node++ {
		if is(atomic.LoadUint64(tf.arena.awnNode(node).owner)) {
			n++
		}
	}
	return n
}

// nodesOf counts the nodes of the table in use by process pid.
func nodesOf(tf *testFile, pid uint64) int {
	return countNodes(tf, func(owner uint64) bool { return owner == pid })
}

// deadNodes counts the nodes of the table in use by processes that are gone.
func deadNodes(tf *testFile) int { return countNodes(tf, inUseByGone) }
