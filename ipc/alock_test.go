//go:build linux

package ipc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// Scratch words of the alock tests (after the cohort test's).
const (
	alockReady    = scratchLog + 256 // helper 0 (the home) has opened the lock
	alockStarted  = scratchLog + 257 // helpers past the barrier
	alockStop     = scratchLog + 258 // set by helper 0 when the run is over
	alockRunWho   = scratchLog + 259 // 1 home, 2 remote: the cohort of the current run
	alockRunLen   = scratchLog + 260 // critical sections of that cohort in a row while the other waited
	alockMostHome = scratchLog + 261 // longest such run by the home cohort
	alockMostRem  = scratchLog + 262 // ... by the remote cohort
	alockOpsHome  = scratchLog + 263
	alockOpsRem   = scratchLog + 264
	alockContHome = scratchLog + 265 // home critical sections while the others waited
	alockContRem  = scratchLog + 266 // ... and the reverse
)

// TestALockAcrossProcesses runs a home process and two others, 3
// goroutines each, saturating one alock, for two pairs of budgets. It
// checks exclusion (counter and PRNG replay), that a cohort holds the lock
// for at most 2 x its budget + 1 critical sections in a row once the other
// cohort has queued (its budget after the other's leader yields, plus the
// tenure that leader may have arrived during), and that the split of
// critical sections between the cohorts follows the budgets.
func TestALockAcrossProcesses(t *testing.T) {
	duration := 600 * time.Millisecond
	if testing.Short() {
		duration = 250 * time.Millisecond
	}
	for _, budgets := range [][2]int{{20, 5}, {5, 20}} {
		t.Run(fmt.Sprintf("budgets=%d:%d", budgets[0], budgets[1]), func(t *testing.T) {
			path := createTestFile(t, Config{Locks: 1})
			const procs, goroutines = 3, 3
			reports := testutil.Run(t, testutil.Commands("alock", procs, "LOCKS_PATH="+path, "LOCKS_PROCS="+strconv.Itoa(procs),
				"LOCKS_GOROUTINES="+strconv.Itoa(goroutines), "LOCKS_BUDGETS="+fmt.Sprintf("%d,%d", budgets[0], budgets[1]),
				"LOCKS_DURATION="+duration.String())...)
			if len(reports) != procs {
				t.Fatalf("%d of %d helpers reported", len(reports), procs)
			}
			tf := openTestFile(t, path)
			defer tf.close()
			s := tf.scratch
			var done uint64
			for _, r := range reports {
				n, _ := strconv.ParseUint(strings.TrimPrefix(r[0], "done="), 10, 64)
				done += n
			}
			if got := s[scratchCounter]; got != done || s[scratchPRNG] != replay(done) {
				t.Fatalf("counter %d of %d critical sections, PRNG replays %v: exclusion failed", got, done, s[scratchPRNG] == replay(done))
			}
			t.Logf("critical sections: home %d, others %d (ratio %.2f); while the other cohort waited: home %d, others %d (ratio %.2f, budgets %d:%d); longest runs then: home %d, others %d",
				s[alockOpsHome], s[alockOpsRem], float64(s[alockOpsHome])/float64(s[alockOpsRem]),
				s[alockContHome], s[alockContRem], float64(s[alockContHome])/float64(s[alockContRem]), budgets[0], budgets[1], s[alockMostHome], s[alockMostRem])
			// Budgets govern the critical sections run while the other
			// cohort waits; the rest depend on how busy each side is.
			home, remote := s[alockContHome], s[alockContRem]
			if most, bound := s[alockMostHome], uint64(2*budgets[0]+1); most > bound {
				t.Errorf("the home cohort ran %d critical sections in a row while the others waited; bound 2 x %d + 1", most, budgets[0])
			}
			if most, bound := s[alockMostRem], uint64(2*budgets[1]+1); most > bound {
				t.Errorf("the other processes ran %d critical sections in a row while the home waited; bound 2 x %d + 1", most, budgets[1])
			}
			if min(s[alockMostHome], s[alockMostRem]) == 0 {
				t.Fatal("the cohorts never waited for each other: the test did not test the budgets")
			}
			// The split follows the budgets: the cohort with the larger one
			// gets clearly more (the ideal is the budget ratio, 4).
			if budgets[0] > budgets[1] && float64(home) < 1.5*float64(remote) ||
				budgets[0] < budgets[1] && float64(remote) < 1.5*float64(home) {
				t.Errorf("home %d vs others %d critical sections does not follow budgets %d:%d", home, remote, budgets[0], budgets[1])
			}
		})
	}
}

