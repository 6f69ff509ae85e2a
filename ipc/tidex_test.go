//go:build linux

package ipc

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// TestTidexTryLockNeverWaitsOnARecurringIdentity: TryLock reads Depart ==
// Arrive == X (free) and is delayed before its CAS (here: held at the identity pool's mutex,
// which it takes between the read and the CAS). Meanwhile another process
// runs A (takes the lock as -X), B (queues, then holds), C (reuses X,
// queues behind B): Arrive is X again. TryLock's CAS would succeed and
// then wait, with no deadline, for B and C to finish. It must fail at
// once, and the turn it took must pass on.
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
// TestResetFreesALockHeldByTheDead can meet on a slow machine.
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

// TestTidexResetGrantsNoStaleWaiter: a waiter
// W preempted across a Reset waits for its predecessor H's identity in
// Depart. H, voided, queues again and is granted; had it kept its identity
// (pooled identities are handed out again at once), its release would put
// that identity in Depart, and W would be granted beside the next holder.
func TestTidexResetGrantsNoStaleWaiter(t *testing.T) {
	a := newMemoryArena(t, Config{Slots: 4, Locks: 1})
	defer closeWithin(t, a, 5*time.Second)
	m, err := a.Mutex("tidex", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.(*tidex)
	m.Lock() // D: its process then dies holding the lock
	d := atomic.LoadUint64(l.arrive)

	// H: a live waiter behind D.
	hDone := make(chan struct{})
	go func() { m.Lock(); close(hDone) }()
	for atomic.LoadUint64(l.arrive) == d {
		time.Sleep(time.Millisecond)
	}
	h := atomic.LoadUint64(l.arrive)

	// W: a waiter behind H, preempted after its swap.
	gen := atomic.LoadUint64(l.gen)
	wid := l.a.tidexIDs.get()
	if pred := atomic.SwapUint64(l.arrive, wid); pred != h {
		t.Fatalf("W's predecessor %d, want H's %d", pred, h)
	}

	if err := a.Reset(0); err != nil {
		t.Fatal(err)
	}
	select { // H queues again and is granted
	case <-hDone:
	case <-time.After(5 * time.Second):
		t.Fatal("H not granted after the Reset")
	}
	if err := m.Unlock(); err != nil { // Depart = H's identity now
		t.Fatal(err)
	}
	if !m.TryLock() { // X: the lock is free, and X takes it (its own identity)
		t.Fatal("TryLock on a free lock")
	}
	w := newWaiter(100 * time.Millisecond)
	if o := l.waitDepart(h, gen, &w); o == granted {
		t.Fatal("W, queued before the Reset, was granted while X holds the lock: two holders")
	}
}
