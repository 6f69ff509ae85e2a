//go:build linux

package offheap

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"testing"
)

// A Span reads the words and bytes the Region's own accessors see, at
// offsets from its start, aligned or not.
func TestSpanReadsWhatTheRegionHolds(t *testing.T) {
	const size = 8192
	r := mapTemp(t, size)
	b := r.Bytes(0, size)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	s := r.Span(4096, 1024)
	if s.Word64(8) != r.Uint64(4096+8) {
		t.Fatal("Word64(8) is not the region's word at 4104")
	}
	atomic.StoreUint64(r.Uint64(4096+16), 0x0123456789abcdef)
	if got := s.Load64(16); got != 0x0123456789abcdef {
		t.Errorf("Load64(16) = %#x", got)
	}
	for _, off := range []uint64{0, 3, 1009, 1016} {
		if got, want := s.Uint64(off), binary.LittleEndian.Uint64(b[4096+off:]); got != want {
			t.Errorf("Uint64(%d) = %#x, want %#x", off, got, want)
		}
	}
	if got := s.Bytes(1000, 24); !bytes.Equal(got, b[5096:5120]) || len(got) != 24 || cap(got) != 24 {
		t.Errorf("Bytes(1000, 24) = %x (cap %d), want %x", got, cap(got), b[5096:5120])
	}
	if got := s.Bytes(1024, 0); len(got) != 0 {
		t.Errorf("Bytes(1024, 0) has %d bytes", len(got))
	}
	mustPanic(t, "Span beyond the region", func() { r.Span(8000, 200) })
}

// The range test a checked build puts before every Span access: tested
// in every build, since only the accessors' calls of it are compiled out.
func TestSpanRangeCheck(t *testing.T) {
	s := mapTemp(t, 8192).Span(4096, 64)
	for _, r := range [][2]uint64{{64, 1}, {60, 5}, {65, 0}, {1 << 63, 1}, {8, 1 << 63}, {^uint64(0), 2}} {
		mustPanic(t, "check out of range", func() { s.check(r[0], r[1]) })
	}
	for _, r := range [][2]uint64{{0, 64}, {60, 4}, {64, 0}, {0, 0}} {
		s.check(r[0], r[1]) // in range: no panic
	}
}

// Built with -tags sharedmap_checked (as the fuzz targets and CI's checked
// run are), a Span access outside it panics instead of reading beyond. The
// skip is the default build's: there the accessors do not check, by
// design (see Span), and CI runs this package with the tag too.
func TestCheckedSpanPanicsOutOfRange(t *testing.T) {
	if !spanChecks {
		t.Skip("Span checks only with -tags sharedmap_checked")
	}
	r := mapTemp(t, 8192)
	s := r.Span(4096, 64)
	for name, access := range map[string]func(){
		"Load64 past the end":                   func() { s.Load64(64) },
		"Word64 straddling the end":             func() { s.Word64(60) },
		"Word64 not aligned":                    func() { s.Word64(4) },
		"Word64 of a span that starts mid-word": func() { s.Sub(4, 32).Word64(8) },
		"Uint64 straddling the end":             func() { s.Uint64(57) },
		"Bytes past the end":                    func() { s.Bytes(60, 5) },
		"Bytes at a huge offset":                func() { s.Bytes(1<<63, 1) },
		"Bytes of a huge length":                func() { s.Bytes(8, 1<<63) },
	} {
		mustPanic(t, name, access)
	}
	_ = s.Bytes(60, 4) // the last bytes are in range
	_ = s.Uint64(56)
}
