package offheap

// LoadAfterLoads loads *p after every earlier load of this goroutine (see
// seqread.go): a load barrier, then a load-acquire.
//
//go:noescape
func LoadAfterLoads(p *uint64) uint64
