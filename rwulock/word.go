package rwulock

// The lock word, bit-exact to the Chronicle Map spec (section 3.2). It is one
// little-endian 64-bit word: the low 32 bits are the count word, the high 32
// bits the wait word.
//
//	bits 0..29   read lock count (readers holding the lock)
//	bit  30      update lock flag
//	bit  31      write lock flag
//	bits 32..63  wait count (writers and upgraders waiting)
//
// The count word and the wait word are each changed with a 32-bit CAS; the
// one step that takes the write lock and removes a wait together uses a
// 64-bit CAS on the whole word, as the spec requires.
const (
	ReadCountMask uint32 = 1<<30 - 1 // bits 0..29: read lock count
	UpdateFlag    uint32 = 1 << 30   // bit 30: update lock held
	WriteFlag     uint32 = 1 << 31   // bit 31: write lock held

	// MaxReadCount is the largest read count; one more reader is refused.
	MaxReadCount = ReadCountMask
	// MaxWaitCount is the largest wait count (2^31 - 1, as in the spec).
	MaxWaitCount uint32 = 1<<31 - 1

	// writeLocked is the whole count word of a write-locked lock: the write
	// flag, no update flag, no readers.
	writeLocked = WriteFlag
	// updateLocked is the count word of a lock held for update with no
	// readers, the only state an upgrade can start from.
	updateLocked = UpdateFlag
)

// countWord and waitWord split a 64-bit lock state.
func countWord(state uint64) uint32 { return uint32(state) }
func waitWord(state uint64) uint32  { return uint32(state >> 32) }

// makeState joins a count word and a wait word.
func makeState(count, wait uint32) uint64 { return uint64(wait)<<32 | uint64(count) }
