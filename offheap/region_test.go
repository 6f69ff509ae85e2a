//go:build linux

package offheap

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func mapTemp(t *testing.T, size int64) *Region {
	t.Helper()
	fd, err := os.Create(filepath.Join(t.TempDir(), "region"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close() // the mapping outlives the descriptor
	if err := fd.Truncate(size); err != nil {
		t.Fatal(err)
	}
	r, err := MapRegion(fd, size, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Unmap() })
	return r
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if s, _ := r.(string); !strings.HasPrefix(s, "sharedmap: assertion failed:") {
			t.Errorf("%s: recovered %v, want a sharedmap assertion", what, r)
		}
	}()
	fn()
}

func TestRegionBounds(t *testing.T) {
	const size = 8192
	r := mapTemp(t, size)
	if r.Len() != size || r.ReadOnly() {
		t.Fatalf("len %d read-only %v", r.Len(), r.ReadOnly())
	}
	if b, err := r.Slice(size-8, 8); err != nil || len(b) != 8 || cap(b) != 8 {
		t.Fatalf("last 8 bytes: len %d cap %d, %v", len(b), cap(b), err)
	}
	if b, err := r.Slice(size, 0); err != nil || len(b) != 0 {
		t.Fatalf("empty slice at the end: %v", err)
	}
	for _, c := range [][2]int64{{-1, 1}, {0, -1}, {size - 4, 8}, {size + 1, 0}, {math.MaxInt64, 1}, {1, math.MaxInt64}} {
		_, err := r.Slice(c[0], c[1])
		var re *rangeError
		if !errors.As(err, &re) || re.Off != c[0] || re.Len != c[1] || re.Size != size {
			t.Errorf("Slice(%d, %d) = %v, want a rangeError", c[0], c[1], err)
		}
	}
	mustPanic(t, "Bytes past the end", func() { r.Bytes(size-1, 2) })
	mustPanic(t, "Uint64 misaligned", func() { r.Uint64(4) })
	mustPanic(t, "Uint32 misaligned", func() { r.Uint32(2) })
	mustPanic(t, "Uint64 past the end", func() { r.Uint64(size) })
	mustPanic(t, "uint32s past the end", func() { r.uint32s(size-8, 3) })
	if r.Uint64s(8, 0) != nil {
		t.Error("zero words should be nil")
	}
	*r.Uint64(8) = 0x0807060504030201
	if b := r.Bytes(8, 8); b[0] != 1 || b[7] != 8 {
		t.Errorf("word bytes % x: not little-endian", b)
	}
	if w := r.uint32s(8, 2); w[0] != 0x04030201 || w[1] != 0x08070605 {
		t.Errorf("uint32s = %#x", w)
	}
	var re *rangeError
	if err := r.advise(size, 1, unix.MADV_RANDOM); !errors.As(err, &re) {
		t.Errorf("advise out of range = %v", err)
	}
	if err := r.advise(10, 100, unix.MADV_RANDOM); err != nil {
		t.Errorf("advise: %v", err)
	}
	if err := r.syncRange(4000, 200); err != nil {
		t.Errorf("syncRange: %v", err)
	}
	if err := r.syncRange(0, size+1); !errors.As(err, &re) {
		t.Errorf("syncRange out of range = %v", err)
	}
	if err := r.Unmap(); err != nil {
		t.Fatal(err)
	}
	if err := r.Unmap(); err != nil {
		t.Fatalf("second Unmap: %v", err)
	}
	if _, err := r.Slice(0, 1); err == nil {
		t.Error("Slice after Unmap succeeded")
	}
}

func TestMapRegionChecks(t *testing.T) {
	fd, err := os.Create(filepath.Join(t.TempDir(), "short"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if err := fd.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	// Mapping past the end of the file would fault with SIGBUS on access.
	if _, err := MapRegion(fd, 8192, true); !errors.Is(err, ErrTruncated) {
		t.Errorf("mapping past EOF = %v, want ErrTruncated", err)
	}
	if _, err := MapRegion(fd, 0, true); err == nil {
		t.Error("mapping 0 bytes succeeded")
	}
}
