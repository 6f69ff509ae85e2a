package rwulock

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldBy sums what the ledgers account for.
func heldBy(ledgers ...*uint64) uint64 {
	var sum uint64
	for _, p := range ledgers {
		h, settled := LedgerHolds(atomic.LoadUint64(p))
		if !settled {
			panic("unsettled ledger in a quiet test")
		}
		sum += h
	}
	return sum
}

// TestLedgerFollowsEveryProcedure runs every procedure of the spec through
// two handles with their own ledgers and checks after each step that the
// word is exactly what the two ledgers account for.
func TestLedgerFollowsEveryProcedure(t *testing.T) {
	word, sleepers := new(uint64), new(uint32)
	a, b := AtWithSleepers(word, sleepers), AtWithSleepers(word, sleepers)
	la, lb := new(uint64), new(uint64)
	a.SetLedger(la)
	b.SetLedger(lb)
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := atomic.LoadUint64(word), heldBy(la, lb); got != want {
			t.Fatalf("after %s: word %v, ledgers account for %v", name, Decode(got), Decode(want))
		}
	}
	ok := func(b bool) error {
		if !b {
			return errors.New("refused")
		}
		return nil
	}
	step("a read", a.ReadLock(0))
	step("b read", ok(b.TryReadLock()))
	step("b update", b.UpdateLock(0))
	step("a read unlock", a.ReadUnlock())
	step("b read unlock", b.ReadUnlock())
	step("b upgrade", b.UpgradeUpdateToWrite(time.Second))
	step("b downgrade to update", b.DowngradeWriteToUpdate())
	step("b update to read", b.DowngradeUpdateToRead())
	step("a register wait", a.RegisterWait())
	step("a deregister wait", a.DeregisterWait())
	step("b read unlock", b.ReadUnlock())
	step("a write", a.WriteLock(time.Second))
	step("a downgrade to read", a.DowngradeWriteToRead())
	step("a read unlock", a.ReadUnlock())
	step("b try write", ok(b.TryWriteLock()))
	step("b write unlock", b.WriteUnlock())
	step("a fair try write", ok(a.TryWriteLockFair()))
	step("a write unlock", a.WriteUnlock())
	step("a update", ok(a.TryUpdateLock()))
	step("a try upgrade", ok(a.TryUpgradeUpdateToWrite()))
	step("a write unlock", a.WriteUnlock())
	// Upgrade that must wait for a reader: goes through RegisterWait and the
	// whole-word CAS of step 6.
	step("a update", a.UpdateLock(0))
	step("b read", b.ReadLock(0))
	done := make(chan error)
	go func() { done <- a.UpgradeUpdateToWrite(5 * time.Second) }()
	// The wait is in the word when its CAS lands, and in a's ledger only
	// when the CAS is settled just after: wait for both, reading the word
	// first (once the wait shows there, a makes no other CAS until b
	// unlocks, so a settled ledger read after it stays settled).
	waitFor(t, "a's wait", func() bool {
		if waitWord(atomic.LoadUint64(word)) != 1 {
			return false
		}
		_, settled := LedgerHolds(atomic.LoadUint64(la))
		return settled
	})
	if got, want := atomic.LoadUint64(word), heldBy(la, lb); got != want {
		t.Fatalf("with a waiting: word %v, ledgers %v", Decode(got), Decode(want))
	}
	// b's unlock lets a's upgrade go on at once, so the word and a's
	// ledger are compared only once a has its write lock.
	if err := b.ReadUnlock(); err != nil {
		t.Fatalf("b read unlock: %v", err)
	}
	step("a upgraded", <-done)
	// A write that times out removes its wait, in the ledger too.
	step("b write times out", func() error {
		if err := b.WriteLock(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
			return errors.New("expected a timeout")
		}
		return nil
	}())
	step("a write unlock", a.WriteUnlock())
	if *word != 0 {
		t.Fatalf("word %v at the end", Decode(*word))
	}
}

