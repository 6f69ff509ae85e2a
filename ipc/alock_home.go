package ipc

// The home cohort of an alock: which arena is the lock's home, and the
// queue descriptors that the home keeps in its own memory.

import (
	"os"
	"sync"
	"sync/atomic"
)

// alockLocal is the home process's half of one alock: its descriptors,
// named in tailL by token (index + 1).
type alockLocal struct {
	mu    sync.Mutex
	descs []*alockDesc
	free  []*alockDesc
}

// alockDesc is a queue descriptor: the budget handed over (low half of
// word, a futex word; -1 while waiting) and its sleepers (high half), the
// successor's token or node index, and its own token or node index.
type alockDesc struct {
	word  uint64
	next  uint64
	era   uint64
	token uint64
}

func (r *alockLocal) get() *alockDesc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.free); n > 0 {
		d := r.free[n-1]
		r.free = r.free[:n-1]
		return d
	}
	d := &alockDesc{token: uint64(len(r.descs) + 1)}
	r.descs = append(r.descs, d)
	return d
}

func (r *alockLocal) put(d *alockDesc) {
	r.mu.Lock()
	r.free = append(r.free, d)
	r.mu.Unlock()
}

func (r *alockLocal) lookup(token uint64) *alockDesc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token == 0 || token > uint64(len(r.descs)) {
		return nil
	}
	return r.descs[token-1]
}

// The home word names the home process's arena, not the process alone:
// its pid in the low 32 bits and, above them, a number of that arena,
// unique within the process. A process that maps one file twice has two
// arenas over the same words and a descriptor table in each; were both
// home, their descriptors' tokens would collide in tailL (one's release
// would empty the queue the other waits in). So only the first arena to
// open the lock is home, and the others are of the other cohort. A bare
// pid (DeclareALockHome) is taken over by that process's first arena.
var alockArenas atomic.Uint32

func newALockHomeID() uint64 { return uint64(os.Getpid())&0xffffffff | uint64(alockArenas.Add(1))<<32 }

// DeclareALockHome makes process pid the home of alock lock index, unless
// the lock already has a home; it reports whether pid is now the home. Call
// it before pid opens the lock; otherwise the first process to open the
// lock becomes its home (the first of its arenas, if it opens the file
// more than once).
func (a *Arena) DeclareALockHome(index, pid int) bool {
	if a.checkIndex(index) != nil || pid <= 0 || uint64(pid) > 0xffffffff {
		return false
	}
	home := &a.lockBody(index)[lArrive]
	return atomic.CompareAndSwapUint64(home, 0, uint64(pid)) || atomic.LoadUint64(home)&0xffffffff == uint64(pid)
}

// IsALockHome reports whether this arena is the home of alock lock index,
// i.e. its process's goroutines that lock through it form the lock's local
// cohort.
func (a *Arena) IsALockHome(index int) bool {
	return a.checkIndex(index) == nil && atomic.LoadUint64(&a.lockBody(index)[lArrive]) == a.alockHomeID
}

// releaseALockHomes gives up this arena's homes when it closes, so that a
// later process may become home. Every lock is released by then, so no
// home descriptor is queued.
func (a *Arena) releaseALockHomes() {
	for index := range a.alockHomes {
		atomic.CompareAndSwapUint64(&a.lockBody(index)[lArrive], a.alockHomeID, 0)
	}
}
