//go:build !amd64

package offheap

// PrefetchForWrite asks the CPU to fetch b's cache lines for writing and
// returns without waiting; a hint. On this architecture it does nothing.
func PrefetchForWrite(b []byte) {}

// PrefetchWords asks the CPU to fetch the words' cache lines; a hint. On
// this architecture it does nothing.
func PrefetchWords(read, write1, write2 *uint64) {}

// PrefetchWordsForWrite asks the CPU to fetch the cache lines of a and b
// for writing: a hint, which does nothing on this architecture.
func PrefetchWordsForWrite(a, b *uint64) {}
