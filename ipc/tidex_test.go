package ipc

import (
	"sync/atomic"
	"testing"
	"time"
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
