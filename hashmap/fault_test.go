//go:build linux

package hashmap

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// straddlingKey puts keys with values of n bytes until one's entry starts
// on one page of the file and ends on the next, and returns the key, its
// value and the next page's offset.
func straddlingKey(t *testing.T, m *Map, n int) (key, value []byte, page int) {
	t.Helper()
	data := m.file.Region.Bytes(0, m.file.Region.Len())
	tiers := int(m.layout.TiersOff)
	ps := os.Getpagesize()
	for i := range 400 {
		k := fmt.Appendf(nil, "straddle-%04d", i)
		v := bytes.Repeat([]byte{byte('a' + i%26)}, n)
		if err := m.Put(k, v); err != nil {
			t.Fatal(err)
		}
		at := bytes.Index(data[tiers:], append(append([]byte{}, k...), v...))
		if at < 0 {
			t.Fatal("entry not found in the tiers area")
		}
		head := tiers + at - 16 // the entry header
		end := tiers + at + len(k) + len(v)
		// The header and part of the value on the first page, the value's
		// end on the next.
		if head/ps == (end-1)/ps-1 && head+16+len(k)+8 < (head/ps+1)*ps {
			return k, v, (head/ps + 1) * ps
		}
	}
	t.Fatal("no entry straddles a page boundary")
	return nil, nil, 0
}

// faultWhile runs f with the file's page at page read-only, under
// debug.SetPanicOnFault, and returns what it panicked with.
func faultWhile(t *testing.T, m *Map, page int, f func()) any {
	t.Helper()
	data := m.file.Region.Bytes(0, m.file.Region.Len())
	ps := os.Getpagesize()
	if err := unix.Mprotect(data[page:page+ps], unix.PROT_READ); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	faulted := make(chan any, 1)
	go func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { faulted <- recover() }()
		f()
	}()
	r := <-faulted
	if err := unix.Mprotect(data[page:page+ps], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAFaultInComputeIsRecovered: a Compute (Put's general path) that
// faults in its in-place rewrite, the entry's second page unwritable,
// leaves its lock to recovery, as a death there would: after Recover the
// key has its old value or its new one, whole, and Repair finds nothing.
// It released the lock on the way out: the key read as a value nobody
// wrote, no recovery ran, and Repair dropped the key (the fast path's
// fault already kept the lock for recovery, TestCloseAfterAFaultInAFastPut).
func TestAFaultInComputeIsRecovered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000, Segments: 1, AverageValueSize: 100, LockTimeout: 200 * time.Millisecond})
	defer m.Close()
	key, old, page := straddlingKey(t, m, 100)
	nv := bytes.Repeat([]byte{'N'}, len(old))
	r := faultWhile(t, m, page, func() {
		_ = m.Compute(key, func([]byte, bool) ([]byte, bool) { return nv, true })
	})
	if r == nil {
		t.Fatal("the Compute did not fault")
	}
	seg := m.table.Segment(0)
	t.Logf("after the fault: lock %v, sequence %d", seg.Lock().State(), seg.Seq())
	if _, err := m.Recover(); err != nil {
		t.Fatal(err)
	}
	v, err := m.Get(key)
	if err != nil || (!bytes.Equal(v, old) && !bytes.Equal(v, nv)) {
		t.Errorf("after the fault and Recover: Get = %q, %v; want %q or %q", v, err, old, nv)
	}
	if rep, err := m.Repair(); err != nil || len(rep.Rebuilt) != 0 {
		v, err := m.Get(key)
		t.Errorf("Repair rebuilt %+v (%v); then Get = %q, %v", rep.Rebuilt, err, v, err)
	}
}

// TestAFaultInPutManyLeavesTheLockToRecovery: PutMany's overwrite (segment
// tryOverwriteOptimistic, with the write lock in this process's ledger) faults in
// its rewrite; the next writer's wait times out on the lock, recovery
// takes it as a dead holder's and repairs the segment, and the write goes
// through. It unwound with the lock held under this live process's
// ledger: every later write of the segment timed out, and recovery
// released nothing.
func TestAFaultInPutManyLeavesTheLockToRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000, Segments: 1, AverageValueSize: 100, LockTimeout: 200 * time.Millisecond})
	defer m.Close()
	key, old, page := straddlingKey(t, m, 100)
	r := faultWhile(t, m, page, func() {
		_, _ = m.PutMany([][]byte{key}, [][]byte{bytes.Repeat([]byte{'N'}, len(old))})
	})
	if r == nil {
		t.Fatal("the PutMany did not fault")
	}
	seg := m.table.Segment(0)
	t.Logf("after the fault: lock %v, sequence %d", seg.Lock().State(), seg.Seq())
	start := time.Now()
	if err := m.Put([]byte("another key"), []byte("v")); err != nil {
		t.Errorf("a Put after the fault (%v later): %v", time.Since(start).Round(time.Millisecond), err)
	}
	rec, err := m.Recover()
	t.Logf("Recover: %d segments, %v", len(rec.Segments), err)
	if err := m.Put([]byte("another key"), []byte("v")); err != nil {
		t.Errorf("a Put after Recover: %v", err)
	}
}

// TestAPanicInComputesFunctionReleasesTheLock: a Compute whose function
// panics (the caller's bug, not a fault on the file's pages) changes
// nothing and releases the segment's lock on the way out, so the next
// write goes through at once, with no recovery: unlike a fault in the
// middle of a change, which leaves the lock to recovery.
func TestAPanicInComputesFunctionReleasesTheLock(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Segments: 1, LockTimeout: 5 * time.Second})
	defer m.Close()
	key := []byte("k")
	if err := m.Put(key, []byte("old")); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "the function's own bug" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = m.Compute(key, func([]byte, bool) ([]byte, bool) { panic("the function's own bug") })
	}()
	start := time.Now()
	if err := m.Put(key, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the Put after the panic waited %v: the lock was not released", d)
	}
	if v, err := m.Get(key); err != nil || string(v) != "new" {
		t.Errorf("Get = %q, %v; want new", v, err)
	}
	if m.recoveries.Load() != 0 {
		t.Errorf("%d recovery passes ran; want none", m.recoveries.Load())
	}
}