func helperALock(t *testing.T) {
	tf := openTestFile(t, os.Getenv("LOCKS_PATH"))
	defer tf.close()
	s := tf.scratch
	me := envInt(t, "HELPER_INDEX")
	goroutines, procs := envInt(t, "LOCKS_GOROUTINES"), envInt(t, "LOCKS_PROCS")
	var home, remote int
	if _, err := fmt.Sscanf(os.Getenv("LOCKS_BUDGETS"), "%d,%d", &home, &remote); err != nil {
		t.Fatal(err)
	}
	duration, err := time.ParseDuration(os.Getenv("LOCKS_DURATION"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tf.arena.SetALockBudgets(home, remote); err != nil {
		t.Fatal(err)
	}
	// Helper 0 opens first and so becomes the home.
	if me != 0 {
		for atomic.LoadUint64(&s[alockReady]) == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	mutexes := make([]Mutex, goroutines)
	for i := range mutexes {
		mutexes[i] = tf.mutex(t, "alock", 0)
	}
	isHome := tf.arena.IsALockHome(0)
	if isHome != (me == 0) {
		t.Fatalf("helper %d: home is %v", me, isHome)
	}
	if me == 0 {
		atomic.StoreUint64(&s[alockReady], 1)
	}
	atomic.AddUint64(&s[alockStarted], 1)
	for atomic.LoadUint64(&s[alockStarted]) < uint64(procs) {
		time.Sleep(100 * time.Microsecond)
	}
	body := tf.arena.lockBody(0)
	who, other, ops, most, cont := uint64(2), &body[lRestrict], alockOpsRem, alockMostRem, alockContRem
	if isHome {
		who, other, ops, most, cont = 1, &body[lWord], alockOpsHome, alockMostHome, alockContHome
	}
	var wg sync.WaitGroup
	var done atomic.Uint64
	giveUp := time.Now().Add(duration + 5*time.Second) // if helper 0 never says stop
	for _, m := range mutexes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for atomic.LoadUint64(&s[alockStop]) == 0 && time.Now().Before(giveUp) {
				m.Lock()
				criticalSection(s)
				s[ops]++
				switch {
				case atomic.LoadUint64(other) == 0:
					s[alockRunLen] = 0 // nobody waits on the other side: no bypass
				case s[alockRunWho] == who:
					s[alockRunLen]++
					s[cont]++
				default:
					s[alockRunWho], s[alockRunLen] = who, 1
					s[cont]++
				}
				s[most] = max(s[most], s[alockRunLen])
				if err := m.Unlock(); err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	if me == 0 {
		time.Sleep(duration)
		atomic.StoreUint64(&s[alockStop], 1)
	}
	wg.Wait()
	testutil.Report("done=%d", done.Load())
}

// TestClosedProcessesReturnTheirNodes: every alock acquisition by a process
// other than the home queues on a node of the file's table, and a process
// keeps the nodes it drew for reuse. Those nodes must go back to the table
// when it closes, or after as many short-lived processes as the table has
// nodes, no newcomer could queue on the lock at all. Helper processes here
// come one after another, each taking the lock once, beside a home (this
// process) that holds on to the lock file throughout.
func TestClosedProcessesReturnTheirNodes(t *testing.T) {
	const nodes = 2
	path, home := alockHome(t, nodes)
	for i := range 3 * nodes {
		reports := testutil.Run(t, testutil.Command("alock-once", "LOCKS_PATH="+path))
		if len(reports) != 1 || reports[0][0] != "locked" {
			t.Fatalf("newcomer %d, after %d closed processes with a node table of %d: %v", i, i, nodes, reports)
		}
	}
	if drawn := atomic.LoadUint64(&home.arena.w[hAWNCursor]); drawn == 0 || drawn > nodes {
		t.Fatalf("%d nodes drawn from a table of %d", drawn, nodes)
	}
}

// helperALockOnce takes alock 0 once as a process other than its home,
// runs the checked critical section and holds the lock a little, so that
// helpers running at once queue on nodes. With LOCKS_EXIT=1 it exits
// without closing, as a process that crashes or forgets Close does.
func helperALockOnce(t *testing.T) {
	tf := openTestFile(t, os.Getenv("LOCKS_PATH"))
	m := tf.mutex(t, "alock", 0)
	if tf.arena.IsALockHome(0) {
		t.Fatal("the helper became the home")
	}
	if err := m.LockTimeout(2 * time.Second); err != nil {
		testutil.Report("%v", err)
		return
	}
	criticalSection(tf.scratch)
	for end := time.Now().Add(50 * time.Microsecond); time.Now().Before(end); {
	}
	_ = m.Unlock()
	testutil.Report("locked")
	if os.Getenv("LOCKS_EXIT") == "1" {
		os.Exit(0)
	}
	tf.close()
}

// TestExitedProcessesLeaveTheirNodes: processes that take an alock lock
// and exit without Close leave the nodes they pooled idle under their pid;
// newcomers that find the table drawn out take them. Rounds of as many
// processes at once as the table has nodes, each round after the last is
// gone, so that every round lives on the nodes of the dead; the shared
// counter and PRNG replay check exclusion meanwhile.
func TestExitedProcessesLeaveTheirNodes(t *testing.T) {
	const nodes, rounds = 3, 6
	path, home := alockHome(t, nodes)
	for round := range rounds {
		reports := testutil.Run(t, testutil.Commands("alock-once", nodes, "LOCKS_PATH="+path, "LOCKS_EXIT=1")...)
		if len(reports) != nodes {
			t.Fatalf("round %d: %d of %d helpers reported: %v", round, len(reports), nodes, reports)
		}
		for _, r := range reports {
			if r[0] != "locked" {
				t.Fatalf("round %d, after %d processes exited holding the table's %d nodes: %v", round, round*nodes, nodes, r)
			}
		}
	}
	checkNodeRun(t, home, nodes*rounds, nodes)
}

// alockHome creates a lock file with one lock and a node table of nodes,
// and makes this process the lock's home by taking it once, so that the
// helpers, of the other cohort, queue on nodes of the table.
func alockHome(t *testing.T, nodes int) (string, *testFile) {
	t.Helper()
	path := createTestFile(t, Config{Locks: 1, AWNNodes: nodes})
	home := openTestFile(t, path)
	t.Cleanup(home.close)
	homeLock := home.mutex(t, "alock", 0)
	homeLock.Lock()
	_ = homeLock.Unlock()
	if !home.arena.IsALockHome(0) {
		t.Fatal("the first to open the lock is not its home")
	}
	return path, home
}

// checkNodeRun checks, after a run of alock helpers, that the critical
// sections excluded one another (counter and PRNG replay) and that no more
// nodes were drawn than the table has.
func checkNodeRun(t *testing.T, home *testFile, sections, nodes int) {
	t.Helper()
	s := home.scratch
	if want := uint64(sections); s[scratchCounter] != want || s[scratchPRNG] != replay(want) {
		t.Fatalf("counter %d of %d critical sections, PRNG replays %v: exclusion failed", s[scratchCounter], want, s[scratchPRNG] == replay(want))
	}
	if drawn := atomic.LoadUint64(&home.arena.w[hAWNCursor]); drawn > uint64(nodes) {
		t.Fatalf("%d nodes drawn from a table of %d", drawn, nodes)
	}
}

// TestProcessGone: a live process is not gone, an exited and reaped one is,
// and so is a zombie not yet reaped.
func TestProcessGone(t *testing.T) {
	if processGone(uint64(os.Getpid())) {
		t.Error("this process reads as gone")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a child process to watch die: %v", err)
	}
	pid := uint64(cmd.Process.Pid)
	if !testutil.WaitFor(5*time.Second, func() bool { return processGone(pid) }) {
		t.Error("an exited, unreaped child (a zombie) does not read as gone")
	}
	_ = cmd.Wait()
	if !processGone(pid) {
		t.Error("an exited, reaped child does not read as gone")
	}
	if processGone(0) || processGone(idleNode) {
		t.Error("pid 0 or an out-of-range pid reads as gone")
	}
}

// TestNodeReuseUnderChurn: processes that open the file, take an alock
// lock once and close, over and over and all at once, share a node table
// smaller than their number, so that they queue on nodes others gave back
// a moment before. A node handed to two waiters at once would let two
// holders in: the shared counter and PRNG replay catch that.
func TestNodeReuseUnderChurn(t *testing.T) {
	const procs, rounds, nodes = 4, 200, 2
	path, home := alockHome(t, nodes)
	start := time.Now()
	reports := testutil.Run(t, testutil.Commands("alock-churn", procs, "LOCKS_PATH="+path, "LOCKS_ROUNDS="+strconv.Itoa(rounds))...)
	t.Logf("%d processes x %d rounds on %d nodes in %v", procs, rounds, nodes, time.Since(start))
	if len(reports) != procs {
		t.Fatalf("%d of %d helpers reported: %v", len(reports), procs, reports)
	}
	for _, r := range reports {
		if r[0] != "done" {
			t.Fatalf("helper: %v", r)
		}
	}
	checkNodeRun(t, home, procs*rounds, nodes)
}

// helperALockChurn opens the lock file, takes alock 0 once and closes,
// LOCKS_ROUNDS times.
func helperALockChurn(t *testing.T) {
	for range envInt(t, "LOCKS_ROUNDS") {
		tf := openTestFile(t, os.Getenv("LOCKS_PATH"))
		m := tf.mutex(t, "alock", 0)
		if err := m.LockTimeout(10 * time.Second); err != nil {
			tf.close()
			testutil.Report("%v", err)
			return
		}
		criticalSection(tf.scratch)
		// Hold the lock a little, so that the others queue (on nodes)
		// behind it while processes come and go.
		for end := time.Now().Add(50 * time.Microsecond); time.Now().Before(end); {
		}
		_ = m.Unlock()
		tf.close()
	}
	testutil.Report("done")
}

// TestALockTwoArenasOneProcess: a process that maps one file twice has two
// arenas over the same words. Only the first to open an alock is its home;
// the other locks as the other cohort, and a release through one hands the
// lock to a waiter of the other. (When both were home, each had its own
// descriptor table and their tokens collided in the home tail: the
// release emptied the queue its waiter was in, and the waiter waited for
// good.)
func TestALockTwoArenasOneProcess(t *testing.T) {
	path := createTestFile(t, Config{Locks: 1})
	first, second := openTestFile(t, path), openTestFile(t, path)
	defer first.close()
	defer second.close()
	m1, m2 := first.mutex(t, "alock", 0), second.mutex(t, "alock", 0)
	if !first.arena.IsALockHome(0) || second.arena.IsALockHome(0) {
		t.Fatalf("home: first %v, second %v; want only the first", first.arena.IsALockHome(0), second.arena.IsALockHome(0))
	}
	for round := range 20 {
		holder, waiter := m1, m2
		if round%2 == 1 {
			holder, waiter = m2, m1
		}
		holder.Lock()
		done := make(chan error, 1)
		go func() { done <- waiter.LockTimeout(5 * time.Second) }()
		time.Sleep(time.Millisecond)
		if err := holder.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: the released lock never reached the other arena's waiter: %v", round, err)
		}
		if err := waiter.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestALockResetBeforeEnqueue: were LockTimeout to read the generation,
// then enter the queue, a Reset landing in between would make the
// arrival, with the old generation in hand, the head of the new queue, and
// a waiter that entered behind it would wait until the next Reset.
// Arrivals take the generation with the tail they enter by CAS, so a place
// is always in its own generation's queue. Here a waiter W entered before a Reset whose
// clearing of the tail has not landed yet: W is told to queue again, and
// a newcomer turns W's stale tail into an empty one of its own generation
// instead of linking behind W.
func TestALockResetBeforeEnqueue(t *testing.T) {
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
	a.DeclareALockHome(0, 1) // this process is of the other cohort (tailR)
	l := openALock(a, 0).(*alock)
	w, gen, ok := l.enqueue(a.claim())
	if !ok {
		t.Fatal("enqueue W")
	}
	atomic.AddUint64(l.gen, 1) // a Reset's first step; its stores still to come
	wt := newWaiter(time.Second)
	if o := l.await(w, gen, &wt); o != reset {
		t.Fatalf("W's wait ended %v, want reset", o)
	}
	if got := atomic.LoadUint64(l.tailR); got != tailWord(gen, w.name) {
		t.Fatalf("tailR %#x, want W's place %#x", got, tailWord(gen, w.name))
	}
	m, _ := a.Mutex("alock", 0)
	if err := m.LockTimeout(time.Second); err != nil {
		t.Fatalf("a newcomer behind W's stale place: %v (tailR %#x)", err, atomic.LoadUint64(l.tailR))
	}
	l.abandon(w, gen) // W, late: the tail is the newcomer's, and stays so
	if got := tailName(atomic.LoadUint64(l.tailR)); got == w.name || got == 0 {
		t.Fatalf("tailR names %d after W let go, want the newcomer's node", got)
	}
	if err := m.Unlock(); err != nil {
		t.Fatal(err)
	}
	if !m.TryLock() {
		t.Fatalf("TryLock of the free lock (tailR %#x, tailL %#x)", atomic.LoadUint64(l.tailR), atomic.LoadUint64(l.tailL))
	}
	_ = m.Unlock()
}

// TestALockResetKeepsNewArrivals: waiters that arrive while a Reset runs,
// after its generation moved, are of the new generation, and keep their
// places: a waiter N whose place Reset's stores erased would head a queue
// with its flag down beside the next queue's head, and an arrival granted
// in that window would be voided under its feet, letting in a second
// holder. So a Reset of an alock moves the generation only. And a TryLock that read the empty tail of generation 0 (the zero
// word, which Reset stored) before a Reset must not win after it.
func TestALockResetKeepsNewArrivals(t *testing.T) {
	// The Reset runs in this arena, or in one over the same words that has
	// never opened the lock and names its algorithm (ResetAs), as another
	// process would (before ResetAs, such a Reset cleared the words and
	// made two holders).
	resetters := map[string]func(a *Arena) error{
		"this process": func(a *Arena) error { return a.Reset(0) },
		"another process": func(a *Arena) error {
			other, err := Attach(a.w)
			if err != nil {
				t.Fatal(err)
			}
			return other.ResetAs(0, "alock")
		},
	}
	for who, resetter := range resetters {
		t.Run("waiting, reset by "+who, func(t *testing.T) {
			a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
			a.DeclareALockHome(0, 1)
			m, _ := a.Mutex("alock", 0)
			l := m.(*alock)
			var n queued
			var ngen uint64
			testHookResetBumped = func() {
				var ok bool
				if n, ngen, ok = l.enqueue(a.claim()); !ok {
					t.Error("enqueue N")
				}
			}
			defer func() { testHookResetBumped = nil }()
			if err := resetter(a); err != nil {
				t.Fatal(err)
			}
			if n.budget == nil {
				t.Fatal("the hook never ran")
			}
			w := newWaiter(time.Second)
			if o := l.await(n, ngen, &w); o != granted {
				t.Fatalf("N, the head of the new generation's queue: %v", o)
			}
			atomic.StoreUint64(l.holder, l.episode(n))
			if m.TryLock() {
				t.Fatal("two holders: TryLock won while N holds")
			}
			if err := m.LockTimeout(100 * time.Millisecond); err == nil {
				t.Fatal("two holders: a Lock was granted while N holds")
			}
			if err := m.Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := m.LockTimeout(time.Second); err != nil {
				t.Fatalf("after N: %v", err)
			}
			_ = m.Unlock()
		})
		t.Run("granted, reset by "+who, func(t *testing.T) {
			a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
			a.DeclareALockHome(0, 1)
			m, _ := a.Mutex("alock", 0)
			var lockErr error
			testHookResetBumped = func() { lockErr = m.LockTimeout(time.Second) }
			defer func() { testHookResetBumped = nil }()
			if err := resetter(a); err != nil {
				t.Fatal(err)
			}
			testHookResetBumped = nil
			if lockErr != nil {
				t.Fatal(lockErr)
			}
			if m.TryLock() {
				t.Fatal("two holders: TryLock won while the arrival granted during the Reset holds")
			}
			if err := m.Unlock(); err != nil {
				t.Fatalf("the holder granted during the Reset: %v", err)
			}
		})
	}
	t.Run("trylock at generation 0", func(t *testing.T) {
		a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
		a.DeclareALockHome(0, 1)
		m, _ := a.Mutex("alock", 0)
		testHookBeforeTailCAS = func() {
			testHookBeforeTailCAS = nil
			if err := a.Reset(0); err != nil {
				t.Error(err)
			}
		}
		defer func() { testHookBeforeTailCAS = nil }()
		if m.TryLock() {
			if m.TryLock() {
				t.Fatal("two holders: a TryLock won across a Reset, and a second one beside it")
			}
			t.Fatal("a TryLock won with a place in the generation a Reset voided")
		}
		if !m.TryLock() {
			t.Fatal("TryLock of the free lock after the Reset")
		}
		_ = m.Unlock()
	})
}

// TestALockVoidedQueueHandsNothingOn: the other cohort's queue is A (head,
// arbitrating) and B linked behind it when a Reset voids it; in the new
// generation remote C holds and home H1 arbitrates. A, told to queue
// again, must not hand B the lock's headship: B would arbitrate after the
// Reset, and its victim store would let H1 in beside C. (So abandon hands
// nothing over to whoever is linked behind.)
func TestALockVoidedQueueHandsNothingOn(t *testing.T) {
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
	home := openALock(a, 0).(*alock)
	if !home.isHome {
		t.Fatal("not home")
	}
	rem := a.alockSurrogate(0) // the other cohort's view (tailR, nodes)
	if !home.TryLock() {       // H0 holds, and will "die"
		t.Fatal("trylock")
	}
	qA, gen0, ok := rem.enqueue(a.claim())
	if !ok {
		t.Fatal("enqueue A")
	}
	goAbandon := make(chan struct{})
	aDone := make(chan outcome, 1)
	go func() {
		w := newWaiter(5 * time.Second)
		o := rem.await(qA, gen0, &w)
		if o == reset {
			<-goAbandon // A is descheduled for a moment here
			rem.abandon(qA, gen0)
		}
		aDone <- o
	}()
	if !testutil.WaitFor(time.Second, func() bool { return atomic.LoadUint64(rem.victim) == alockVictimRemote }) {
		t.Fatal("A never arbitrated")
	}
	qB, genB, ok := rem.enqueue(a.claim())
	if !ok || genB != gen0 || atomic.LoadUint64(qA.next) != qB.name {
		t.Fatal("enqueue B")
	}
	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}
	if err := rem.LockTimeout(time.Second); err != nil { // C holds
		t.Fatalf("C: %v", err)
	}
	h1 := make(chan error, 1)
	go func() { h1 <- home.LockTimeout(3 * time.Second) }()
	if !testutil.WaitFor(time.Second, func() bool { return atomic.LoadUint64(rem.victim) == alockVictimHome }) {
		t.Fatal("H1 never arbitrated")
	}
	close(goAbandon)
	if o := <-aDone; o != reset {
		t.Fatalf("A: %v", o)
	}
	wB := newWaiter(5 * time.Second) // B's wait, run now: it is woken by any handover A made
	if o := rem.await(qB, gen0, &wB); o != reset {
		t.Fatalf("B: %v", o)
	}
	select {
	case err := <-h1:
		if err == nil {
			t.Fatalf("two holders: home H1 granted while remote C holds (victim %d)", atomic.LoadUint64(rem.victim))
		}
	case <-time.After(200 * time.Millisecond): // H1 still waits: one holder
	}
	if err := rem.Unlock(); err != nil { // C releases; H1 gets in
		t.Fatal(err)
	}
	if err := <-h1; err != nil {
		t.Fatalf("H1 after C released: %v", err)
	}
	_ = home.Unlock()
}

// TestALockDamagedWordsDoNotPanic: a tail, holder or link word damaged to
// name no descriptor (out of the node table's range, or no home token)
// must not be followed out of bounds, which would kill the process with a
// panic: an arrival heads the queue instead of linking behind nobody, and
// Unlock reports what it cannot end.
func TestALockDamagedWordsDoNotPanic(t *testing.T) {
	for _, home := range []bool{false, true} {
		a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
		if !home {
			a.DeclareALockHome(0, 1) // this process is of the other cohort
		}
		l := openALock(a, 0).(*alock)
		tail, _ := l.tails()
		episodeBit := uint64(0)
		if home {
			episodeBit = alockHomeEpisode
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("home %v: %v", home, r)
				}
			}()
			atomic.StoreUint64(tail, 1<<40)
			if err := l.LockTimeout(time.Second); err != nil {
				t.Fatalf("home %v: lock behind a damaged tail: %v", home, err)
			}
			// A damaged link behind the holder, and a tail that is not it.
			q, _ := l.queuedFor(atomic.LoadUint64(l.holder) &^ alockHomeEpisode)
			atomic.StoreUint64(q.next, 1<<40)
			atomic.StoreUint64(tail, 1<<41)
			if err := l.Unlock(); err != nil {
				t.Fatalf("home %v: unlock with a damaged link: %v", home, err)
			}
			atomic.StoreUint64(tail, 0)
			if err := l.LockTimeout(time.Second); err != nil {
				t.Fatalf("home %v: lock after the damage: %v", home, err)
			}
			h := atomic.LoadUint64(l.holder)
			atomic.StoreUint64(l.holder, 1<<40|episodeBit)
			if err := l.Unlock(); !errors.Is(err, ErrNotLocked) {
				t.Fatalf("home %v: unlock of a damaged holder word: %v, want ErrNotLocked", home, err)
			}
			atomic.StoreUint64(l.holder, h)
			if err := l.Unlock(); err != nil {
				t.Fatalf("home %v: unlock: %v", home, err)
			}
		}()
	}
}

// TestNodeScanAsksEachOwnerOnce: with every node of the table drawn, get
// scans it for a node a dead process left idle. Asking the system about
// every idle node's owner, a /proc read each, would make a scan of a full
// table take longer than any lock timeout. Idle nodes of a live owner must
// cost one question per scan.
func TestNodeScanAsksEachOwnerOnce(t *testing.T) {
	const nodes = 4096
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: nodes})
	for range nodes {
		if a.awnNodes.get() == 0 {
			t.Fatal("the table ran out early")
		}
	}
	live := uint64(os.Getppid()) // alive for the whole test, and not us
	for n := uint32(1); n <= nodes; n++ {
		atomic.StoreUint64(a.awnNode(n).owner, live|idleNode)
	}
	atomic.StoreUint64(a.awnNode(nodes).owner, returnedNode)
	asked := 0
	testHookAskedGone = func(uint64) { asked++ }
	defer func() { testHookAskedGone = nil }()
	a.awnNodes.mu.Lock()
	a.awnNodes.free = nil // nothing pooled in this process
	a.awnNodes.mu.Unlock()
	if n := a.awnNodes.get(); n != nodes {
		t.Fatalf("get: node %d, want the returned node %d", n, nodes)
	}
	if asked != 1 {
		t.Fatalf("the scan asked about an owner %d times, want once for the one live owner", asked)
	}
}

