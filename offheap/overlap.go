package offheap

import "unsafe"

// InSpare reports whether key shares a byte with dst's spare capacity,
// dst[len(dst):cap(dst)], where an append to dst writes. A lookup that
// appends a value to a caller's buffer before it knows whether it must
// look again (an optimistic read that a writer spoils) would, with the key
// there, look again with the value's bytes in place of the key's: the
// caller checks first, in the few instructions a lookup's fast path can
// spare, and looks with a copy.
func InSpare(dst, key []byte) bool {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	k := uintptr(unsafe.Pointer(unsafe.SliceData(key)))
	return len(key) > 0 && len(dst) < cap(dst) && k < base+uintptr(cap(dst)) && k+uintptr(len(key)) > base+uintptr(len(dst))
}
