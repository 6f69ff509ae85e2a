//go:build !amd64 && !arm64

package offheap

import (
	"runtime"
	"sync/atomic"
)

// PrefetchForRead requests b's cache lines for reading. This architecture
// has no prefetch instruction here, so it reads a byte of each line, as
// the lookups did before they prefetched (the lines are requested; the
// reads wait for them).
func PrefetchForRead(b []byte) {
	var sink byte
	for off := 0; off < len(b); off += 64 {
		sink ^= b[off]
	}
	if len(b) > 0 {
		sink ^= b[len(b)-1] // the last line, when b ends in one of its own
	}
	runtime.KeepAlive(sink)
}

// PrefetchWordsForRead requests the cache lines of four words. On this
// architecture it loads them, and the loads' results are not used.
func PrefetchWordsForRead(a, b, c, d *uint64) {
	_, _, _, _ = atomic.LoadUint64(a), atomic.LoadUint64(b), atomic.LoadUint64(c), atomic.LoadUint64(d)
}
