//go:build linux

package offheap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRetire: after Retire, words and slices taken from the file read
// zeros and take writes without faulting; those writes do not reach the
// file, which keeps what it had and is no longer mapped (so deleting it
// frees its space); Retire and Close again do nothing.
func TestRetire(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "map")
		w := mustOpen(t, path, createOpts())
		atomic.StoreUint64(w.Uint64(HeaderSize), 42)
		copy(w.Bytes(HeaderSize+8, 5), "hello")
		f := w
		if readOnly {
			f = mustOpen(t, path, OpenOptions{ReadOnly: true})
		}
		word, b := f.Uint64(HeaderSize), f.Bytes(HeaderSize+8, 5)
		if err := f.Retire(); err != nil {
			t.Fatal(err)
		}
		if got := atomic.LoadUint64(word); got != 0 || !bytes.Equal(b, make([]byte, 5)) {
			t.Fatalf("read-only %v: after Retire the word reads %d and the bytes %q", readOnly, got, b)
		}
		atomic.StoreUint64(word, 7)
		copy(b, "HELLO")
		if m, known := mapped(path); known && m != readOnly { // the writable one is still mapped by w
			t.Errorf("read-only %v: the file is mapped %v after Retire", readOnly, !readOnly)
		}
		if err := f.Retire(); err != nil {
			t.Errorf("second Retire: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("Close after Retire: %v", err)
		}
		g := mustOpen(t, path, OpenOptions{})
		if got := atomic.LoadUint64(g.Uint64(HeaderSize)); got != 42 || string(g.Bytes(HeaderSize+8, 5)) != "hello" {
			t.Errorf("read-only %v: the file holds %d and %q after writes to its retired mapping", readOnly, got, g.Bytes(HeaderSize+8, 5))
		}
	}
}

// mapped reports whether path is mapped into this process; known is false
// where /proc is not mounted, and only that check is then left out.
func mapped(path string) (mapped, known bool) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false, false
	}
	return strings.Contains(string(maps), path), true
}

// TestRetireFallback: when the kernel refuses the reservation (having
// unmapped the range first, as older kernels may), Retire maps the file
// back where it was and says so: words taken from it still read and write
// the file, and nothing faults.
func TestRetireFallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map")
	f := mustOpen(t, path, createOpts())
	word := f.Uint64(HeaderSize)
	atomic.StoreUint64(word, 42)
	defer func() { mmapReservation = unix.MmapPtr }()
	mmapReservation = func(fd int, off int64, addr unsafe.Pointer, n uintptr, prot, flags int) (unsafe.Pointer, error) {
		if err := unix.Munmap(unsafe.Slice((*byte)(addr), n)); err != nil {
			t.Fatal(err)
		}
		return nil, unix.ENOMEM
	}
	err := f.Retire()
	if !errors.Is(err, unix.ENOMEM) || !strings.Contains(err.Error(), "stays mapped") {
		t.Fatalf("Retire with the reservation refused: %v", err)
	}
	if got := atomic.LoadUint64(word); got != 42 {
		t.Fatalf("after the fallback the word reads %d", got)
	}
	atomic.StoreUint64(word, 43)
	g := mustOpen(t, path, OpenOptions{})
	if got := atomic.LoadUint64(g.Uint64(HeaderSize)); got != 43 {
		t.Fatalf("a write through the mapped-back file did not reach it: %d", got)
	}
	if m, known := mapped(path); known && !m {
		t.Error("the file is not mapped after the fallback")
	}
}
