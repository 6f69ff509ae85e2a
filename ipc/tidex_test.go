package ipc

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// TestTidexTryLockNeverWaitsOnARecurringIdentity (a reviewing helper's
// repro): TryLock reads Depart == Arrive == X (free)
// and is delayed before its CAS (here: held at the identity pool's mutex,
// which it takes between the read and the CAS). Meanwhile another process
// runs A (takes the lock as -X), B (queues, then holds), C (reuses X,
// queues behind B): Arrive is X again. TryLock's CAS succeeds; it waited,
// with no deadline, for B and C to finish. It must fail at once, and the
// turn it took must pass on.
func TestTidexTryLockNeverWaitsOnARecurringIdentity(t *testing.T) {
	p1 := newMemoryArena(t, Config{Slots: 4, Locks: 1}) // TryLock's process
	p2, err := Attach(p1.w)                             // the other process
	if err != nil {
		t.Fatal(err)
	}
	m1, _ := p1.Mutex("tidex", 0)
	m2, _ := p2.Mutex("tidex", 0)
	b := p2.lockBody(0)

	m2.Lock() // identity X
	if err := m2.Unlock(); err != nil {
		t.Fatal(err)
	}
	x := atomic.LoadUint64(&b[lArrive])
	t.Logf("free: arrive=depart=%d", x)

	p1.tidexIDs.mu.Lock() // delays TryLock between its read of Depart/Arrive and its CAS
	tryDone := make(chan time.Duration)
	var got atomic.Bool
	go func() {
		start := time.Now()
		got.Store(m1.TryLock())
		tryDone <- time.Since(start)
	}()
	time.Sleep(50 * time.Millisecond)

	m2.Lock() // A: X is in Depart, so it arrives as -X and holds
	bHolds := make(chan struct{})
	go func() { m2.Lock(); close(bHolds) }() // B: new identity Y, queued behind -X
	for atomic.LoadUint64(&b[lArrive]) == -x {
		time.Sleep(time.Millisecond)
	}
	_ = m2.Unlock() // A leaves; B holds
	<-bHolds
	cHolds := make(chan struct{})
	go func() { m2.Lock(); close(cHolds) }() // C: takes X from the pool, Arrive = X again
	for atomic.LoadUint64(&b[lArrive]) != x {
		time.Sleep(time.Millisecond)
	}
	t.Logf("lock held by B, C queued: arrive=%d (== X) depart=%d", atomic.LoadUint64(&b[lArrive]), int64(atomic.LoadUint64(&b[lDepart])))
	p1.tidexIDs.mu.Unlock()

	select {
	case d := <-tryDone:
		if got.Load() {
			t.Fatalf("TryLock won while B holds the lock (after %v)", d)
		}
	case <-time.After(time.Second):
		t.Fatal("TryLock still blocked after 1s, while B holds the lock and C waits")
	}
	_ = m2.Unlock() // B leaves; C holds
	<-cHolds
	_ = m2.Unlock() // C leaves: Depart = X, the turn TryLock left to a substitute
	if err := m2.LockTimeout(time.Second); err != nil {
		t.Fatalf("after the substitute's turn: %v", err)
	}
	_ = m2.Unlock()
}

// TestTidexResetRetiresVoidedIdentities: a waiter whose queue a Reset voids
// queues again under an identity never used before, not its old one (or its
// negation). Old waiters may still be waiting for the old identity to appear
// in Depart; had it recurred, the new episode's release would have let such
// a waiter in beside the new queue's next holder: two holders, which
// TestResetFreesALockHeldByTheDead met under arm64 emulation (2 to 6 runs in
// 150).
func TestTidexResetRetiresVoidedIdentities(t *testing.T) {
	p1 := newMemoryArena(t, Config{Slots: 4, Locks: 1}) // the waiter's process
	p2, err := Attach(p1.w)                             // the "dead" holder's
	if err != nil {
		t.Fatal(err)
	}
	m1, _ := p1.Mutex("tidex", 0)
	m2, _ := p2.Mutex("tidex", 0)
	b := p1.lockBody(0)
	m2.Lock() // held for good, as by a dead process
	held := atomic.LoadUint64(&b[lArrive])

	done := make(chan error, 1)
	go func() { done <- m1.LockTimeout(10 * time.Second) }()
	var voided uint64
	if !testutil.WaitFor(5*time.Second, func() bool { voided = atomic.LoadUint64(&b[lArrive]); return voided != held }) {
		t.Fatal("the waiter never queued")
	}
	if err := p1.Reset(0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiter did not get the lock after Reset: %v", err)
	}
	if h := atomic.LoadUint64(&b[lHolder]); h == voided || h == -voided {
		t.Fatalf("the waiter holds the lock as %#x, the identity its voided episode queued under (%#x)", h, voided)
	}
	if err := m1.Unlock(); err != nil {
		t.Fatal(err)
	}
}
