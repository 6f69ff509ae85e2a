package rwulock

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// newLock returns a lock on a fresh heap word set to raw, with a sleeper word.
func newLock(raw uint64) (*Lock, *uint64) {
	w := new(uint64)
	*w = raw
	return AtWithSleepers(w, new(uint32)), w
}

func wordIs(t *testing.T, w *uint64, want uint64) {
	t.Helper()
	if got := atomic.LoadUint64(w); got != want {
		t.Fatalf("lock word = %#x, want %#x (%v)", got, want, Decode(got))
	}
}

func TestTryReadLock(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to uint64
		ok       bool
	}{
		{"free", 0, 1, true},
		{"more readers", 5, 6, true},
		{"with update holder", 0x40000000, 0x40000001, true},
		{"write held", 0x80000000, 0x80000000, false},
		{"writer waits", 1 << 32, 1 << 32, false},
		{"writer waits with readers", 1<<32 | 3, 1<<32 | 3, false},
		{"read count at max", uint64(MaxReadCount), uint64(MaxReadCount), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, w := newLock(tc.from)
			if got := l.TryReadLock(); got != tc.ok {
				t.Fatalf("TryReadLock() = %v, want %v", got, tc.ok)
			}
			wordIs(t, w, tc.to)
		})
	}
}

func TestReadUnlock(t *testing.T) {
	l, w := newLock(3)
	if err := l.ReadUnlock(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 2)
	l, w = newLock(1<<32 | 0x40000001) // a waiter and an update holder stay
	if err := l.ReadUnlock(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 1<<32|0x40000000)
	for _, raw := range []uint64{0, 0x40000000, 0x80000000, 1 << 32} {
		l, w := newLock(raw)
		if err := l.ReadUnlock(); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("ReadUnlock on %#x = %v, want ErrNotHeld", raw, err)
		}
		wordIs(t, w, raw)
	}
}

func TestTryUpdateLock(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to uint64
		ok       bool
	}{
		{"free", 0, 0x40000000, true},
		{"beside readers", 7, 0x40000007, true},
		{"update held", 0x40000000, 0x40000000, false},
		{"write held", 0x80000000, 0x80000000, false},
		{"writer waits", 1 << 32, 1 << 32, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, w := newLock(tc.from)
			if got := l.TryUpdateLock(); got != tc.ok {
				t.Fatalf("TryUpdateLock() = %v, want %v", got, tc.ok)
			}
			wordIs(t, w, tc.to)
		})
	}
}

func TestUpdateUnlock(t *testing.T) {
	l, w := newLock(0x40000002)
	if err := l.UpdateUnlock(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 2)
	for _, raw := range []uint64{0, 2, 0x80000000} {
		l, w := newLock(raw)
		if err := l.UpdateUnlock(); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("UpdateUnlock on %#x = %v, want ErrNotHeld", raw, err)
		}
		wordIs(t, w, raw)
	}
}

func TestTryWriteLock(t *testing.T) {
	l, w := newLock(0)
	if !l.TryWriteLock() {
		t.Fatal("TryWriteLock on a free lock failed")
	}
	wordIs(t, w, 0x80000000)
	// A plain try ignores the wait count: the spec compares the count word only.
	l, w = newLock(2 << 32)
	if !l.TryWriteLock() {
		t.Fatal("TryWriteLock with waiters and a zero count word failed")
	}
	wordIs(t, w, 2<<32|0x80000000)
	for _, raw := range []uint64{1, 0x40000000, 0x80000000, 0x40000001} {
		l, w := newLock(raw)
		if l.TryWriteLock() {
			t.Fatalf("TryWriteLock on %#x succeeded", raw)
		}
		wordIs(t, w, raw)
	}
}

// TestTryWriteLockFair: unlike TryWriteLock, the fair try refuses while
// anybody waits, as well as while anybody holds any part of the lock, and
// leaves the word as it found it when it refuses.
func TestTryWriteLockFair(t *testing.T) {
	l, w := newLock(0)
	if !l.TryWriteLockFair() {
		t.Fatal("TryWriteLockFair on a free lock failed")
	}
	wordIs(t, w, 0x80000000)
	for _, raw := range []uint64{1 << 32, 2 << 32, 1, 0x40000000, 0x80000000, 0x40000001, 1<<32 | 0x40000000} {
		l, w := newLock(raw)
		if l.TryWriteLockFair() {
			t.Fatalf("TryWriteLockFair on %#x (%v) succeeded", raw, Decode(raw))
		}
		wordIs(t, w, raw)
	}
}

