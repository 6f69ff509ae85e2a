package wait

import "unsafe"

// Halves returns the low and high 32-bit halves of the 64-bit word at p, in
// the word's numeric sense (bits 0..31 and 32..63), so that each can be
// accessed atomically on its own and used as a futex word. Little-endian
// only: the shared file format is little-endian and offheap refuses to open
// a file on a big-endian host.
func Halves(p *uint64) (lo, hi *uint32) {
	return (*uint32)(unsafe.Pointer(p)), (*uint32)(unsafe.Add(unsafe.Pointer(p), 4))
}
