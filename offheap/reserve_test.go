//go:build linux

package offheap

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// addr is where f's mapping starts.
func addr(f *File) unsafe.Pointer { return unsafe.Pointer(&f.Bytes(0, 1)[0]) }

// keyFor is the reservation key of f's mapping.
func keyFor(t *testing.T, f *File) reservationKey {
	t.Helper()
	k, ok := keyOf(f.fd, &f.hdr, f.Len())
	if !ok {
		t.Fatal("no reservation key")
	}
	return k
}

// reserved counts the reservations waiting for k.
func reservedFor(k reservationKey) int {
	reservations.Lock()
	defer reservations.Unlock()
	return len(reservations.free[k])
}

// TestReopenMapsOverTheRetiredReservation: a map file opened again after
// Retire is mapped at the addresses the retired mapping left, so that
// words taken from the retired mapping, which read zeros meanwhile, read
// the file again; the reservation leaves the pool while the file is open
// and comes back when it is retired again.
func TestReopenMapsOverTheRetiredReservation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	f := mustOpen(t, path, createOpts())
	atomic.StoreUint64(f.Uint64(HeaderSize), 42)
	word, at, k := f.Uint64(HeaderSize), addr(f), keyFor(t, f)
	if err := f.Retire(); err != nil {
		t.Fatal(err)
	}
	if got, n := atomic.LoadUint64(word), reservedFor(k); got != 0 || n != 1 {
		t.Fatalf("after Retire the word reads %d, %d reservations wait", got, n)
	}
	g := mustOpen(t, path, OpenOptions{})
	if addr(g) != at {
		t.Fatalf("reopened at %p, retired at %p", addr(g), at)
	}
	if got, n := atomic.LoadUint64(word), reservedFor(k); got != 42 || n != 0 {
		t.Fatalf("reopened: the retired mapping's word reads %d, %d reservations wait", got, n)
	}
	atomic.StoreUint64(g.Uint64(HeaderSize), 43)
	if err := g.Retire(); err != nil {
		t.Fatal(err)
	}
	if got, n := atomic.LoadUint64(word), reservedFor(k); got != 0 || n != 1 {
		t.Fatalf("retired again: the word reads %d, %d reservations wait", got, n)
	}
	h := mustOpen(t, path, OpenOptions{ReadOnly: true})
	if got := atomic.LoadUint64(h.Uint64(HeaderSize)); got != 43 {
		t.Fatalf("the file holds %d, want 43", got)
	}
}

// TestReservationsLikeForLike: a writable mapping's reservation is not
// used read-only (its late writers would fault); a read-only one's is used
// by either, by a writable mapping only when no writable one's waits.
func TestReservationsLikeForLike(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	w := mustOpen(t, path, createOpts())
	wAt, k := addr(w), keyFor(t, w)
	if err := w.Retire(); err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, path, OpenOptions{ReadOnly: true})
	rAt := addr(r)
	if rAt == wAt || reservedFor(k) != 1 {
		t.Fatalf("read-only open at %p, over the writable reservation at %p (%d wait)", rAt, wAt, reservedFor(k))
	}
	if err := r.Retire(); err != nil {
		t.Fatal(err)
	}
	if n := reservedFor(k); n != 2 {
		t.Fatalf("%d reservations wait, want 2", n)
	}
	w2 := mustOpen(t, path, OpenOptions{})
	r2 := mustOpen(t, path, OpenOptions{ReadOnly: true})
	if addr(w2) != wAt || addr(r2) != rAt || reservedFor(k) != 0 {
		t.Fatalf("writable at %p (want %p), read-only at %p (want %p), %d wait", addr(w2), wAt, addr(r2), rAt, reservedFor(k))
	}
	if err := w2.Retire(); err != nil {
		t.Fatal(err)
	}
	w3 := mustOpen(t, path, OpenOptions{})
	if err := r2.Retire(); err != nil {
		t.Fatal(err)
	}
	if w3.Retire() != nil || reservedFor(k) != 2 {
		t.Fatalf("%d reservations wait, want 2", reservedFor(k))
	}
	w4 := mustOpen(t, path, OpenOptions{})
	w5 := mustOpen(t, path, OpenOptions{}) // takes the read-only one's
	if addr(w4) != wAt || addr(w5) != rAt {
		t.Fatalf("writable at %p and %p, want %p, then %p", addr(w4), addr(w5), wAt, rAt)
	}
}

