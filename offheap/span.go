package offheap

import (
	"sync/atomic"
	"unsafe"
)

// Span is a range of the mapping read through offsets its user has proven
// in range itself, for the one path where Go's bounds check on every word
// costs what a user measures: a lookup's probe (segment.Table.TryGet), whose
// offsets come from the validated layout (a segment's header, a slot, the
// home runs of a tag) or from a slot and an entry header it has checked
// against the tier before following them. There the compiler's checks,
// one or two instructions on each of a dozen loads, only repeat what the
// probe has already established, and on a path that short they are a
// share of a Get's time that shows.
//
// In a build with the sharedmap_checked tag every access is checked and a
// range outside the span panics, as Region.Bytes does: the fuzz targets
// and CI run that way, so a probe that would step outside is caught there
// rather than reading whatever lies beyond. Offsets are bytes from the
// span's start.
type Span struct {
	base unsafe.Pointer
	size uint64
}

// Span returns the n bytes at off as a Span. The range must come from the
// validated layout; one outside the region panics.
func (r *Region) Span(off, n int64) Span {
	b := r.Bytes(off, n)
	return Span{base: unsafe.Pointer(unsafe.SliceData(b)), size: uint64(n)}
}

// Sub is the n bytes at off as a Span of their own, so that a checked
// build (see Span) also catches a load outside them that would still lie
// inside s.
func (s Span) Sub(off, n uint64) Span {
	if spanChecks {
		s.check(off, n)
	}
	return Span{base: unsafe.Add(s.base, uintptr(off)), size: n}
}

// Load64 atomically loads the 8-byte aligned word at off.
func (s Span) Load64(off uint64) uint64 {
	return atomic.LoadUint64(s.Word64(off))
}

// Word64 returns the 8-byte aligned word at off, for sync/atomic.
func (s Span) Word64(off uint64) *uint64 {
	p := unsafe.Add(s.base, uintptr(off))
	if spanChecks {
		s.check(off, 8)
		if uintptr(p)%8 != 0 {
			panic("sharedmap: assertion failed: span word not 8-aligned")
		}
	}
	return (*uint64)(p)
}

// Uint64 reads the 8 bytes at off, aligned or not, as a word in the
// file's byte order, little-endian, which Open makes sure is the host's. A
// plain load: its reader validates what it read, as an optimistic reader
// does.
func (s Span) Uint64(off uint64) uint64 {
	if spanChecks {
		s.check(off, 8)
	}
	return *(*uint64)(unsafe.Add(s.base, uintptr(off)))
}

// Bytes returns the n bytes at off.
func (s Span) Bytes(off, n uint64) []byte {
	if spanChecks {
		s.check(off, n)
	}
	return unsafe.Slice((*byte)(unsafe.Add(s.base, uintptr(off))), n)
}

// check panics unless [off, off+n) lies in the span.
func (s Span) check(off, n uint64) {
	if off > s.size || n > s.size-off {
		panic("sharedmap: assertion failed: span " + (&rangeError{Off: int64(off), Len: int64(n), Size: int64(s.size)}).Error())
	}
}
