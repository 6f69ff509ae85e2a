package offheap

import "unsafe"

// Overlap reports whether a and b share a byte of memory. A lookup that
// appends a value to a caller's buffer before it knows whether it must
// look again (an optimistic read that a writer spoils) would, when the
// buffer's spare capacity holds the key, look again with the value's bytes
// in place of the key's: the caller checks first and looks with a copy.
func Overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
