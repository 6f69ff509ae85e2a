package hashmap

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/keyhash"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/segment"
)

// Get returns a copy of the value stored under key, or an error matching
// ErrNotFound.
func (m *Map) Get(key []byte) ([]byte, error) {
	v, err := m.GetInto(nil, key)
	if err == nil && v == nil {
		v = []byte{}
	}
	return v, err
}

// GetInto appends the value stored under key to dst and returns the extended
// slice; with enough capacity in dst it allocates nothing. ErrNotFound if
// the key is absent (dst is returned unchanged). key may lie in dst's
// spare capacity (one buffer for both): the lookup then copies the key
// first, an allocation.
func (m *Map) GetInto(dst, key []byte) ([]byte, error) {
	if m.gate.Closed() {
		return dst, ErrClosed
	}
	key = keyApart(dst, key)
	h := keyhash.Inline(key) // see keyhash: a call here costs more than hashing
	if h == 0 {
		h = xxhash.Sum64(key)
	}
	// getBatched, written out: one frame less on every Get's path (see
	// segment.Table.Get for why instructions count there).
	// Uncounted (see enter): if Close began meanwhile, what was read may
	// be the zeros it leaves behind.
	v, answer := m.table.TryGet(h, key, dst)
	if answer == segment.Unsure {
		return m.getEntered(h, key, dst)
	}
	m.countLookup(h, answer == segment.Found)
	switch {
	case m.gate.Closed():
		return dst, ErrClosed
	case answer != segment.Found:
		return dst, ErrNotFound
	}
	return v, nil
}

// GetChecked is GetInto that also verifies the entry's checksum: a value
// whose bytes changed after it was written (damage on disk, a write torn by
// a machine crash) gives an error matching ErrCorrupt, naming the key,
// instead of the bytes. It costs a good deal more than a GetInto, the more
// so the smaller the value. In a map created with NoChecksums it verifies
// nothing.
func (m *Map) GetChecked(dst, key []byte) ([]byte, error) {
	// Other lookups trust the file; this one reads by the general path and
	// hashes the entry, so it costs a good deal more than a GetInto, the
	// more so the smaller the value (the lookup is then most of a
	// GetInto's time, and the hash and the general path are added to it).
	// mapctl get uses it.
	h := xxhash.Sum64(key)
	key = keyApart(dst, key)
	return m.lookupEntered(h, key, dst, func() ([]byte, bool, error) { return m.table.For(h).GetChecked(h, key, dst) })
}

// keyApart returns key, or a copy of it if it lies in dst's spare
// capacity, where a lookup appends the value: an optimistic read appends
// before it knows whether a writer spoiled it, and its next look must
// compare the key's own bytes, not the value's.
func keyApart(dst, key []byte) []byte {
	if offheap.InSpare(dst, key) {
		return bytes.Clone(key)
	}
	return key
}

// getEntered is GetInto when its optimistic read could not answer (a
// writer came between, or the entry is beyond what that read follows): the
// lookup by the segment's read lock, inside the in-flight gate.
func (m *Map) getEntered(h uint64, key, dst []byte) ([]byte, error) {
	return m.lookupEntered(h, key, dst, func() ([]byte, bool, error) { return m.table.GetConsistent(h, key, dst) })
}

// lookupEntered runs a lookup of the key hashed to h, appending to dst,
// inside the in-flight gate, counts it as a hit or a miss and answers as
// GetInto does.
func (m *Map) lookupEntered(h uint64, key, dst []byte, lookup func() ([]byte, bool, error)) ([]byte, error) {
	c, err := m.enter(h, false)
	if err != nil {
		return dst, err
	}
	defer c.Leave()
	v, found, err := lookup()
	if errors.Is(err, segment.ErrLarge) {
		v, found, err = m.getLarge(h, key, dst)
	}
	if err != nil {
		return dst, err
	}
	m.countLookup(h, found)
	if !found {
		return dst, ErrNotFound
	}
	return v, nil
}

// getBatched is one key's lookup for GetMany, whose caller is inside the
// in-flight gate: of key (hashed to h) into dst, optimistic first and by
// the read lock when that could not answer, counted as a hit or a miss.
func (m *Map) getBatched(h uint64, key, dst []byte) ([]byte, bool, error) {
	key = keyApart(dst, key)
	v, answer := m.table.TryGet(h, key, dst)
	found := answer == segment.Found
	if answer == segment.Unsure {
		var err error
		v, found, err = m.table.GetConsistent(h, key, dst)
		if errors.Is(err, segment.ErrLarge) {
			v, found, err = m.getLarge(h, key, dst)
		}
		if err != nil {
			return dst, false, err
		}
	}
	m.countLookup(h, found)
	return v, found, nil
}

