//go:build !amd64 && !arm64

package offheap

import "sync/atomic"

// AddExclusive adds d to *p, a word that only the caller writes at this
// moment (it holds the lock that guards the word). Other processes, which
// load the word atomically, see the old value or the new, never a mix, and
// see the new value after every store this goroutine made before it and
// before every store it makes after (see order.go).
func AddExclusive(p *uint64, d uint64) { atomic.AddUint64(p, d) }

// StoreExclusive stores v in *p, a word that only the caller writes at
// this moment, as AddExclusive adds (see order.go).
func StoreExclusive(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
