package hashmap

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/inflight"
	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/segment"
)

// Map is a hash map in a memory-mapped file, shared by every process that
// opens the same file. All methods, Close included, are safe for
// concurrent use by many goroutines and processes.
type Map struct {
	file     *offheap.File
	table    *segment.Table
	layout   *segment.Layout
	opts     Options
	readOnly bool
	// salvaged: the map is Salvage's, whose Range prefers the copy of a
	// key in the segment it maps to (see strayCopy).
	salvaged bool
	gate     inflight.Gate // calls in progress, and whether Close has begun (see enter)
	// fastPuts: Put tries segment.TryOverwriteFastLedger before it counts itself in
	// with the gate. That fast path keeps its lock in the fast ledgers,
	// which Close waits on instead (Table.CloseFastPaths), so it needs
	// neither the gate's two locked instructions nor the ledger's four.
	// Set once the slot is joined, in files with fast ledgers, for plain
	// maps whose writers do not queue locally.
	fastPuts bool
	closing  sync.Mutex // held by Close until the file is let go

	lockLayout lockLayout
	lockTable  *LockTable
	reg        *registry.Registry // nil: a file from before the registry, or damaged (regErr)
	regErr     error              // why a read-only open could not attach the registry (Check reports it)
	counters   []uint64           // this process's hits and misses, two per segment, in its registry slot (nil: none)
	baseCounts []uint64           // what counters held when this process joined its slot (see ownLookups)
	segMask    uint64             // Segments - 1: keys of one segment share these low bits of their hashes, whatever the segments split into (see segment.Table.SegmentOf)
	rangeBufs  sync.Pool          // of *rangeBuf, for RangeView
	putAllBufs sync.Pool          // of *putAllScratch, for PutAll
	recoveries atomic.Int64       // recovery passes run after lock timeouts, in this process
	repairs    atomic.Int64       // recovery passes that released something, in this process
	atOpen     Recovery           // what Open repaired of processes that died before it
	mended     []string           // headers Open rewrote from the file's layout (Recovery.Mended)
	admin      ipc.Mutex          // the map's own lock, arena lock 0; nil in files without a lock table
	adminLocal sync.Mutex         // held with admin by this process's writers (adminLock), so that LockTable.Reset can wait for them
	fills      fillGroup          // GetOrLoad's calls in progress in this process, by key
}

// Close lets the file go, without forcing data to disk (see Sync). Calls
// made after Close has begun return ErrClosed (or a zero Len, Stats,
// Segments); calls already running finish first and Close waits for them,
// Compute functions included (so one that calls Close waits forever); a
// LockTable wait gives up with ErrClosed within LockTimeout. Other processes
// are not affected. Calling Close again waits for the first and returns nil.
// The mapping's addresses stay reserved, reading as zeros, so a lock-free
// Get still running returns ErrClosed; the next Open of the same file in
// this process maps it over them again, so that opening and closing a map
// in a loop costs no address space.
func (m *Map) Close() error {
	m.closing.Lock()
	defer m.closing.Unlock()
	if !m.gate.Close() { // waits for the calls in progress
		return nil
	}
	m.table.CloseFastPaths() // and for Puts on the fast path, which the gate does not count
	m.lockTable.close()
	if m.reg != nil {
		_ = m.reg.Leave() // closing the file drops its lock anyway
	}
	return m.file.Retire()
}

// Sync writes every change made to the map so far, by any process, to the
// file's disk and waits for it (msync). Without it, changes are visible to
// every process at once and survive any process's death, but reach the
// disk only when the kernel writes dirty pages back: a machine crash may
// lose the latest of them, or leave an entry half written, which Check
// reports and Repair removes. Sync costs a write of every page dirtied
// since the last one; call it at the points that must survive a crash.
func (m *Map) Sync() error {
	c, err := m.enterAny(false)
	if err != nil {
		return err
	}
	defer c.Leave()
	return m.file.Sync()
}

// Path is the file the map lives in.
func (m *Map) Path() string { return m.file.Path() }

// Delete removes key and reports whether it was present.
func (m *Map) Delete(key []byte) (existed bool, err error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	return m.delete(h, key)
}

// delete is Delete inside the in-flight gate, a key holding a large value
// included.
func (m *Map) delete(h uint64, key []byte) (bool, error) {
	existed, err := m.table.For(h).Delete(h, key)
	if errors.Is(err, segment.ErrLarge) {
		old, _, err := m.swapSmall(h, key, segment.SwapDelete, nil, nil)
		return old.Found, err
	}
	return existed, err
}

