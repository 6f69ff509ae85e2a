package hashmap

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/keyhash"
	"github.com/sharedmap/sharedmap/segment"
)

// The ways into a segment's write, one per public call: Put overwrites
// the value in place outside the in-flight gate when it can (see
// fastPuts), and otherwise stores inside the gate (putEntered);
// PutWithTTL, PutIfAbsent and PutManyAdded (and PutMany through it) each
// store inside the gate with their own expiry and mode, PutManyAdded and
// PutAll taking Put's fast path key by key where it may (putBatched);
// Compute and Update (map.go) store what their function returns.

// Put stores value under key, replacing any value. Both are copied into the
// file. It fails with ErrFull when the map is at its bloat limit; nothing is
// written then. In a store map a value too large for a tier is stored in
// parts (see MaxValueBytes): ErrTooLarge only beyond MaxValueBytes, or
// under a key longer than MaxLargeKeyBytes. In a cache map an entry larger
// than a tier is ErrTooLarge; the entry lives for DefaultTTL, and Put
// never fails with ErrFull: it evicts.
func (m *Map) Put(key, value []byte) error {
	h := keyhash.Inline(key)
	if h == 0 {
		h = xxhash.Sum64(key)
	}
	seg := m.table.For(h)
	// Not once Close has begun (the gate closed): such a call returns
	// ErrClosed. One that checked before is a call already running, which
	// CloseFastPaths waits for.
	tried := m.fastPuts && !m.gate.Closed()
	if tried {
		if done, _ := seg.TryOverwriteFastLedger(h, key, value); done {
			return nil // see fastPuts
		}
	}
	return m.putEntered(seg, h, key, value, tried)
}

// putEntered is Put inside the in-flight gate: the store of every Put that
// did not overwrite a value in place outside it. overwriteTried says Put
// tried that overwrite first and it did not apply (the key absent, or the
// value's size another), which the segment takes on from where it stopped.
func (m *Map) putEntered(seg *segment.Segment, h uint64, key, value []byte, overwriteTried bool) error {
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	if overwriteTried {
		_, err = seg.PutGeneral(h, key, value, m.expiry(m.opts.DefaultTTL), segment.Replace)
	} else {
		_, err = seg.PutExpiring(h, key, value, m.expiry(m.opts.DefaultTTL), segment.Replace)
	}
	if err != nil {
		_, err = m.storeFailed(err, h, key, value, false)
	}
	return err
}

// storeFailed takes over a store of value under key (hashed to h) that
// the segment refused with err: a key holding a large value, or a value
// too large for a tier, go the large way (putLarge); other errors, a
// cache map's ErrTooLarge among them, are returned as they are.
func (m *Map) storeFailed(err error, h uint64, key, value []byte, ifAbsent bool) (inserted bool, _ error) {
	switch {
	case m.wantsLarge(err, key, value):
		return m.putLarge(h, key, value, ifAbsent)
	case m.layout.Cache && errors.Is(err, ErrTooLarge):
		return false, fmt.Errorf("%w; a cache map stores no value larger than a tier", err)
	}
	return false, err
}

// NoExpiry, as PutWithTTL's ttl, stores an entry that never expires (it
// may still be evicted), whatever the map's DefaultTTL.
const NoExpiry = time.Duration(math.MaxInt64)

// PutWithTTL is Put for a cache map, with an entry that expires ttl from
// now: from then on no process sees it, and its space is reclaimed when
// needed. ttl must be positive (NoExpiry: never); ErrNotCache on a map
// created without Options.Cache.
func (m *Map) PutWithTTL(key, value []byte, ttl time.Duration) error {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return err
	}
	defer c.Leave()
	if !m.layout.Cache {
		return ErrNotCache
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: TTL %v must be positive (hashmap.NoExpiry for an entry that never expires)", ErrBadOptions, ttl)
	}
	_, err = m.table.For(h).PutExpiring(h, key, value, m.expiry(ttl), segment.Replace)
	return err
}

