//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/rwulock"
)

// keysInTwoSegments returns two keys of m in different segments.
func keysInTwoSegments(t *testing.T, m *Map) (a, b []byte) {
	t.Helper()
	a = []byte("key-a")
	for i := range 1000 {
		k := fmt.Appendf(nil, "key-%d", i)
		if keyHash(k)&m.segMask != keyHash(a)&m.segMask {
			return a, k
		}
	}
	t.Fatal("no key in another segment")
	return nil, nil
}

// TestPutAfterCloseBeganIsRefused: Close's documented contract is that
// calls made after it has begun return ErrClosed. A Put that starts once
// the gate is closed (Close still waiting for a Compute) must not take the
// fast path and succeed.
func TestPutAfterCloseBeganIsRefused(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Segments: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, b := keysInTwoSegments(t, m)
	for _, k := range [][]byte{a, b} {
		if err := m.Put(k, []byte("first")); err != nil {
			t.Fatal(err)
		}
	}
	inFn, release := make(chan struct{}), make(chan struct{})
	computed := make(chan error, 1)
	go func() {
		computed <- m.Compute(a, func(old []byte, found bool) ([]byte, bool) {
			close(inFn)
			<-release
			return old, true
		})
	}()
	<-inFn
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	for !m.gate.Closed() {
		time.Sleep(time.Millisecond)
	}
	err = m.Put(b, []byte("after")) // Close has begun: the gate is closed
	close(release)
	if cerr := <-computed; cerr != nil {
		t.Fatal(cerr)
	}
	if cerr := <-closed; cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Put made after Close began: %v, want ErrClosed", err)
	}
}

// TestCloseAfterAFaultInAFastPut: a Put on the fast path that faults
// while it holds the write lock (a program that, like mapctl, runs with
// debug.SetPanicOnFault, and a page of the file it cannot write: here made
// read-only, as a truncated file or a full disk make it fault) unwinds
// with its fast ledger held. Close must still return (mapctl put defers
// Close around its Put), and the lock the dead call left must be
// recoverable. Under the gate, the call's count was given back by its
// defer; CloseFastPaths waited for the fast ledger for good.
func TestCloseAfterAFaultInAFastPut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 1000, Segments: 1})
	if err != nil {
		t.Fatal(err)
	}
	key, old := []byte("fault-key-0001"), bytes.Repeat([]byte("o"), 40)
	if err := m.Put(key, old); err != nil {
		t.Fatal(err)
	}
	data := m.file.Region.Bytes(0, m.file.Region.Len())
	// In the tiers area: the undo record may hold a copy too (the fast
	// path stages the bytes it would write before it looks).
	tiers := int(m.layout.TiersOff)
	at := bytes.Index(data[tiers:], append(append([]byte{}, key...), old...))
	if at < 0 {
		t.Fatal("entry not found in the tiers area")
	}
	at += tiers
	page := at &^ (os.Getpagesize() - 1)
	if err := unix.Mprotect(data[page:page+os.Getpagesize()], unix.PROT_READ); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	faulted := make(chan any, 1)
	go func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { faulted <- recover() }()
		_ = m.Put(key, bytes.Repeat([]byte("n"), 40))
	}()
	if r := <-faulted; r == nil {
		t.Fatal("the Put into a read-only page did not fault")
	}
	if err := unix.Mprotect(data[page:page+os.Getpagesize()], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close has not returned 3 s after a fast Put faulted: it waits for the fast ledger the Put left held")
	}
	m2, err := Open(path, &Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if _, err := m2.Recover(); err != nil {
		t.Fatal(err)
	}
	// The fast path staged its bytes in the undo record and named their
	// place before its first store into the entry: recovery completes the
	// rewrite, which the caller, having seen a panic, may find done or not.
	if v, err := m2.Get(key); err != nil || !bytes.Equal(v, bytes.Repeat([]byte("n"), 40)) {
		t.Fatalf("after recovery: %q, %v; want the value the faulted Put was writing", v, err)
	}
}

