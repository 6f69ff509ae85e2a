//go:build !amd64 && !arm64

package offheap

import "sync/atomic"

// LoadAfterLoads loads *p after every earlier load of this goroutine (see
// seqread.go): an atomic read-modify-write, a full barrier in every Go
// port, on a word no one else touches, then an atomic load.
func LoadAfterLoads(p *uint64) uint64 {
	var barrier uint64
	atomic.AddUint64(&barrier, 0)
	return atomic.LoadUint64(p)
}