// TestOrphansOfDeadProcess: "processes" (handles with their own ledgers)
// hammer one lock with every kind of acquisition; one of them stops dead
// with whatever it holds or waits for at that instant. FindOrphans, given
// the other ledgers, must name exactly the dead one's share; released (or
// taken over and released), the survivors must all finish. While all live,
// it must find nothing, however busy the lock.
func TestOrphansOfDeadProcess(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	// Short, so that the dying process's waiters give up soon and park.
	const opTimeout = 50 * time.Millisecond
	for round := range rounds {
		word, sleepers := new(uint64), new(uint32)
		const procs, perProc = 3, 3
		ledgers := make([]*uint64, procs)
		for i := range ledgers {
			ledgers[i] = new(uint64)
		}
		handle := func(p int) *Lock {
			l := AtWithSleepers(word, sleepers)
			l.SetLedger(ledgers[p])
			return l
		}
		var inside atomic.Int64 // writers inside; > 1 or with readers is a violation
		var stop, dead atomic.Bool
		var wg sync.WaitGroup
		freeze := make(chan struct{}) // the dead process's goroutines park here forever (until the test ends)
		var parked atomic.Int64
		park := func() {
			parked.Add(1)
			<-freeze
			runtime.Goexit() // the dead never come back
		}
		for p := range procs {
			for g := range perProc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := handle(p)
					rng := rand.New(rand.NewPCG(uint64(round), uint64(p*10+g)))
					hold := func(writing bool) {
						if p == 0 && dead.Load() {
							if writing {
								inside.Add(-1) // its critical section ends with it
							}
							park() // die holding the lock
						}
					}
					for !stop.Load() {
						switch rng.IntN(4) {
						case 0:
							if l.ReadLock(opTimeout) == nil {
								hold(false)
								_ = l.ReadUnlock()
							}
						case 1:
							if l.UpdateLock(opTimeout) == nil {
								hold(false)
								if rng.IntN(2) == 0 && l.UpgradeUpdateToWrite(opTimeout) == nil {
									if inside.Add(1) != 1 {
										t.Error("two writers")
									}
									hold(true)
									inside.Add(-1)
									_ = l.WriteUnlock()
								} else {
									_ = l.UpdateUnlock()
								}
							}
						default:
							if l.WriteLock(opTimeout) == nil {
								if inside.Add(1) != 1 {
									t.Error("two writers")
								}
								hold(true)
								inside.Add(-1)
								_ = l.WriteUnlock()
							}
						}
						if p == 0 && dead.Load() {
							park()
						}
					}
				}()
			}
		}
		all := func(dst []uint64) []uint64 {
			for _, p := range ledgers {
				dst = append(dst, atomic.LoadUint64(p))
			}
			return dst
		}
		survivors := func(dst []uint64) []uint64 {
			for _, p := range ledgers[1:] {
				dst = append(dst, atomic.LoadUint64(p))
			}
			return dst
		}
		checker := AtWithSleepers(word, sleepers)
		for range 20 {
			time.Sleep(100 * time.Microsecond)
			_, o, err := checker.FindOrphans(all, time.Now().Add(time.Second))
			if err != nil || !o.None() {
				t.Fatalf("round %d, everyone alive: orphans %+v, %v", round, o, err)
			}
		}
		dead.Store(true)
		// Process 0 dies once every one of its goroutines has parked at its
		// next hold or loop end, wherever its ledger stands then.
		waitFor(t, "process 0 to die", func() bool { return parked.Load() == perProc })
		deadShare, settled := LedgerHolds(atomic.LoadUint64(ledgers[0]))
		if !settled {
			t.Fatalf("round %d: dead process's goroutines park only between CASes", round)
		}
		recoverer := AtWithSleepers(word, sleepers)
		rl := new(uint64)
		recoverer.SetLedger(rl)
		withRecoverer := func(dst []uint64) []uint64 { return append(survivors(dst), atomic.LoadUint64(rl)) }
		for {
			w, o, err := recoverer.FindOrphans(withRecoverer, time.Now().Add(time.Second))
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			want := Orphans{Reads: countWord(deadShare) & ReadCountMask, Update: countWord(deadShare)&UpdateFlag != 0,
				Write: countWord(deadShare)&WriteFlag != 0, Waits: waitWord(deadShare)}
			if o != want {
				t.Fatalf("round %d: orphans %+v, dead process held %v", round, o, Decode(deadShare))
			}
			took, err := recoverer.ReleaseOrphans(w, o)
			if errors.Is(err, ErrChanged) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if took && !o.Write {
				if err := recoverer.UpgradeUpdateToWrite(time.Second); err != nil {
					t.Fatalf("round %d: upgrade after take-over: %v", round, err)
				}
			}
			if took {
				if s := Decode(atomic.LoadUint64(word)); !s.Write {
					t.Fatalf("round %d: after taking over %+v the word is %v, not write-locked", round, o, s)
				}
				_ = recoverer.WriteUnlock()
			}
			break
		}
		stop.Store(true)
		finished := make(chan struct{})
		go func() {
			// Survivors finish; the dead process's goroutines stay parked.
			for {
				if atomic.LoadUint64(word) == 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			close(finished)
		}()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: survivors stuck after repair, word %v", round, Decode(atomic.LoadUint64(word)))
		}
		close(freeze) // lets the parked goroutines exit
		wg.Wait()
	}
}