func TestWriteReleaseAndDowngrades(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(*Lock) error
		to   uint32
	}{
		{"WriteUnlock", (*Lock).WriteUnlock, 0},
		{"DowngradeWriteToUpdate", (*Lock).DowngradeWriteToUpdate, 0x40000000},
		{"DowngradeWriteToRead", (*Lock).DowngradeWriteToRead, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, w := newLock(3<<32 | 0x80000000) // waits survive
			if err := tc.op(l); err != nil {
				t.Fatal(err)
			}
			wordIs(t, w, 3<<32|uint64(tc.to))
			// Anything but exactly the write flag in the count word is not held.
			for _, raw := range []uint64{0, 1, 0x40000000, 0x80000001, 0xC0000000} {
				l, w := newLock(raw)
				if err := tc.op(l); !errors.Is(err, ErrNotHeld) {
					t.Fatalf("%s on %#x = %v, want ErrNotHeld", tc.name, raw, err)
				}
				wordIs(t, w, raw)
			}
		})
	}
}

func TestDowngradeUpdateToRead(t *testing.T) {
	l, w := newLock(1<<32 | 0x40000002)
	if err := l.DowngradeUpdateToRead(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 1<<32|3)
	for _, raw := range []uint64{0, 2, 0x80000000} {
		l, w := newLock(raw)
		if err := l.DowngradeUpdateToRead(); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("DowngradeUpdateToRead on %#x = %v, want ErrNotHeld", raw, err)
		}
		wordIs(t, w, raw)
	}
	l, w = newLock(uint64(UpdateFlag | MaxReadCount))
	if err := l.DowngradeUpdateToRead(); !errors.Is(err, ErrReadCountOverflow) {
		t.Fatalf("DowngradeUpdateToRead at max readers = %v, want ErrReadCountOverflow", err)
	}
	wordIs(t, w, uint64(UpdateFlag|MaxReadCount))
}

func TestTryUpgradeUpdateToWrite(t *testing.T) {
	l, w := newLock(1<<32 | 0x40000000)
	if !l.TryUpgradeUpdateToWrite() {
		t.Fatal("upgrade with no readers failed")
	}
	wordIs(t, w, 1<<32|0x80000000)
	for _, raw := range []uint64{0, 0x40000001, 0x80000000, 1} {
		l, w := newLock(raw)
		if l.TryUpgradeUpdateToWrite() {
			t.Fatalf("upgrade from %#x succeeded", raw)
		}
		wordIs(t, w, raw)
	}
}

func TestRegisterDeregisterWait(t *testing.T) {
	l, w := newLock(0)
	if err := l.RegisterWait(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 1<<32)
	if err := l.RegisterWait(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 2<<32)
	if err := l.DeregisterWait(); err != nil {
		t.Fatal(err)
	}
	if err := l.DeregisterWait(); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 0)
	if err := l.DeregisterWait(); !errors.Is(err, ErrWaitCountUnderflow) {
		t.Fatalf("DeregisterWait at 0 = %v, want ErrWaitCountUnderflow", err)
	}
	wordIs(t, w, 0)
	full := uint64(MaxWaitCount)<<32 | 5
	l, w = newLock(full)
	if err := l.RegisterWait(); !errors.Is(err, ErrWaitCountOverflow) {
		t.Fatalf("RegisterWait at max = %v, want ErrWaitCountOverflow", err)
	}
	wordIs(t, w, full)
	// The time-limited write acquisition fails at once when it cannot register.
	if err := l.WriteLock(time.Second); !errors.Is(err, ErrWaitCountOverflow) {
		t.Fatalf("WriteLock with a full wait count = %v, want ErrWaitCountOverflow", err)
	}
	wordIs(t, w, full)
}

func TestTimedUncontended(t *testing.T) {
	l, w := newLock(0)
	if err := l.ReadLock(0); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 1)
	if err := l.UpdateLock(0); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 0x40000001)
	if err := l.ReadUnlock(); err != nil {
		t.Fatal(err)
	}
	if err := l.UpgradeUpdateToWrite(0); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 0x80000000)
	if err := l.WriteUnlock(); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteLock(0); err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 0x80000000)
}