// TestReservationIsNotUsedForAnotherFile: a file with another inode, even
// one holding the same bytes, or a file created anew at the same inode
// (another creation), is mapped at new addresses.
func TestReservationIsNotUsedForAnotherFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "map")
	f := mustOpen(t, path, createOpts())
	at, k := addr(f), keyFor(t, f)
	if err := f.Retire(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "copy")
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if c := mustOpen(t, copyPath, OpenOptions{}); addr(c) == at || c.Region.reused {
		t.Fatal("a copy of the file was mapped over a reservation")
	}
	// The same inode, emptied: Open creates the map anew.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if g := mustOpen(t, path, createOpts()); addr(g) == at || g.Region.reused {
		t.Fatal("a map created anew in the file was mapped over a reservation")
	}
	// Opened again, the new map is not mapped over its former one's
	// reservation either (whose key has another creation).
	if g := mustOpen(t, path, OpenOptions{}); addr(g) == at || g.Region.reused {
		t.Fatal("the new map, opened again, was mapped over a reservation")
	}
	if n := reservedFor(k); n != 1 {
		t.Fatalf("%d reservations wait, want the first map's", n)
	}
}

// TestUnmapOfAReusedMappingRetires: Close (which unmaps) of a mapping made
// over a reservation retires it instead, since late readers of the mapping
// that left the reservation may still read there: their words read zeros,
// nothing faults, and the reservation waits again.
func TestUnmapOfAReusedMappingRetires(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	f := mustOpen(t, path, createOpts())
	atomic.StoreUint64(f.Uint64(HeaderSize), 42)
	word, k := f.Uint64(HeaderSize), keyFor(t, f)
	if err := f.Retire(); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, path, OpenOptions{})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got, n := atomic.LoadUint64(word), reservedFor(k); got != 0 || n != 1 {
		t.Fatalf("after Close of the reused mapping the word reads %d, %d reservations wait", got, n)
	}
	if m, known := mapped(path); known && m {
		t.Error("the file is still mapped")
	}
}

// TestOpenAndRetireInALoopKeepsTheAddressSpace: a map file opened and
// retired thousands of times, read-only every third time, is mapped at
// two addresses in all, and the process's address space and mappings stay
// about as they were. Without reuse each cycle kept its mapping's size in
// address space for good (here the kernel merged the small reservations,
// so the count of mappings barely grew; a map's larger ones, with growth
// mappings coming and going between them, it did not merge, and
// vm.max_map_count, 65,530 by default, then ended such a loop with
// ENOMEM).
func TestOpenAndRetireInALoopKeepsTheAddressSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	f := mustOpen(t, path, createOpts())
	if err := f.Retire(); err != nil {
		t.Fatal(err)
	}
	maps, size := mappings(t)
	const cycles = 3000
	at := map[unsafe.Pointer]bool{}
	for i := range cycles {
		g, err := Open(path, OpenOptions{ReadOnly: i%3 == 0})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		at[addr(g)] = true
		if err := g.Retire(); err != nil {
			t.Fatal(err)
		}
	}
	maps2, size2 := mappings(t)
	if len(at) > 2 || maps2 > maps+8 || size2 > size+cycles*testSize/1024/16 {
		t.Fatalf("%d cycles of Open and Retire: mapped at %d addresses; %d mappings, up from %d; %d KiB of address space, up from %d",
			cycles, len(at), maps2, maps, size2, size)
	}
}