// TestOrphanWriteTakenOverAsWrite: a process died holding the write lock,
// its change half done, while a reader waits for it. ReleaseOrphans hands
// the recoverer the write lock itself, so the reader stays out until the
// recoverer has repaired and released. (It handed over the update lock,
// which let the reader in at once, onto the half-changed data: with the
// map's segments, a Get then returned a torn value without an error.)
func TestOrphanWriteTakenOverAsWrite(t *testing.T) {
	word, sleepers := new(uint64), new(uint32)
	dead := AtWithSleepers(word, sleepers) // no ledger: the dead process's share
	if !dead.TryWriteLock() {
		t.Fatal("the writer that dies could not lock")
	}
	rec := AtWithSleepers(word, sleepers)
	rec.SetLedger(new(uint64))
	reader := AtWithSleepers(word, sleepers)
	reader.SetLedger(new(uint64))
	got := make(chan error, 1)
	go func() { got <- reader.ReadLock(5 * time.Second) }() // waits for the dead writer
	time.Sleep(50 * time.Millisecond)
	w, o, err := rec.FindOrphans(func(dst []uint64) []uint64 {
		return append(dst, atomic.LoadUint64(rec.Ledger()), atomic.LoadUint64(reader.Ledger()))
	}, time.Now().Add(time.Second))
	if err != nil || !o.Write {
		t.Fatalf("FindOrphans: %v %+v", err, o)
	}
	took, err := rec.ReleaseOrphans(w, o)
	if err != nil || !took {
		t.Fatalf("ReleaseOrphans: %v %v", took, err)
	}
	if held, _ := LedgerHolds(atomic.LoadUint64(rec.Ledger())); !Decode(held).Write {
		t.Fatalf("the recoverer's ledger says it holds %v, not the write lock", Decode(held))
	}
	select {
	case err := <-got:
		t.Fatalf("a reader entered the dead writer's half-changed data before the repair (%v): %v", err, rec.State())
	case <-time.After(200 * time.Millisecond):
	}
	if err := rec.WriteUnlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the reader after the repair: %v", err)
	}
}

// TestAbandonedUpdateIsAnOrphanAgain: a recoverer that took a dead update
// lock over and cannot repair now gives it back: the word keeps the flag,
// its ledger drops it, and the next FindOrphans finds it again.
func TestAbandonedUpdateIsAnOrphanAgain(t *testing.T) {
	word, sleepers := new(uint64), new(uint32)
	dead := AtWithSleepers(word, sleepers)
	if err := dead.UpdateLock(time.Second); err != nil {
		t.Fatal(err)
	}
	rec := AtWithSleepers(word, sleepers)
	rec.SetLedger(new(uint64))
	live := func(dst []uint64) []uint64 { return append(dst, atomic.LoadUint64(rec.Ledger())) }
	for round := range 2 {
		w, o, err := rec.FindOrphans(live, time.Now().Add(time.Second))
		if err != nil || !o.Update {
			t.Fatalf("round %d: FindOrphans: %v %+v; want the dead update lock", round, err, o)
		}
		if took, err := rec.ReleaseOrphans(w, o); err != nil || !took {
			t.Fatalf("round %d: ReleaseOrphans: %v %v", round, took, err)
		}
		rec.AbandonUpdate()
		if held, settled := LedgerHolds(atomic.LoadUint64(rec.Ledger())); held != 0 || !settled {
			t.Fatalf("round %d: the ledger after AbandonUpdate holds %v (settled %v), want nothing", round, Decode(held), settled)
		}
		if !rec.State().Update {
			t.Fatalf("round %d: the word lost the update flag: %v", round, rec.State())
		}
	}
}