func TestTimeoutsLeaveWordUnchanged(t *testing.T) {
	const d = 30 * time.Millisecond
	for _, tc := range []struct {
		name string
		from uint64
		op   func(*Lock) error
	}{
		{"read vs write", 0x80000000, func(l *Lock) error { return l.ReadLock(d) }},
		{"read vs waiter", 1<<32 | 1, func(l *Lock) error { return l.ReadLock(d) }},
		{"update vs update", 0x40000000, func(l *Lock) error { return l.UpdateLock(d) }},
		{"update vs waiter", 1 << 32, func(l *Lock) error { return l.UpdateLock(d) }},
		{"write vs reader", 1, func(l *Lock) error { return l.WriteLock(d) }},
		{"write vs update", 0x40000000, func(l *Lock) error { return l.WriteLock(d) }},
		{"upgrade vs reader", 0x40000001, func(l *Lock) error { return l.UpgradeUpdateToWrite(d) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, w := newLock(tc.from)
			start := time.Now()
			err := tc.op(l)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			if el := time.Since(start); el < d {
				t.Fatalf("gave up after %v, before the %v limit", el, d)
			}
			wordIs(t, w, tc.from) // a timed-out writer leaves no wait behind
		})
	}
}

func TestReadCountOverflowIsImmediate(t *testing.T) {
	l, _ := newLock(uint64(MaxReadCount))
	start := time.Now()
	if err := l.ReadLock(time.Minute); !errors.Is(err, ErrReadCountOverflow) {
		t.Fatalf("ReadLock at max = %v, want ErrReadCountOverflow", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("ReadLock at max readers waited instead of failing")
	}
}

func TestUpgradeNotHeld(t *testing.T) {
	for _, raw := range []uint64{0, 3, 0x80000000} {
		l, w := newLock(raw)
		if err := l.UpgradeUpdateToWrite(time.Second); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("UpgradeUpdateToWrite on %#x = %v, want ErrNotHeld", raw, err)
		}
		wordIs(t, w, raw)
	}
}

// waitFor polls until cond holds or fails the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testutil.WaitFor(5*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestWaitingWriterShutsOutReadersThenEnters(t *testing.T) {
	for _, sleepers := range []bool{true, false} {
		w := new(uint64)
		l := At(w)
		if sleepers {
			l = AtWithSleepers(w, new(uint32))
		}
		if !l.TryReadLock() {
			t.Fatal("first reader refused")
		}
		done := make(chan error, 1)
		go func() { done <- l.WriteLock(10 * time.Second) }()
		waitFor(t, "the writer's wait", func() bool { return l.State().Waiters == 1 })
		wordIs(t, w, 1<<32|1)
		if l.TryReadLock() || l.TryUpdateLock() {
			t.Fatal("a reader or updater entered while a writer waits")
		}
		if err := l.ReadLock(5 * time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("ReadLock while a writer waits = %v, want ErrTimeout", err)
		}
		if err := l.ReadUnlock(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("waiting writer: %v", err)
		}
		wordIs(t, w, 0x80000000) // write flag set, wait removed, in one step
	}
}

func TestUpgraderWaitsForReaders(t *testing.T) {
	l, w := newLock(0x40000002)
	done := make(chan error, 1)
	go func() { done <- l.UpgradeUpdateToWrite(10 * time.Second) }()
	waitFor(t, "the upgrader's wait", func() bool { return l.State().Waiters == 1 })
	if l.TryReadLock() {
		t.Fatal("a reader entered while an upgrader waits")
	}
	_ = l.ReadUnlock()
	_ = l.ReadUnlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wordIs(t, w, 0x80000000)
}

// A recovery that resets the word under a waiting writer removes its wait;
// the spec's step 5 then fails the acquisition instead of taking the lock
// with a wait count that would underflow.
func TestWaitRemovedUnderWaiter(t *testing.T) {
	l, w := newLock(1)
	done := make(chan error, 1)
	go func() { done <- l.WriteLock(10 * time.Second) }()
	waitFor(t, "the writer's wait", func() bool { return l.State().Waiters == 1 })
	atomic.StoreUint64(w, 0)
	if err := <-done; !errors.Is(err, ErrWaitCountUnderflow) {
		t.Fatalf("WriteLock after its wait vanished = %v, want ErrWaitCountUnderflow", err)
	}
	wordIs(t, w, 0)
}

func TestStateString(t *testing.T) {
	for raw, want := range map[uint64]string{
		0:                  "free",
		0x80000000:         "write",
		2<<32 | 0x40000003: "update readers=3 waiters=2",
		5:                  "readers=5",
		1<<32 | 0x80000000: "write waiters=1",
	} {
		s := Decode(raw).String()
		if !strings.HasPrefix(s, want+" (0x") {
			t.Errorf("Decode(%#x).String() = %q, want prefix %q", raw, s, want)
		}
	}
	st := Decode(2<<32 | 0x40000003)
	if st.Readers != 3 || !st.Update || st.Write || st.Waiters != 2 {
		t.Fatalf("Decode = %+v", st)
	}
}
