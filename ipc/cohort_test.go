//go:build linux

package ipc

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// Scratch words of the cohort bypass test, per process i: queued[i] is 1
// while i's representative is past the global lock's doorway (its Arrive
// swap); bypass[i] counts other processes' critical sections since; most[i]
// is the largest such count seen.
const (
	cohortQueued = scratchLog
	cohortBypass = scratchLog + 64
	cohortMost   = scratchLog + 128
	cohortReady  = scratchLog + 192 // helpers started: they begin together
)

// TestCohortBypassAcrossProcesses: with a FIFO global lock, a process whose
// representative has queued waits for at most (P-1) x passLimit critical
// sections of other processes, and passing within a process does happen.
func TestCohortBypassAcrossProcesses(t *testing.T) {
	const procs, goroutines = 3, 4
	iters := 3000
	if testing.Short() {
		// Far fewer run so briefly that the processes may not overlap
		// at all (a largest bypass of 0).
		iters = 2000
	}
	bound := uint64((procs - 1) * DefaultPassLimit)
	// A run where the processes happen not to overlap (a loaded machine can
	// run each one's share in turn) tests nothing; it is run again, up to 5
	// times. A bound exceeded fails at once.
	for attempt := 1; ; attempt++ {
		worst := cohortBypassRun(t, procs, goroutines, iters)
		t.Logf("attempt %d: largest bypass %d, bound %d", attempt, worst, bound)
		if worst > bound {
			t.Fatalf("a queued process was bypassed by %d critical sections; bound (P-1) x limit = %d", worst, bound)
		}
		if worst >= DefaultPassLimit {
			return
		}
		if attempt == 5 {
			t.Fatalf("largest bypass %d in %d runs: processes never waited a whole tenure, the test did not test the bound", worst, attempt)
		}
	}
}

// cohortBypassRun runs the helpers once and returns the largest bypass seen.
func cohortBypassRun(t *testing.T, procs, goroutines, iters int) uint64 {
	path := createTestFile(t, Config{Locks: 1})
	reports := testutil.Run(t, testutil.Commands("cohort-bypass", procs, "LOCKS_PATH="+path, "LOCKS_PROCS="+strconv.Itoa(procs),
		"LOCKS_GOROUTINES="+strconv.Itoa(goroutines), "LOCKS_ITERS="+strconv.Itoa(iters))...)
	if len(reports) != procs {
		t.Fatalf("%d of %d helpers reported", len(reports), procs)
	}
	t.Logf("helpers: %v", reports)
	tf := openTestFile(t, path)
	defer tf.close()
	want := uint64(procs * goroutines * iters)
	if got := tf.scratch[scratchCounter]; got != want || tf.scratch[scratchPRNG] != replay(want) {
		t.Fatalf("counter %d of %d, or PRNG off: exclusion failed", got, want)
	}
	var worst uint64
	for i := range procs {
		worst = max(worst, tf.scratch[cohortMost+i])
	}
	return worst
}