// GetMany looks up every key and sets values[i] to the value of keys[i],
// appended to values[i][:0] (with enough capacity it allocates nothing), or
// to nil when the key is absent (a present empty value is non-nil). It
// answers what a GetInto per key would, each key read consistently on its
// own, with the lookups' cache misses overlapped. values must be as long as
// keys; values[i] may hold keys[i] in its spare capacity (see GetInto) but
// must share no memory with another key. An error (ErrCorrupt, say) stops
// the batch: it names the key's index, and only the values before it are set
// (the failing key's may hold part of a read).
func (m *Map) GetMany(keys, values [][]byte) error {
	if len(values) != len(keys) {
		return fmt.Errorf("GetMany: %d values for %d keys", len(values), len(keys))
	}
	c, err := m.enterAny(false)
	if err != nil {
		return err
	}
	defer c.Leave()
	b := keyBatches{keys: keys}
	for b.next(m.table) {
		for i, k := range b.batch {
			v, found, err := m.getBatched(b.hashes[i], k, values[b.start+i][:0])
			if err != nil {
				return fmt.Errorf("GetMany: key %d: %w", b.start+i, err)
			}
			switch {
			case !found:
				v = nil
			case v == nil:
				v = []byte{}
			}
			values[b.start+i] = v
		}
	}
	return nil
}

// keyBatches walks the keys of a batch call (GetMany, PutMany, DeleteMany)
// getManyBatch at a time: next hashes a batch and requests every key's
// slot and home runs (segment.Table.Prefetch) before the caller looks any
// of them up, so the lookups overlap their cache misses. A value, not a
// closure, so that the hashes stay on the caller's stack.
type keyBatches struct {
	keys   [][]byte
	start  int      // index in keys of batch[0]
	batch  [][]byte // the current batch
	hashes [getManyBatch]uint64
}

// next moves to the next batch and requests its lines; false after the
// last.
func (b *keyBatches) next(t *segment.Table) bool {
	b.start += len(b.batch)
	if b.start >= len(b.keys) {
		return false
	}
	b.batch = b.keys[b.start:min(b.start+getManyBatch, len(b.keys))]
	for i, k := range b.batch {
		b.hashes[i] = xxhash.Sum64(k)
	}
	t.Prefetch(b.hashes[:len(b.batch)], b.batch)
	return true
}

// getManyBatch is how many lookups GetMany overlaps: enough to keep many
// misses in flight, few enough that a key's lines are still in cache when
// its turn comes. Batches of 4 to 16 do about as well; the largest
// overlaps the most misses.
const getManyBatch = 16

// Contains reports whether key is present, without copying its value.
func (m *Map) Contains(key []byte) (bool, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, false)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	found, err := m.table.For(h).Has(h, key)
	if err == nil {
		m.countLookup(h, found)
	}
	return found, err
}

// Version says what state of its segment a value was read at; see
// GetVersioned. The zero Version is never current.
type Version struct {
	valid   bool
	segment int
	seq     uint64
	expiry  int64
}

// GetVersioned is GetInto that also returns the Version the value was read
// at, for caches of decoded values: as long as Unchanged(v) reports true,
// the value is still the key's value in the file, for every process. Any
// write that changes or removes a value of the key's segment (in any
// process) ends that, as does the entry's expiry in a cache map.
func (m *Map) GetVersioned(dst, key []byte) ([]byte, Version, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, false)
	if err != nil {
		return dst, Version{}, err
	}
	defer c.Leave()
	var s *segment.Segment
	var v []byte
	var found bool
	var seq uint64
	var expiry int64
	for {
		// The version names the segment the value was read in, which must
		// be the key's when the read is over: a split may move the key to
		// another, whose writes would not move this one's sequence (keys
		// only ever move to segments split into later, so a key that maps
		// to s after the read was read in s).
		s = m.table.For(h)
		v, found, seq, expiry, err = s.GetVersioned(h, keyApart(dst, key), dst)
		if errors.Is(err, segment.ErrLarge) {
			v, found, seq, err = m.getLargeVersioned(s, h, keyApart(dst, key), dst)
		}
		if err != nil {
			return dst, Version{}, err
		}
		if m.table.SegmentOf(h) == s.Index() {
			break
		}
	}
	m.countLookup(h, found)
	if !found {
		return dst, Version{}, ErrNotFound
	}
	return v, Version{valid: true, segment: int(s.Index()), seq: seq, expiry: expiry}, nil
}

// Unchanged reports whether a value read at v is still current: no write
// has changed or removed a value of its segment since, and it has not
// expired. It reads one word of the file (and the clock, for entries that
// expire).
func (m *Map) Unchanged(v Version) bool {
	if !v.valid || v.segment >= int(m.layout.MaxSegments) || m.gate.Closed() {
		return false
	}
	// Uncounted, as GetInto's fast path: after Close the word may read as
	// the zeros it leaves behind.
	if m.table.Segment(v.segment).Seq() != v.seq || m.gate.Closed() {
		return false
	}
	return v.expiry == 0 || m.table.Now() < v.expiry
}