// mappings counts this process's mappings and its address space in KiB,
// from /proc, which Linux always has: a test that cannot read it fails.
func mappings(t *testing.T) (n int, kib int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kib, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
		}
	}
	return strings.Count(string(b), "\n"), kib
}

// TestLateWritesThroughARetiredMapping: a word of a writable mapping,
// written after Retire, while the file is mapped again read-only
// elsewhere, and then once the file is mapped again writable over the
// reservation: neither write faults; the first reaches nothing, the second
// reaches the file, as it would have before the Retire.
func TestLateWritesThroughARetiredMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	w := mustOpen(t, path, createOpts())
	atomic.StoreUint64(w.Uint64(HeaderSize), 40)
	word, at := w.Uint64(HeaderSize), addr(w)
	if err := w.Retire(); err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, path, OpenOptions{ReadOnly: true})
	if addr(r) == at || r.Region.reused {
		t.Fatal("a read-only mapping was made over a writable one's reservation")
	}
	atomic.AddUint64(word, 1) // zeros: reaches nothing
	if got := atomic.LoadUint64(r.Uint64(HeaderSize)); got != 40 {
		t.Fatalf("the file holds %d after a write to the retired mapping, want 40", got)
	}
	w2 := mustOpen(t, path, OpenOptions{})
	if addr(w2) != at {
		t.Fatalf("writable mapping at %p, want the reservation at %p", addr(w2), at)
	}
	atomic.AddUint64(word, 1)
	if got := atomic.LoadUint64(r.Uint64(HeaderSize)); got != 41 {
		t.Fatalf("the file holds %d after a write through the reused addresses, want 41", got)
	}
}

// TestRefusedMapOverAReservation: when the kernel refuses to map the file
// over a reservation, before or after unmapping it, Open maps the file at
// new addresses and the reservation is made again and kept (its words read
// zeros, nothing faults); when it refuses to make the reservation again
// too, Open fails and says so rather than leave a hole under late readers.
func TestRefusedMapOverAReservation(t *testing.T) {
	defer func() { testMapFileOver = nil; mmapReservation = unix.MmapPtr }()
	for _, unmapFirst := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "map")
		f := mustOpen(t, path, createOpts())
		word, at, k := f.Uint64(HeaderSize), addr(f), keyFor(t, f)
		if err := f.Retire(); err != nil {
			t.Fatal(err)
		}
		testMapFileOver = func(_ *os.File, _ int64, a unsafe.Pointer, n uintptr, _ bool) error {
			if unmapFirst {
				if err := unix.Munmap(unsafe.Slice((*byte)(a), n)); err != nil {
					t.Fatal(err)
				}
			}
			return unix.ENOMEM
		}
		g := mustOpen(t, path, OpenOptions{})
		testMapFileOver = nil
		if addr(g) == at || g.Region.reused || reservedFor(k) != 1 || atomic.LoadUint64(word) != 0 {
			t.Fatalf("unmap first %v: mapped at %p (reservation at %p), %d reservations wait", unmapFirst, addr(g), at, reservedFor(k))
		}
	}
	path := filepath.Join(t.TempDir(), "map")
	f := mustOpen(t, path, createOpts())
	if err := f.Retire(); err != nil {
		t.Fatal(err)
	}
	testMapFileOver = func(*os.File, int64, unsafe.Pointer, uintptr, bool) error { return unix.ENOMEM }
	mmapReservation = func(int, int64, unsafe.Pointer, uintptr, int, int) (unsafe.Pointer, error) {
		return nil, unix.ENOMEM
	}
	g, err := Open(path, OpenOptions{})
	if err == nil {
		g.Close()
		t.Fatal("Open succeeded with the reservation neither mapped over nor made again")
	}
	if !strings.Contains(err.Error(), "reserving them again") {
		t.Fatalf("Open: %v", err)
	}
}
