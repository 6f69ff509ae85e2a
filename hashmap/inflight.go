package hashmap

import (
	"math/rand/v2"

	"github.com/sharedmap/sharedmap/internal/inflight"
)

// Close unmaps the file, and a call still running in it would fault: the
// process would die with SIGSEGV, not a panic. So calls that lock or write
// anything in the file count themselves in and out (enter, and Leave on
// what it returns; see internal/inflight), and Close marks the map closed,
// waits for every count to reach zero, and only then lets the file go.
//
// Put's fast path does not count itself either: it keeps its write lock in
// the fast ledgers, which Close waits on instead (see Map.fastPuts).
//
// The lock-free read paths (GetInto's fast path, Unchanged) do not count
// themselves: a count is two locked instructions, and a locked
// instruction keeps the next lookup's loads from overlapping this one's,
// which makes a random Get markedly slower. They check closed after reading instead, and Close leaves
// zero-filled memory where the file was mapped (offheap.File.Retire): a
// reader still running reads zeros, not an unmapped page, and its answer
// is replaced by ErrClosed.

// enter counts a call in, spread by a key's hash, or returns ErrClosed, or
// ErrReadOnly for a write to a read-only map.
func (m *Map) enter(hash uint64, write bool) (*inflight.Count, error) {
	if write && m.readOnly && !m.gate.Closed() {
		return nil, ErrReadOnly
	}
	c := m.gate.Enter(hash)
	if c == nil {
		return nil, ErrClosed
	}
	return c, nil
}

// enterAny is enter for calls without a key: spread at random.
func (m *Map) enterAny(write bool) (*inflight.Count, error) {
	return m.enter(rand.Uint64(), write)
}