// TestUnderflowLeavesNoWaitInTheLedger: a waiting writer whose wait
// vanished (the word was reset under it) returns ErrWaitCountUnderflow, and
// its process's ledger must stop counting the wait: a later dead process's
// wait would hide behind that phantom, FindOrphans would find nothing, and
// readers would stay locked out for good.
func TestUnderflowLeavesNoWaitInTheLedger(t *testing.T) {
	word, sleepers := new(uint64), new(uint32)
	live, dead := AtWithSleepers(word, sleepers), AtWithSleepers(word, sleepers)
	ll, dl := new(uint64), new(uint64)
	live.SetLedger(ll)
	dead.SetLedger(dl)

	if err := live.ReadLock(0); err != nil { // keeps the writer waiting
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- live.WriteLock(10 * time.Second) }()
	waitFor(t, "the writer's wait", func() bool { return live.State().Waiters == 1 })
	atomic.StoreUint64(word, 0) // the word reset under the waiter (as TestWaitRemovedUnderWaiter)
	if err := <-done; !errors.Is(err, ErrWaitCountUnderflow) {
		t.Fatalf("WriteLock = %v, want ErrWaitCountUnderflow", err)
	}
	// Reset the reader's share too, so the word and ledger agree on reads.
	atomic.AddUint64(ll, ^(ledgerRead - 1))
	if h, _ := LedgerHolds(atomic.LoadUint64(ll)); h != 0 {
		t.Errorf("after the failed WriteLock the live ledger still accounts for %v; the word is %v", Decode(h), live.State())
	}

	// Another process registers a wait and dies.
	if err := dead.RegisterWait(); err != nil {
		t.Fatal(err)
	}
	w, o, err := live.FindOrphans(func(dst []uint64) []uint64 { return append(dst, atomic.LoadUint64(ll)) }, time.Now().Add(time.Second))
	if err != nil {
		t.Fatalf("FindOrphans: %v", err)
	}
	if _, err := live.ReleaseOrphans(w, o); err != nil {
		t.Fatalf("ReleaseOrphans: %v", err)
	}
	if !live.TryReadLock() {
		t.Fatalf("after repair readers are still locked out: word %v, orphans found %+v", live.State(), o)
	}
}

// TestInFlightCASesNeverReadAsSettled: goroutines of one live process each
// take a read lock and are stopped (as by preemption) before they settle.
// Before begin bounded them, the 256th wrapped the 8-bit in-flight field to
// zero, FindOrphans took the ledger for settled, and recovery would have
// removed 256 live read locks as a dead process's.
func TestInFlightCASesNeverReadAsSettled(t *testing.T) {
	word, ledger := new(uint64), new(uint64)
	const n = ledgerMaxInFlight + 1
	release := make(chan struct{})
	var cased atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := At(word)
			l.SetLedger(ledger)
			l.beginCAS(true, false)
			for {
				c := countWord(l.load())
				if l.casCount(c, c+1) {
					break
				}
			}
			cased.Add(1)
			<-release
			l.settle(true, ledgerRead)
		}()
	}
	for last := int64(-1); last != cased.Load(); {
		last = cased.Load()
		time.Sleep(50 * time.Millisecond)
	}
	if got := cased.Load(); got > int64(ledgerMaxInFlight) {
		t.Errorf("%d CASes in flight at once; the field holds %d", got, ledgerMaxInFlight)
	}
	l := At(word)
	live := func(dst []uint64) []uint64 { return append(dst, atomic.LoadUint64(ledger)) }
	if _, o, err := l.FindOrphans(live, time.Now().Add(20*time.Millisecond)); !errors.Is(err, ErrUnsettled) {
		t.Errorf("no process dead, CASes in flight: FindOrphans = %+v, %v; want ErrUnsettled", o, err)
	}
	close(release)
	wg.Wait()
	if reads := countWord(l.load()) & ReadCountMask; uint64(reads) != n {
		t.Fatalf("word holds %d read locks, want %d", reads, n)
	}
	if held, settled := LedgerHolds(atomic.LoadUint64(ledger)); !settled || held != l.load() {
		t.Fatalf("ledger holds %#x (settled %v); the word is %#x", held, settled, l.load())
	}
	if _, o, err := l.FindOrphans(live, time.Now().Add(time.Second)); err != nil || !o.None() {
		t.Fatalf("after settling: FindOrphans = %+v, %v", o, err)
	}
}