// DeleteMany removes every key in keys, as a Delete of each in turn would
// (each removal atomic on its own; the batch is not a transaction), with
// the lookups' cache misses overlapped as in GetMany. It returns how many
// of the keys were present, and stops at the first error, which names the
// key's index.
func (m *Map) DeleteMany(keys [][]byte) (deleted int, err error) {
	c, err := m.enterAny(true)
	if err != nil {
		return 0, err
	}
	defer c.Leave()
	b := keyBatches{keys: keys}
	for b.next(m.table) {
		for i, k := range b.batch {
			existed, err := m.delete(b.hashes[i], k)
			if err != nil {
				return deleted, fmt.Errorf("DeleteMany: key %d: %w", b.start+i, err)
			}
			if existed {
				deleted++
			}
		}
	}
	return deleted, nil
}

// Compute atomically replaces the value of key with what fn returns. fn gets
// a copy of the current value (found false if absent); it returns the new
// value and keep: keep false removes the key (or leaves it absent). No other
// writer, in any process, changes the key between the read and the write.
//
// fn runs under the lock of the key's segment: keep it short, and do not
// write to the map from it. A write to the same segment waits for fn's own
// lock and fails with ErrTimeout after up to twice LockTimeout; reads and
// writes to other segments work, but which segment a key falls in is not
// for the caller to know.
//
// In a cache map an entry Compute changes keeps its expiry (a counter of
// requests in a fixed window stays in its window), and one it creates lives
// for DefaultTTL; PutWithTTL sets a new expiry.
//
// A key that holds a large value (one too large for a tier, stored in
// parts), or for which fn returns one, is computed otherwise: fn runs
// outside any lock on the whole value, and its result is stored only if
// the key still holds what fn was given; if not, fn runs again. So for
// such keys fn may run more than once (and once more under the lock
// before, when it returned a value too large for a tier): it must have no
// effects beyond its result.
func (m *Map) Compute(key []byte, fn func(old []byte, found bool) (value []byte, keep bool)) error {
	if fn == nil {
		return fmt.Errorf("%w: Compute with a nil function", ErrBadOptions)
	}
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	err = m.table.For(h).ComputeExpiring(h, key, m.expiry(m.opts.DefaultTTL), fn)
	if m.largeValues() && (errors.Is(err, segment.ErrLarge) || errors.Is(err, ErrTooLarge)) {
		// The key holds a large value, or fn's result is one: nothing
		// was stored; fn runs again, outside the lock.
		return m.computeLarge(h, key, func(old []byte, found bool) ([]byte, segment.Outcome, error) {
			v, keep := fn(old, found)
			if !keep {
				return nil, segment.Remove, nil
			}
			return v, segment.Store, nil
		})
	}
	return err
}

// Update is Compute that can give up and allocates nothing: fn gets the
// current value (found false if absent) in a buffer valid only while fn
// runs (copy what you keep; the value fn returns may be a slice of it),
// and returns the new value and keep, as for Compute, or an error: then
// nothing is written, and Update returns that error. In a cache map an entry
// it changes keeps its expiry, as with Compute. For a key holding a large
// value, or a large result, fn may run more than once, outside the lock, as
// Compute's does.
func (m *Map) Update(key []byte, fn func(old []byte, found bool) (value []byte, keep bool, err error)) error {
	if fn == nil {
		return fmt.Errorf("%w: Update with a nil function", ErrBadOptions)
	}
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	var ferr error
	err = m.table.For(h).Update(h, key, m.expiry(m.opts.DefaultTTL), func(old []byte, found bool) ([]byte, segment.Outcome) {
		value, keep, err := fn(old, found)
		switch {
		case err != nil:
			ferr = err
			return nil, segment.Leave
		case !keep:
			return nil, segment.Remove
		}
		return value, segment.Store
	})
	if ferr != nil {
		return ferr
	}
	if m.largeValues() && (errors.Is(err, segment.ErrLarge) || errors.Is(err, ErrTooLarge)) {
		return m.computeLarge(h, key, func(old []byte, found bool) ([]byte, segment.Outcome, error) {
			v, keep, err := fn(old, found)
			switch {
			case err != nil:
				return nil, segment.Leave, err
			case !keep:
				return nil, segment.Remove, nil
			}
			return v, segment.Store, nil
		})
	}
	return err
}

// Len is the number of entries (0 once the map is closed), a large value
// counting as one. It takes no
// lock: while other processes write, it is a close estimate. In a cache
// map it counts expired entries whose space has not been reclaimed yet.
func (m *Map) Len() int {
	c, err := m.enterAny(false)
	if err != nil {
		return 0
	}
	defer c.Leave()
	return int(m.table.Len())
}
