package ipc

import (
	"sync"
	"sync/atomic"
)

// A hapax is a 64-bit value used for exactly one lock episode in the life of
// the file: block<<16 | sequence, where blocks come from a counter in the
// file that only grows (so values never recur across processes or reopens)
// and start at 1 (so 0, the "empty" value, is never handed out).
const hapaxBlockBits = 16

// cursor is a block of hapax values being handed out by one P.
type cursor struct{ next uint64 }

// nextHapax returns a value no episode of this file has used. Cursors are
// per P (a sync.Pool), so the file's counter is touched once per 65536
// episodes per P, not once per process-wide episode, and goroutines never
// share a cache line to draw a value. A cursor dropped by the pool wastes
// the rest of its block, of which there are 2^48.
func (a *Arena) nextHapax() uint64 {
	c := a.hapaxCursors.Get().(*cursor)
	h := c.next
	if h&(1<<hapaxBlockBits-1) == 0 {
		h = atomic.AddUint64(&a.w[hHapax], 1) << hapaxBlockBits
	}
	c.next = h + 1
	a.hapaxCursors.Put(c)
	return h
}

// idPool hands out Tidex thread identities. Tidex needs an identity that no
// concurrent episode uses (two episodes swapping the same value into Arrive
// would break exclusion), and reuses it afterwards, guarding against its own
// residue in Depart with the negated identity. Go has no thread identity
// that lasts from Lock to Unlock, so an identity is checked out for one
// episode and returned by Unlock; new ones come from a counter in the file.
type idPool struct {
	arena *Arena
	freeList[uint64]
}

func (p *idPool) get() uint64 {
	if id, ok := p.pop(); ok {
		return id
	}
	return atomic.AddUint64(&p.arena.w[hTidex], 1)
}

func (p *idPool) put(id uint64) { p.push(id, 1024) }

// freeList is a process-local stack of values to hand out again (node
// indices, identities), shared by the goroutines of one process.
type freeList[T any] struct {
	mu   sync.Mutex
	free []T
}

// pop takes the most recently returned value, if any.
func (f *freeList[T]) pop() (v T, ok bool) {
	f.mu.Lock()
	if n := len(f.free); n > 0 {
		v, ok = f.free[n-1], true
		f.free = f.free[:n-1]
	}
	f.mu.Unlock()
	return v, ok
}

// push returns v; with limit > 0, values beyond limit are dropped.
func (f *freeList[T]) push(v T, limit int) {
	f.mu.Lock()
	if limit <= 0 || len(f.free) < limit {
		f.free = append(f.free, v)
	}
	f.mu.Unlock()
}