// TestLedgerFieldsStayInTheirWidths: a process that holds as many read
// locks of one lock, or waits on it, as its ledger's field counts is refused
// one more at once, as when the lock word's own count is full. It must
// neither carry into the next field (the ledger would say the process
// held the update lock) nor wait for room only the caller's own process
// could make, past any timeout.
// (The lock word allows 2^30 readers and 2^31 waits: only the ledger is full.)
func TestLedgerFieldsStayInTheirWidths(t *testing.T) {
	within := func(t *testing.T, what string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Second):
			t.Fatalf("%s still blocked after 1s", what)
			return nil
		}
	}
	consistent := func(t *testing.T, l *Lock, ledger *uint64) {
		t.Helper()
		if held, settled := LedgerHolds(atomic.LoadUint64(ledger)); !settled || held != l.load() {
			t.Fatalf("ledger holds %#x (settled %v); the word is %#x", held, settled, l.load())
		}
	}
	t.Run("reads", func(t *testing.T) {
		word, ledger := new(uint64), new(uint64)
		*word = makeState(uint32(ledgerMaxReads), 0)
		*ledger = ledgerMaxReads
		l := At(word)
		l.SetLedger(ledger)
		if err := within(t, "TryReadLock", func() error {
			if l.TryReadLock() {
				return errors.New("granted")
			}
			return nil
		}); err != nil {
			t.Fatalf("TryReadLock past the field's width: %v", err)
		}
		if err := within(t, "ReadLock", func() error { return l.ReadLock(10 * time.Millisecond) }); !errors.Is(err, ErrReadCountOverflow) {
			t.Fatalf("ReadLock past the field's width: %v, want ErrReadCountOverflow", err)
		}
		consistent(t, l, ledger)
		if err := l.ReadUnlock(); err != nil {
			t.Fatal(err)
		}
		if !l.TryReadLock() {
			t.Fatal("TryReadLock once there is room")
		}
		consistent(t, l, ledger)
	})
	t.Run("waits", func(t *testing.T) {
		word, ledger := new(uint64), new(uint64)
		*word = makeState(0, uint32(ledgerMaxWaits))
		*ledger = ledgerMaxWaits * ledgerWait
		l := At(word)
		l.SetLedger(ledger)
		if err := within(t, "RegisterWait", l.RegisterWait); !errors.Is(err, ErrWaitCountOverflow) {
			t.Fatalf("RegisterWait past the field's width: %v, want ErrWaitCountOverflow", err)
		}
		consistent(t, l, ledger)
	})
}

// TestCASesInFlightAreNoOverflow: a process holding fewer read locks than
// its ledger counts, but as many with its CASes in flight (releases that
// add nothing among them), waits for those to settle instead of failing
// at once with ErrReadCountOverflow.
func TestCASesInFlightAreNoOverflow(t *testing.T) {
	const held, inFlight = 65300, 240
	word, ledger := new(uint64), new(uint64)
	*word = makeState(held, 0)
	*ledger = held
	l := At(word)
	l.SetLedger(ledger)
	for range inFlight {
		l.begin() // a ReadUnlock that has begun and not yet made its CAS
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		for range inFlight { // they lose their race and settle
			l.settle(false, 0)
		}
	}()
	if err := l.ReadLock(time.Second); err != nil {
		t.Fatalf("ReadLock holding %d of the ledger's %d read locks, %d CASes in flight: %v", held, ledgerMaxReads, inFlight, err)
	}
}
