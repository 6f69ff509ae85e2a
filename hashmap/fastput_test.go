//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/rwulock"
)

// stopInFastPath makes the next Put on the fast path stop at its step-th
// step inside fn ("takeFast" or "releaseFast"): stopped is closed when it
// gets there, and it goes on once go is closed. It returns a function that
// removes the hook.
func stopInFastPath(t *testing.T, fn string, step int) (stopped, proceed chan struct{}) {
	t.Helper()
	stopped, proceed = make(chan struct{}), make(chan struct{})
	var steps atomic.Int64
	testhook.OnStep = func() {
		pc, _, _, _ := runtime.Caller(3) // OnStep, Step, testStep, then the step's function
		if !strings.HasSuffix(runtime.FuncForPC(pc).Name(), "(*Segment)."+fn) {
			return
		}
		if steps.Add(1) == int64(step) {
			close(stopped)
			<-proceed
		}
	}
	t.Cleanup(func() { testhook.OnStep = nil })
	return stopped, proceed
}

// fastLedger is this process's fast ledger of key's segment.
func fastLedger(m *Map, key []byte) *uint64 {
	return m.fastLedger(m.reg.Self(), int(keyHash(key)&m.segMask))
}

// TestPutOverwritesOnTheFastPath: a Put that rewrites a present key's value
// in place takes the fast path, whose fast ledger moves on and ends empty,
// and leaves the ledger as it was.
func TestPutOverwritesOnTheFastPath(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.fastPuts {
		t.Fatal("a new map without fast Puts")
	}
	key := []byte("key")
	if err := m.Put(key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	fast := fastLedger(m, key)
	ledger := m.reg.Ledger(m.reg.Self(), int(keyHash(key)&m.segMask))
	f0, l0 := atomic.LoadUint64(fast), atomic.LoadUint64(ledger)
	if err := m.Put(key, []byte("again")); err != nil {
		t.Fatal(err)
	}
	f1, l1 := atomic.LoadUint64(fast), atomic.LoadUint64(ledger)
	if f1 == f0 || f1&rwulock.FastStateMask != rwulock.FastEmpty {
		t.Fatalf("fast ledger %#x -> %#x: the overwrite did not take the fast path, or left it busy", f0, f1)
	}
	if l1 != l0 {
		t.Fatalf("ledger %#x -> %#x: the fast path changed it", l0, l1)
	}
	if v, err := m.Get(key); err != nil || !bytes.Equal(v, []byte("again")) {
		t.Fatalf("Get: %q, %v", v, err)
	}
}

// TestPutManyTakesTheFastPath: PutManyAdded stores each key as Put
// would, on the fast ledger path where Put may, for an insert and for an
// overwrite, and still counts the keys it added.
func TestPutManyTakesTheFastPath(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	key := []byte("key")
	fast := fastLedger(m, key)
	for round, want := range []int{1, 0} {
		f0 := atomic.LoadUint64(fast)
		stored, added, err := m.PutManyAdded([][]byte{key}, [][]byte{[]byte("value")})
		if err != nil || stored != 1 || added != want {
			t.Fatalf("round %d: PutManyAdded: %d stored, %d added, %v; want 1, %d", round, stored, added, err, want)
		}
		if f1 := atomic.LoadUint64(fast); f1 == f0 || f1&rwulock.FastStateMask != rwulock.FastEmpty {
			t.Fatalf("round %d: fast ledger %#x -> %#x: the store did not take the fast path, or left it busy", round, f0, f1)
		}
	}
}

// TestRecoveryWaitsForALiveFastPut: a Put stopped on the fast path with
// the write lock taken and its fast ledger not yet saying so (or saying it
// is releasing it) is a live holder: a recovery pass of its own process
// waits for it, and gives up (ErrUnsettled) rather than take the lock as a
// dead process's. Reading the ledgers without the fast ones, recovery took
// the lock over and rebuilt the segment under the Put.
func TestRecoveryWaitsForALiveFastPut(t *testing.T) {
	for _, at := range []struct {
		fn   string
		step int
	}{{"takeFast", 2}, {"releaseFast", 1}} {
		t.Run(at.fn, func(t *testing.T) {
			m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, LockTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			key := []byte("key")
			if err := m.Put(key, []byte("first")); err != nil {
				t.Fatal(err)
			}
			stopped, proceed := stopInFastPath(t, at.fn, at.step)
			done := make(chan error)
			go func() { done <- m.Put(key, []byte("again")) }()
			<-stopped
			rep, err := m.Recover()
			close(proceed)
			if !errors.Is(err, rwulock.ErrUnsettled) || len(rep.Segments) != 0 {
				t.Errorf("recovery with a live fast Put inside: %v, %d segments repaired; want ErrUnsettled and none", err, len(rep.Segments))
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if v, err := m.Get(key); err != nil || !bytes.Equal(v, []byte("again")) {
				t.Fatalf("Get: %q, %v", v, err)
			}
		})
	}
}

// TestCloseWaitsForAFastPut: a Put on the fast path does not count itself
// in with the gate, so Close waits for it otherwise (CloseFastPaths): not
// returning while the Put holds the lock, and the Put's value is in the
// file afterwards; a Put after Close fails with ErrClosed.
func TestCloseWaitsForAFastPut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("key")
	if err := m.Put(key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	stopped, proceed := stopInFastPath(t, "releaseFast", 1)
	done := make(chan error)
	go func() { done <- m.Put(key, []byte("again")) }()
	<-stopped
	closed := make(chan error)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Put held the lock on the fast path", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := m.Put(key, []byte("after")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
	m, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if v, err := m.Get(key); err != nil || !bytes.Equal(v, []byte("again")) {
		t.Fatalf("after reopening: %q, %v; want the Put Close waited for", v, err)
	}
}

// TestFilesWithoutFastLedgersStillWork: a file created before fast ledgers
// (no layout flag, one ledger per segment in each registry slot) opens, says
// so in its stats, and its Puts take the general path's fast path with the
// ledger. (TestKilledAtChosenSteps kills writers on such a file too.)
func TestFilesWithoutFastLedgersStillWork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	testCreateWithoutFastLedgers = true
	m, err := Open(path, &Options{Entries: 1000})
	testCreateWithoutFastLedgers = false
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Stats().FastLedgers || m.fastPuts {
		t.Fatal("a file created without fast ledgers reads as having them")
	}
	key := []byte("key")
	for _, v := range []string{"first", "again"} {
		if err := m.Put(key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := m.Get(key); err != nil || !bytes.Equal(v, []byte("again")) {
		t.Fatalf("Get: %q, %v", v, err)
	}
	// The ledger kept the overwrite's lock: it moved, and ends settled,
	// holding nothing.
	ledger := m.reg.Ledger(m.reg.Self(), int(keyHash(key)&m.segMask))
	if held, settled := rwulock.LedgerHolds(atomic.LoadUint64(ledger)); atomic.LoadUint64(ledger) == 0 || !settled || held != 0 {
		t.Fatalf("ledger %#x after the overwrites: want moved, settled, nothing held", atomic.LoadUint64(ledger))
	}
}