func helperCohortBypass(t *testing.T) {
	tf := openTestFile(t, os.Getenv("LOCKS_PATH"))
	defer tf.close()
	me := envInt(t, "HELPER_INDEX")
	goroutines, iters := envInt(t, "LOCKS_GOROUTINES"), envInt(t, "LOCKS_ITERS")
	s := tf.scratch
	atomic.AddUint64(&s[cohortReady], 1)
	for atomic.LoadUint64(&s[cohortReady]) < uint64(envInt(t, "LOCKS_PROCS")) {
		time.Sleep(100 * time.Microsecond)
	}
	var wg sync.WaitGroup
	var rec *cohortRecord
	for range goroutines {
		m := tf.mutex(t, "cohort", 0).(*cohort)
		rec = m.rec
		m.global.(*hapax).arrived = func() { atomic.StoreUint64(&s[cohortQueued+me], 1) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iters {
				m.Lock()
				// Our representative holds the lock: we are not queued.
				s[cohortMost+me] = max(s[cohortMost+me], s[cohortBypass+me])
				s[cohortBypass+me] = 0
				atomic.StoreUint64(&s[cohortQueued+me], 0)
				for j := range 64 {
					if j != me && atomic.LoadUint64(&s[cohortQueued+j]) == 1 {
						s[cohortBypass+j]++
					}
				}
				criticalSection(s)
				// Give this process's other goroutines a moment to queue
				// locally: on a loaded machine a process can otherwise run
				// its whole share in one time slice, alone.
				for k := 0; k < 2 && m.rec.waiting.Load() == 0; k++ {
					runtime.Gosched()
				}
				if err := m.Unlock(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	testutil.Report("global takes %d, local passes %d", rec.globalTakes.Load(), rec.localPasses.Load())
}

// TestCohortPassesLocally: with several goroutines of one process on a
// lock, the global lock is handed between them up to the pass limit. All of
// them run until one stop, so that no goroutine is left alone at the end.
func TestCohortPassesLocally(t *testing.T) {
	tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
	defer tf.close()
	var wg sync.WaitGroup
	var stop atomic.Bool
	rec := tf.mutex(t, "cohort", 0).(*cohort).rec
	for range 8 {
		m := tf.mutex(t, "cohort", 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				m.Lock()
				criticalSection(tf.scratch)
				// Saturate: unlock only once another goroutine waits.
				for end := time.Now().Add(time.Millisecond); rec.waiting.Load() == 0 && time.Now().Before(end); {
					runtime.Gosched()
				}
				m.Unlock()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	takes, passes := rec.globalTakes.Load(), rec.localPasses.Load()
	t.Logf("global takes %d, local passes %d", takes, passes)
	if passes < takes*(DefaultPassLimit-1)/2 {
		t.Fatalf("local passes %d for %d global takes: want at least (limit-1)/2 per take", passes, takes)
	}
	if limit := int64(DefaultPassLimit - 1); passes > takes*limit {
		t.Fatalf("local passes %d for %d global takes: more than limit-1 per tenure", passes, takes)
	}
}

// TestCohortTryLockDoesNotStrand is ck_cohort's trylock hazard, inverted: a
// TryLock that fails against its own process's holder must not make that
// holder's unlock keep the global lock for a process with nobody left in it.
func TestCohortTryLockDoesNotStrand(t *testing.T) {
	path := createTestFile(t, Config{Locks: 1})
	a, b := openTestFile(t, path), openTestFile(t, path) // two "processes"
	defer a.close()
	defer b.close()
	holder, trier := a.mutex(t, "cohort", 0), a.mutex(t, "cohort", 0)
	holder.Lock()
	if trier.TryLock() {
		t.Fatal("TryLock succeeded while its process holds the lock")
	}
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := b.mutex(t, "cohort", 0).LockTimeout(time.Second); err != nil {
		t.Fatalf("another process cannot get the lock after a failed TryLock: %v", err)
	}
	// And a LockTimeout that gives up while the holder keeps the global
	// lock for it must pass the lock on, not strand it.
	other := b.mutex(t, "cohort", 0)
	other.Unlock()
	holder.Lock()
	if err := trier.LockTimeout(5 * time.Millisecond); err != ErrTimeout {
		t.Fatalf("LockTimeout against a holder: %v", err)
	}
	holder.Unlock()
	if err := other.LockTimeout(time.Second); err != nil {
		t.Fatalf("lock stranded by an abandoned LockTimeout: %v", err)
	}
	other.Unlock()
}

// TestTryLockAndLeave, for every algorithm: processes mix TryLock, Lock
// and short LockTimeouts from many goroutines and exit; the parent, which
// kept using the lock meanwhile, then still gets it: nothing they did
// strands it (for cohort locks, ck_cohort's trylock hazard).
func TestTryLockAndLeave(t *testing.T) {
	for _, algo := range allAlgorithms {
		t.Run(algo, func(t *testing.T) { testTryLockAndLeave(t, algo) })
	}
}

func testTryLockAndLeave(t *testing.T, algo string) {
	path := createTestFile(t, Config{Locks: 1})
	tf := openTestFile(t, path)
	defer tf.close()
	m := tf.mutex(t, algo, 0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // B's own traffic while A runs
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m.LockTimeout(100*time.Millisecond) == nil {
				criticalSection(tf.scratch)
				m.Unlock()
			}
		}
	}()
	testutil.Run(t, testutil.Commands("trylock-and-leave", 2, "LOCKS_PATH="+path, "LOCKS_ALGO="+algo)...)
	close(stop)
	<-done
	if err := m.LockTimeout(2 * time.Second); err != nil {
		t.Fatalf("the lock is stranded after the other processes left: %v", err)
	}
	m.Unlock()
	if n := tf.scratch[scratchCounter]; tf.scratch[scratchPRNG] != replay(n) {
		t.Fatal("exclusion failed")
	}
}

func helperTryLockAndLeave(t *testing.T) {
	tf := openTestFile(t, os.Getenv("LOCKS_PATH"))
	defer tf.close()
	var wg sync.WaitGroup
	var ops atomic.Int64
	end := time.Now().Add(300 * time.Millisecond)
	for g := range 6 {
		m := tf.mutex(t, os.Getenv("LOCKS_ALGO"), 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				var ok bool
				switch (g + i) % 3 {
				case 0:
					ok = m.TryLock()
				case 1:
					ok = m.LockTimeout(time.Duration(i%50)*time.Microsecond) == nil
				default:
					m.Lock()
					ok = true
				}
				if ok {
					criticalSection(tf.scratch)
					m.Unlock()
					ops.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	testutil.Report("ops %d", ops.Load())
}

// TestCohortCloseWithHeldLock: a LockTimeout that gave up leaves a helper
// waiting for the process-local lock. Close must not wait for it, that is
// for the holder to unlock, forever if the holder never does (a map closed
// while it held the lock). Close returns, and a helper that gets the
// local lock after Close leaves the shared words alone: here they are
// unmapped, and touching them would kill the test.
func TestCohortCloseWithHeldLock(t *testing.T) {
	for _, algo := range []string{"cohort", "cohort-cr"} {
		t.Run(algo, func(t *testing.T) {
			tf := openTestFile(t, createTestFile(t, Config{Locks: 1}))
			holder, waiter := tf.mutex(t, algo, 0), tf.mutex(t, algo, 0)
			rec := holder.(*cohort).rec
			holder.Lock()
			if err := waiter.LockTimeout(5 * time.Millisecond); err != ErrTimeout {
				t.Fatalf("LockTimeout against a holder: %v", err)
			}
			closed := make(chan struct{})
			go func() { tf.arena.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("Close waits for the holder")
			}
			if err := tf.region.Unmap(); err != nil {
				t.Fatal(err)
			}
			// Not something a map does after Close (its Unlock answers
			// ErrClosed): it hands the local lock to the helper, with the
			// global lock kept for it.
			if err := holder.Unlock(); err != nil {
				t.Fatal(err)
			}
			// The helper counts itself out of waiting once it has the local
			// lock; only then can TryLock not barge in before it.
			for end := time.Now().Add(5 * time.Second); rec.waiting.Load() != 0 || !rec.local.TryLock(); {
				if time.Now().After(end) {
					t.Fatal("the helper never released the local lock")
				}
				time.Sleep(time.Millisecond)
			}
			tf.file.Close()
		})
	}
}

// TestCohortCloseRightAfterUnlock: an Unlock that keeps the global lock for
// a helper left by an abandoned LockTimeout, and Close at once, before the
// helper has run: Close must let the helper pass the global lock on, or
// another process waits for it until recovery.
func TestCohortCloseRightAfterUnlock(t *testing.T) {
	for _, algo := range []string{"cohort", "cohort-cr"} {
		t.Run(algo, func(t *testing.T) {
			path := createTestFile(t, Config{Locks: 1})
			a, b := openTestFile(t, path), openTestFile(t, path) // two "processes"
			defer b.close()
			holder, waiter := a.mutex(t, algo, 0), a.mutex(t, algo, 0)
			holder.Lock()
			if err := waiter.LockTimeout(5 * time.Millisecond); err != ErrTimeout {
				t.Fatalf("LockTimeout against a holder: %v", err)
			}
			if err := holder.Unlock(); err != nil { // kept for the helper, which waits
				t.Fatal(err)
			}
			a.close()
			if err := b.mutex(t, algo, 0).LockTimeout(time.Second); err != nil {
				t.Fatalf("the other process cannot get the lock after Close: %v", err)
			}
		})
	}
}