// TestResetAfterTheAlgorithmChanged: a lock run as an alock and then opened
// with another algorithm is reset as that algorithm's lock, from any
// process. (An alock's words do not read as free to the others: the first
// Reset makes the lock theirs; the second frees it from a holder that died,
// in a process of its own.)
func TestResetAfterTheAlgorithmChanged(t *testing.T) {
	for _, alg := range Algorithms() {
		if alg.Name == "alock" {
			continue
		}
		t.Run(alg.Name, func(t *testing.T) {
			a := newMemoryArena(t, Config{Slots: 4, Locks: 1, AWNNodes: 64})
			al, err := a.Mutex("alock", 0)
			if err != nil {
				t.Fatal(err)
			}
			if !al.TryLock() {
				t.Fatal("alock TryLock of the free lock")
			}
			_ = al.Unlock()
			m, err := a.Mutex(alg.Name, 0)
			if err != nil {
				t.Fatal(err)
			}
			other, err := Attach(a.w) // the resetting process
			if err != nil {
				t.Fatal(err)
			}
			dead, err := Attach(a.w) // the process that dies holding the lock
			if err != nil {
				t.Fatal(err)
			}
			dm, err := dead.Mutex(alg.Name, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Reset(0); err != nil {
				t.Fatal(err)
			}
			if err := dm.LockTimeout(time.Second); err != nil {
				t.Fatalf("after the first Reset: %v", err)
			}
			if err := other.Reset(0); err != nil {
				t.Fatal(err)
			}
			if err := m.LockTimeout(time.Second); err != nil {
				t.Fatalf("after the Reset that frees the dead holder's lock: %v", err)
			}
			_ = m.Unlock()
		})
	}
}
