package offheap

// PrefetchForRead asks the CPU to fetch b's cache lines for reading (PRFM
// PLDL1KEEP) and returns without waiting: a hint, as on amd64; on arm64
// it is only tested to change nothing, not timed.
//
//go:noescape
func PrefetchForRead(b []byte)

// PrefetchWordsForRead asks the CPU to fetch the cache lines of four words
// for reading (PRFM PLDL1KEEP) and returns without waiting: a hint, as
// PrefetchForRead.
//
//go:noescape
func PrefetchWordsForRead(a, b, c, d *uint64)
