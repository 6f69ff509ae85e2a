package offheap

// PrefetchForWrite asks the CPU to fetch b's cache lines for writing
// (PREFETCHW) and returns without waiting for them: a hint, which changes
// no byte. A writer that must compute something before it stores into
// lines not yet in its cache (an entry's checksum before its value)
// overlaps the fetches with that work, instead of paying for them when the
// unlock's lock-prefixed instruction waits for its stores to complete.
//
//go:noescape
func PrefetchForWrite(b []byte)
