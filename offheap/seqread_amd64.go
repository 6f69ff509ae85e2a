package offheap

import "sync/atomic"

// LoadAfterLoads loads *p after every earlier load of this goroutine (see
// seqread.go): on amd64, where loads keep their order, an atomic load.
func LoadAfterLoads(p *uint64) uint64 { return atomic.LoadUint64(p) }
