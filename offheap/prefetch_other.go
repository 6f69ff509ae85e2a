//go:build !amd64

package offheap

import "sync/atomic"

// PrefetchForWrite asks the CPU to fetch b's cache lines for writing and
// returns without waiting; a hint. On this architecture it does nothing.
func PrefetchForWrite(b []byte) {}

// PrefetchForRead asks the CPU to fetch b's cache lines for reading and
// returns without waiting; a hint. On this architecture it does nothing.
func PrefetchForRead(b []byte) {}

// PrefetchWordsForRead requests the cache lines of four words. On this
// architecture it loads them, and the loads' results are not used.
func PrefetchWordsForRead(a, b, c, d *uint64) {
	_, _, _, _ = atomic.LoadUint64(a), atomic.LoadUint64(b), atomic.LoadUint64(c), atomic.LoadUint64(d)
}

// PrefetchWords asks the CPU to fetch the words' cache lines; a hint. On
// this architecture it does nothing.
func PrefetchWords(read, write1, write2 *uint64) {}

// PrefetchWordsForWrite asks the CPU to fetch the cache lines of a and b
// for writing: a hint, which does nothing on this architecture.
func PrefetchWordsForWrite(a, b *uint64) {}
