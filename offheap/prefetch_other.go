//go:build !amd64

package offheap

// PrefetchForWrite asks the CPU to fetch b's cache lines for writing and
// returns without waiting; a hint. On this architecture it does nothing.
func PrefetchForWrite(b []byte) {}