// TestFastLedgerValuesDoNotRepeatAcrossSlotOwners: takeFast loads its fast
// ledger, checks closing, then CASes from the value it loaded. A goroutine
// preempted between the two while its Map closes and another process joins
// the slot (Join zeroes the ledgers; between Leave and Retire, or for good
// when Retire falls back to keeping the file mapped) CASes the new owner's
// fast ledger if the values agree, leaving it "acquiring" (unsettled) until
// it runs again; if the closing process exits first, for as long as the new
// owner lives, and every recovery of that segment ends in ErrUnsettled.
// The values agree whenever both owners made as many changes (0 or 4 per
// fast Put): here emulated by the stale CAS itself, from the value the
// closed Map's last fast Put left.
func TestFastLedgerValuesDoNotRepeatAcrossSlotOwners(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	key := []byte("key")
	m1 := mustOpen(t, path, &Options{Entries: 1000})
	if err := m1.Put(key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := m1.Put(key, []byte("again")); err != nil { // the fast path
		t.Fatal(err)
	}
	slot, stale := m1.reg.Self(), atomic.LoadUint64(fastLedger(m1, key))
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := mustOpen(t, path, nil)
	defer m2.Close()
	if m2.reg.Self() != slot {
		t.Skipf("the second Map took slot %d, not %d", m2.reg.Self(), slot)
	}
	if err := m2.Put(key, []byte("third")); err != nil { // the fast path
		t.Fatal(err)
	}
	p := fastLedger(m2, key)
	if atomic.CompareAndSwapUint64(p, stale, rwulock.FastNext(stale, rwulock.FastAcquiring)) {
		atomic.StoreUint64(p, stale) // else m2's Close waits on it for good
		t.Fatalf("a stale CAS from the slot's previous owner (value %#x) took the new owner's fast ledger", stale)
	}
}

// TestFaultInTheFastProbeLeavesTheLockFree: the fast path probes under the
// write lock, so a fault there (the entry's page unreadable, under
// debug.SetPanicOnFault) unwinds with the lock held before anything
// changed. It must release it, and leave the Put uncounted: left
// write-locked, as a fault in the rewrite leaves it, every writer of the
// segment waited LockTimeout for a recovery pass.
func TestFaultInTheFastProbeLeavesTheLockFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 1000, Segments: 1, LockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	key, old := []byte("fault-key-0001"), bytes.Repeat([]byte("o"), 40)
	if err := m.Put(key, old); err != nil {
		t.Fatal(err)
	}
	data := m.file.Region.Bytes(0, m.file.Region.Len())
	tiers := int(m.layout.TiersOff)
	at := bytes.Index(data[tiers:], append(append([]byte{}, key...), old...))
	if at < 0 {
		t.Fatal("entry not found in the tiers area")
	}
	page := (tiers + at) &^ (os.Getpagesize() - 1)
	if err := unix.Mprotect(data[page:page+os.Getpagesize()], unix.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	puts := m.Stats().Puts
	faulted := make(chan any, 1)
	go func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { faulted <- recover() }()
		_ = m.Put(key, bytes.Repeat([]byte("n"), 40))
	}()
	r := <-faulted
	if err := unix.Mprotect(data[page:page+os.Getpagesize()], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	if r == nil {
		t.Fatal("the Put of an unreadable entry did not fault")
	}
	seg := m.table.Segment(0)
	if st := seg.Lock().State(); !st.Free() || seg.Seq()&1 != 0 {
		t.Fatalf("after a fault in the probe: lock %v, sequence %d; want free and even", st, seg.Seq())
	}
	if got := m.Stats().Puts; got != puts {
		t.Errorf("Puts %d after the faulted Put, was %d", got, puts)
	}
	if err := m.Put(key, bytes.Repeat([]byte("x"), 40)); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get(key); err != nil || !bytes.Equal(v, bytes.Repeat([]byte("x"), 40)) {
		t.Fatalf("after the next Put: %q, %v", v, err)
	}
}

// TestPutsCounterNeverGoesDown: a Put that tries the fast path and goes
// on to the general one (an insert into a full map here, which fails) is
// not counted while it looks. It was, and taken back when the fast path
// declined: Stats().Puts, exported as a Prometheus counter, went down, and
// a death in between left a Put counted that never happened.
func TestPutsCounterNeverGoesDown(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 64, Segments: 1, MaxBloatFactor: 1, MaxSize: NoGrowth})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	value := bytes.Repeat([]byte("v"), 32)
	i := 0
	for ; ; i++ {
		if err := m.Put(fmt.Appendf(nil, "k%05d", i), value); err != nil {
			if !errors.Is(err, ErrFull) {
				t.Fatal(err)
			}
			break
		}
	}
	before := m.Stats().Puts
	during, staged := int64(-1), false
	testhook.OnStep = func() {
		pc, _, _, _ := runtime.Caller(3)
		if strings.HasSuffix(runtime.FuncForPC(pc).Name(), ".stageRewrite") && !staged {
			staged, during = true, m.Stats().Puts
		}
	}
	err = m.Put(fmt.Appendf(nil, "k%05d", i+1000), value)
	testhook.OnStep = nil
	if !errors.Is(err, ErrFull) {
		t.Fatalf("the insert into the full map: %v, want ErrFull", err)
	}
	if !staged {
		t.Fatal("the Put did not try the fast path: the test lost its point")
	}
	if after := m.Stats().Puts; during != before || after != before {
		t.Errorf("Puts went %d -> %d -> %d over a Put that failed", before, during, after)
	}
}
