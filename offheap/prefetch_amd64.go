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

// PrefetchForRead asks the CPU to fetch b's cache lines for reading
// (PREFETCHT0) and returns without waiting: a hint, as PrefetchForWrite. A
// reader that knows where a long value probably lies (a lookup, its key's
// home run) starts its lines while it waits for the line that says where
// the value is, instead of requesting them only as its copy reaches them.
//
//go:noescape
func PrefetchForRead(b []byte)

// PrefetchWordsForRead asks the CPU to fetch the cache lines of four words
// for reading (PREFETCHT0) and returns without waiting: a hint. A lookup
// names with it the lines of its key's home runs, which it wants on their
// way with the slot's: requested by the loads that use them, they would
// come only after the slot's line, and a Get would wait for both in turn.
// On arm64 it is PRFM; on other architectures it loads the words, which
// requests their lines too.
//
//go:noescape
func PrefetchWordsForRead(a, b, c, d *uint64)

// PrefetchWords asks the CPU to fetch read's cache line for reading and the
// lines of write1 and write2 for writing, and returns without waiting: a
// hint. Unlike a load whose result goes unused, a prefetch leaves the
// CPU's reorder window at once, so work after it runs while the lines come.
//
//go:noescape
func PrefetchWords(read, write1, write2 *uint64)

// PrefetchWordsForWrite asks the CPU to fetch the cache lines of a and b
// for writing, and returns without waiting: a hint, as PrefetchWords.
//
//go:noescape
func PrefetchWordsForWrite(a, b *uint64)
