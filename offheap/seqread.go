package offheap

// LoadAfterLoads is the closing read of a sequence lock: it loads *p
// atomically, after every load this goroutine made before it. A lock-free
// reader reads the sequence, then the data with plain loads, then the
// sequence again, and trusts the data only if the two reads agree; that
// proves no writer overlapped it only if the data loads cannot complete
// after the second read. sync/atomic's load does not promise that: on
// arm64 it is a load-acquire, which orders the loads after it, not the
// ones before. On amd64 loads are not reordered with other loads, so there
// it is the plain atomic load (seqread_amd64.go); on arm64 a load barrier
// precedes it (DMB ISHLD, seqread_arm64.s); elsewhere an atomic add on a
// word of its own, a full barrier in every Go port, does
// (seqread_other.go).