// expiry is the expiry time of an entry stored now to live ttl (0: never,
// as for NoExpiry).
func (m *Map) expiry(ttl time.Duration) int64 {
	if ttl <= 0 || ttl == NoExpiry || !m.layout.Cache {
		return 0
	}
	now := m.table.Now()
	if now > 0 && int64(ttl) > math.MaxInt64-now {
		return math.MaxInt64 // centuries away: as good as never, and not in the past
	}
	return now + int64(ttl)
}

// PutIfAbsent stores value under key only if the key is absent (or, in a
// cache map, expired), and reports whether it did.
func (m *Map) PutIfAbsent(key, value []byte) (bool, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	inserted, err := m.table.For(h).PutExpiring(h, key, value, m.expiry(m.opts.DefaultTTL), segment.IfAbsent)
	switch {
	case errors.Is(err, segment.ErrLarge):
		return false, nil // present, with a large value
	case err != nil:
		return m.storeFailed(err, h, key, value, true)
	}
	return inserted, nil
}

// PutMany stores values[i] under keys[i] for every i, in order, as a Put
// of each would: each key's write is atomic and visible to every process
// as soon as it is done, but the batch is not a transaction. Like GetMany
// it overlaps the cache misses of the lookups every write begins with,
// so for random keys in a map larger than the CPU's caches a key costs a
// fraction of a lone Put. It stops at the first error, returning how many
// keys it stored before it; the error names the key's index and matches
// what Put would return (ErrFull, ErrTooLarge, ...). values must be as
// long as keys. PutAll, which stores a batch in the file's order rather
// than the slice's, fills a map faster.
func (m *Map) PutMany(keys, values [][]byte) (stored int, err error) {
	stored, _, err = m.PutManyAdded(keys, values)
	return stored, err
}

// PutManyAdded is PutMany that also says how many of the keys it stored
// were absent until then (added); it replaced the values of the others.
// Each key is counted as its own write finds it, so the counts are exact
// whatever other processes write at the same time (a key stored twice in
// one batch is added once and replaced once).
func (m *Map) PutManyAdded(keys, values [][]byte) (stored, added int, err error) {
	if len(values) != len(keys) {
		return 0, 0, fmt.Errorf("PutMany: %d values for %d keys", len(values), len(keys))
	}
	c, err := m.enterAny(true)
	if err != nil {
		return 0, 0, err
	}
	defer c.Leave()
	b := keyBatches{keys: keys}
	for b.next(m.table) {
		expiry := m.expiry(m.opts.DefaultTTL) // per batch: a long call must not age later keys
		for i, k := range b.batch {
			inserted, err := m.putBatched(b.hashes[i], k, values[b.start+i], expiry)
			if err != nil {
				return b.start + i, added, fmt.Errorf("PutMany: key %d: %w", b.start+i, err)
			}
			if inserted {
				added++
			}
		}
	}
	return len(keys), added, nil
}

// putBatched is one key's store of a batch call (PutManyAdded, PutAll),
// inside the in-flight gate: as Put does it, the fast ledger path first
// where Put may take it (see fastPuts), then the general path; elsewhere
// PutExpiring, with expiry. It reports whether the key was absent.
func (m *Map) putBatched(h uint64, key, value []byte, expiry int64) (inserted bool, err error) {
	inserted, err = m.putBatchedSmall(h, key, value, expiry)
	if err != nil {
		return m.storeFailed(err, h, key, value, false)
	}
	return inserted, nil
}

// putBatchedSmall is putBatched within a tier.
func (m *Map) putBatchedSmall(h uint64, key, value []byte, expiry int64) (inserted bool, err error) {
	seg := m.table.For(h)
	if !m.fastPuts {
		return seg.PutExpiring(h, key, value, expiry, segment.Replace)
	}
	if done, inserted := seg.TryOverwriteFastLedger(h, key, value); done {
		return inserted, nil
	}
	return seg.PutGeneral(h, key, value, expiry, segment.Replace)
}
