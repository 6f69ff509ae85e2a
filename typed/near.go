package typed

import (
	"bytes"
	"fmt"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/ristretto/v2"

	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/internal/inflight"
)

// A near-cache keeps decoded values in this process (a ristretto cache), so
// that a Get of a value that is expensive to decode costs a lookup instead.
// Each value is kept with the hashmap.Version it was read at and is served
// only while the map says it is unchanged: no write, by any process, has
// changed or removed a value of its segment since, and it has not expired.
// So a process never returns a value older than a write it has observed
// complete (seen its effect, or been told of it by the writer through the
// map). Writes go to the map as always; there is nothing to invalidate.

// nearItem is one cached value: the encoded key (to tell keys whose hashes
// collide apart), the decoded value and the version it was read at.
type nearItem[V any] struct {
	key     []byte
	value   V
	version hashmap.Version
}

type nearCache[V any] struct {
	c            *ristretto.Cache[uint64, *nearItem[V]]
	hits, misses atomic.Uint64
	// users counts the calls using c: ristretto's Close must not run under
	// them (a Set then sends on a closed channel and panics).
	users inflight.Gate
}

// ristretto sizes its admission counters from the entry count up front,
// about 32 bytes an entry (half a GiB at this bound), whether or not the
// entries ever come.

// MaxNearEntries is the largest near-cache NewCached makes: its memory is
// taken up front in proportion to the entry count.
const MaxNearEntries = 1 << 24

// NewCached is New with a near-cache of up to maxEntries decoded values.
// Values it returns may be shared with other callers and with later Gets:
// treat them as read-only (a []byte or a struct holding slices or maps must
// not be modified). Close the Map to stop the cache's goroutines; the
// hashmap.Map stays open.
func NewCached[K, V any](m *hashmap.Map, keys Codec[K], values Codec[V], maxEntries int64) (*Map[K, V], error) {
	if maxEntries < 1 || maxEntries > MaxNearEntries {
		return nil, fmt.Errorf("typed: near-cache of %d entries: want 1 to %d", maxEntries, int64(MaxNearEntries))
	}
	c, err := ristretto.NewCache(&ristretto.Config[uint64, *nearItem[V]]{
		NumCounters: maxEntries * 10, // ristretto's advice: ten counters per item kept
		MaxCost:     maxEntries,
		BufferItems: 64,
		// uint64 keys are their own hash; the item holds the key to
		// settle collisions, so no second hash is needed.
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("typed: near-cache: %w", err)
	}
	t := New(m, keys, values)
	t.near.Store(&nearCache[V]{c: c})
	return t, nil
}

// getNear is Get through near-cache n; s.key holds the encoded key.
func (t *Map[K, V]) getNear(n *nearCache[V], s *scratch) (V, error) {
	var zero V
	h := xxhash.Sum64(s.key)
	u := n.users.Enter(h)
	if u == nil {
		return t.getDirect(s) // the near-cache is being closed
	}
	defer u.Leave()
	if it, ok := n.c.Get(h); ok && bytes.Equal(it.key, s.key) && t.m.Unchanged(it.version) {
		n.hits.Add(1)
		return it.value, nil
	}
	n.misses.Add(1)
	val, ver, err := t.m.GetVersioned(s.val[:0], s.key)
	if err != nil {
		return zero, err
	}
	v, err := t.decodeValue(s, val)
	if err != nil {
		return zero, err
	}
	n.c.Set(h, &nearItem[V]{key: bytes.Clone(s.key), value: v, version: ver}, 1)
	return v, nil
}

// NearStats reports the near-cache's hits (values served without reading
// the map) and misses since the Map was made, and after Close its final
// counts; zeros without a near-cache.
func (t *Map[K, V]) NearStats() (hits, misses uint64) {
	n := t.near.Load()
	if n == nil {
		// Closed or closing: the counts go on from the retired cache, so
		// that they never go back (Close retires it before it takes it
		// away, and Gets still inside it count on until Close's wait ends).
		if n = t.retired.Load(); n == nil {
			return 0, 0
		}
	}
	return n.hits.Load(), n.misses.Load()
}

// Close stops the near-cache, if any, and drops what it holds; the
// hashmap.Map stays open. Using the Map afterwards reads the map directly.
// Close waits for Gets already using the near-cache, and a second Close
// for the first; it is safe to call while others run.
func (t *Map[K, V]) Close() error {
	t.closing.Lock()
	defer t.closing.Unlock()
	if n := t.near.Load(); n != nil {
		t.retired.Store(n)
		t.near.Store(nil)
		n.users.Close()
		n.c.Close()
	}
	return nil
}
