package typed

import (
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// maxPooledBuffer caps the buffers a Map keeps for reuse. A buffer grows to
// the largest key or value it has held; without a cap, one large value
// would stay pinned in the pool of every P that ever saw it. 64 KiB is
// 256 times hashmap's default AverageValueSize (256 bytes), so ordinary
// entries never pass it, and what the pool can retain stays bounded (two
// buffers per pooled scratch). A larger entry costs one allocation for
// that call.
const maxPooledBuffer = 64 << 10

// Map is a *hashmap.Map seen through two codecs. It holds no data of its
// own: every call encodes, goes to the shared file, and decodes, so what
// one process Puts another Gets, provided both use the same codecs. It is
// safe for concurrent use, like the hashmap.Map it wraps.
type Map[K, V any] struct {
	m       *hashmap.Map
	keys    Codec[K]
	values  Codec[V]
	scratch sync.Pool                    // of *scratch; per Map, so it is freed with the Map
	batches sync.Pool                    // of *batch, for GetMany and PutMany
	near    atomic.Pointer[nearCache[V]] // nil: no near-cache (see NewCached)
	// retired is the near-cache Close took away, kept for NearStats: its
	// counts stay readable while Close waits for the Gets still using it,
	// and are final once it has. closing makes every Close wait for the
	// one that got there first.
	retired atomic.Pointer[nearCache[V]]
	closing sync.Mutex
}

// scratch is the pair of buffers one call encodes its key and value into
// (or reads the value into). Pooled as a pointer so that Put and Get of
// the pool do not allocate.
type scratch struct{ key, val []byte }

// New wraps m; the Map does not own it, so closing m stays the caller's job,
// and another wrapper with the same codecs (NewCached's, say) may share it.
// keys and values must not be nil, and must be the codecs every other
// process and wrapper uses for this map: wrappers with other codecs on one
// map share one key space (an 8-byte String key is the same key as some
// Int64 key, and overwrites it) and Range stops with ErrDecode at the
// other's entries. Keep two kinds of keys in two maps.
func New[K, V any](m *hashmap.Map, keys Codec[K], values Codec[V]) *Map[K, V] {
	return &Map[K, V]{m: m, keys: keys, values: values}
}

func (t *Map[K, V]) getScratch() *scratch {
	if s, ok := t.scratch.Get().(*scratch); ok {
		return s
	}
	return new(scratch)
}

func (t *Map[K, V]) putScratch(s *scratch) {
	if cap(s.key) > maxPooledBuffer {
		s.key = nil
	}
	if cap(s.val) > maxPooledBuffer {
		s.val = nil
	}
	s.key, s.val = s.key[:0], s.val[:0]
	t.scratch.Put(s)
}

// encodeKey encodes k into s.key, keeping the grown buffer for reuse.
func (t *Map[K, V]) encodeKey(s *scratch, k K) error {
	key, err := t.keys.Append(s.key[:0], k)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	s.key = key
	return nil
}

// encodeValue encodes v into s.val, keeping the grown buffer for reuse.
func (t *Map[K, V]) encodeValue(s *scratch, v V) error {
	val, err := t.values.Append(s.val[:0], v)
	if err != nil {
		return fmt.Errorf("encode value: %w", err)
	}
	s.val = val
	return nil
}

// Get returns the value stored under k, or an error matching
// hashmap.ErrNotFound (a miss allocates nothing), or one matching ErrDecode
// when the stored bytes are not a V. For fixed-width numbers it allocates
// nothing; otherwise what the decoder does. With a near-cache (NewCached)
// the value may be shared with later Gets: treat a []byte, or a V holding
// slices, maps or pointers, as read-only.
func (t *Map[K, V]) Get(k K) (V, error) {
	var zero V
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return zero, fmt.Errorf("get: %w", err)
	}
	if n := t.near.Load(); n != nil {
		return t.getNear(n, s)
	}
	return t.getDirect(s)
}

// getDirect is Get from the map, not the near-cache; s.key holds the
// encoded key.
func (t *Map[K, V]) getDirect(s *scratch) (V, error) {
	val, err := t.m.GetInto(s.val[:0], s.key)
	if err != nil {
		var zero V
		return zero, err
	}
	return t.decodeValue(s, val)
}

// decodeValue decodes the value read into val, keeping val's buffer in s
// for reuse.
func (t *Map[K, V]) decodeValue(s *scratch, val []byte) (V, error) {
	s.val = val
	v, err := t.values.Decode(val)
	if err != nil {
		var zero V
		return zero, fmt.Errorf("get: decode value: %w", err)
	}
	return v, nil
}

// batch holds one GetMany or PutMany call's encoded keys (one buffer, cut
// per key) and the buffers the values are read into (GetMany) or encoded
// into (PutMany). Pooled, like scratch.
type batch struct {
	keyBuf     []byte
	ends       []int // keyBuf[ends[i-1]:ends[i]] is key i
	keys, vals [][]byte

	// PutMany's encoded values: one buffer, cut per value into puts.
	valBuf  []byte
	valEnds []int
	puts    [][]byte
}

// getBatch takes a batch from the pool, or a new one.
func (t *Map[K, V]) getBatch() *batch {
	if b, ok := t.batches.Get().(*batch); ok {
		return b
	}
	return new(batch)
}

// encodeAll appends the encoding of each item to buf and its end to ends,
// up to the first item that does not encode; that item's error, if any,
// is returned with buf and ends as they were before it (so len(ends) is
// its index).
func encodeAll[T any](c Codec[T], buf []byte, ends []int, items []T) ([]byte, []int, error) {
	for _, x := range items {
		out, err := c.Append(buf, x)
		if err != nil {
			return buf, ends, err
		}
		buf, ends = out, append(ends, len(out))
	}
	return buf, ends, nil
}

// cut returns buf cut at ends into dst[:0]: piece i is buf[ends[i-1]:ends[i]].
// Cutting waits until buf is whole, since appending may move it.
func cut(dst [][]byte, buf []byte, ends []int) [][]byte {
	dst = dst[:0]
	start := 0
	for _, end := range ends {
		dst = append(dst, buf[start:end:end])
		start = end
	}
	return dst
}

// GetMany looks up a batch of keys as hashmap.Map.GetMany does and decodes
// each value found: values[i] and found[i] become keys[i]'s value and true,
// or the zero V and false. keys, values and found must have the same length.
// An error (a key that does not encode, ErrDecode, or the map's own) stops
// the batch, with values and found partly filled. With a near-cache each key
// goes through it, as Get does. A batch of fixed-width numbers allocates
// nothing.
func (t *Map[K, V]) GetMany(keys []K, values []V, found []bool) error {
	if len(values) != len(keys) || len(found) != len(keys) {
		return fmt.Errorf("get many: %d keys, %d values and %d found flags", len(keys), len(values), len(found))
	}
	if n := t.near.Load(); n != nil {
		return t.getManyNear(n, keys, values, found)
	}
	b := t.getBatch()
	defer t.putBatch(b)
	var err error
	if b.keyBuf, b.ends, err = encodeAll(t.keys, b.keyBuf[:0], b.ends[:0], keys); err != nil {
		return fmt.Errorf("get many: key %d: encode key: %w", len(b.ends), err)
	}
	b.keys = cut(b.keys, b.keyBuf, b.ends)
	for len(b.vals) < len(keys) {
		b.vals = append(b.vals, nil)
	}
	vals := b.vals[:len(keys)]
	if err := t.m.GetMany(b.keys, vals); err != nil {
		return fmt.Errorf("get many: %w", err)
	}
	var zero V
	for i, val := range vals {
		if val == nil {
			values[i], found[i] = zero, false
			continue
		}
		v, err := t.values.Decode(val)
		if err != nil {
			return fmt.Errorf("get many: key %d: decode value: %w", i, err)
		}
		values[i], found[i] = v, true
	}
	return nil
}

// getManyNear is GetMany through the near-cache: key by key, as Get.
func (t *Map[K, V]) getManyNear(n *nearCache[V], keys []K, values []V, found []bool) error {
	s := t.getScratch()
	defer t.putScratch(s)
	for i, k := range keys {
		if err := t.encodeKey(s, k); err != nil {
			return fmt.Errorf("get many: key %d: %w", i, err)
		}
		v, err := t.getNear(n, s)
		switch {
		case errors.Is(err, hashmap.ErrNotFound):
			var zero V
			values[i], found[i] = zero, false
		case err != nil:
			return fmt.Errorf("get many: key %d: %w", i, err)
		default:
			values[i], found[i] = v, true
		}
	}
	return nil
}

// putBatch returns b to the pool, letting go of buffers grown past
// maxPooledBuffer, as putScratch does.
func (t *Map[K, V]) putBatch(b *batch) {
	if cap(b.keyBuf) > maxPooledBuffer {
		b.keyBuf = nil
	}
	if cap(b.valBuf) > maxPooledBuffer {
		b.valBuf = nil
	}
	if cap(b.keys) > maxPooledBuffer/8 || cap(b.vals) > maxPooledBuffer/8 { // a huge batch: let its index slices go too
		b.ends, b.valEnds, b.keys, b.puts, b.vals = nil, nil, nil, nil, nil
	}
	clear(b.puts)
	// The value buffers together, not each, are held to the cap: one per
	// key of the largest batch would otherwise stay pooled for good.
	kept := 0
	for i, v := range b.vals {
		if kept += cap(v); kept > maxPooledBuffer {
			b.vals[i] = nil
		}
	}
	clear(b.keys) // the keys point into keyBuf; nothing else to keep alive
	t.batches.Put(b)
}

// Put stores v under k, replacing any value, with hashmap.Map.Put's
// errors (ErrFull, ErrTooLarge...). Key and value are encoded into pooled
// buffers, so Put allocates nothing for codecs whose Append does not.
func (t *Map[K, V]) Put(k K, v V) error {
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if err := t.encodeValue(s, v); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	return t.m.Put(s.key, s.val)
}

// PutMany stores values[i] under keys[i] for every i, as hashmap.Map.PutMany
// does. A key or value that does not encode ends the batch before it, after
// the keys before it are stored. It returns how many keys it stored and the
// first error. keys and values must have the same length.
func (t *Map[K, V]) PutMany(keys []K, values []V) (int, error) {
	if len(values) != len(keys) {
		return 0, fmt.Errorf("put many: %d keys and %d values", len(keys), len(values))
	}
	b := t.getBatch()
	defer t.putBatch(b)
	// The batch ends before the first key or value that does not encode:
	// values are encoded only as far as the keys went.
	var keyErr, valErr, encodeErr error
	b.keyBuf, b.ends, keyErr = encodeAll(t.keys, b.keyBuf[:0], b.ends[:0], keys)
	b.valBuf, b.valEnds, valErr = encodeAll(t.values, b.valBuf[:0], b.valEnds[:0], values[:len(b.ends)])
	switch {
	case valErr != nil:
		encodeErr = fmt.Errorf("put many: key %d: encode value: %w", len(b.valEnds), valErr)
	case keyErr != nil:
		encodeErr = fmt.Errorf("put many: key %d: encode key: %w", len(b.ends), keyErr)
	}
	b.keys, b.puts = cut(b.keys, b.keyBuf, b.ends[:len(b.valEnds)]), cut(b.puts, b.valBuf, b.valEnds)
	n, err := t.m.PutMany(b.keys, b.puts)
	if err != nil {
		return n, err // it names the key's index already
	}
	return n, encodeErr
}

// PutWithTTL is Put with an entry that expires ttl from now, for maps
// created as caches (hashmap.Options.Cache); see hashmap.Map.PutWithTTL.
func (t *Map[K, V]) PutWithTTL(k K, v V, ttl time.Duration) error {
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return fmt.Errorf("put with TTL: %w", err)
	}
	if err := t.encodeValue(s, v); err != nil {
		return fmt.Errorf("put with TTL: %w", err)
	}
	return t.m.PutWithTTL(s.key, s.val, ttl)
}

// PutIfAbsent stores v under k only if k is absent, and reports whether
// it did: the building block for "first writer wins" across processes.
func (t *Map[K, V]) PutIfAbsent(k K, v V) (bool, error) {
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return false, fmt.Errorf("put if absent: %w", err)
	}
	if err := t.encodeValue(s, v); err != nil {
		return false, fmt.Errorf("put if absent: %w", err)
	}
	return t.m.PutIfAbsent(s.key, s.val)
}

// Delete removes k and reports whether it was present. It does not decode
// the stored value, so it also removes entries that no longer decode.
func (t *Map[K, V]) Delete(k K) (bool, error) {
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return false, fmt.Errorf("delete: %w", err)
	}
	return t.m.Delete(s.key)
}

// DeleteMany removes every key in keys, as hashmap.Map.DeleteMany does
// (each removal on its own, the batch's cache misses overlapped), and
// returns how many were present. A key that does not encode ends the batch
// before it, after the keys before it are removed.
func (t *Map[K, V]) DeleteMany(keys []K) (int, error) {
	b := t.getBatch()
	defer t.putBatch(b)
	var encodeErr error
	if b.keyBuf, b.ends, encodeErr = encodeAll(t.keys, b.keyBuf[:0], b.ends[:0], keys); encodeErr != nil {
		encodeErr = fmt.Errorf("delete many: key %d: encode key: %w", len(b.ends), encodeErr)
	}
	b.keys = cut(b.keys, b.keyBuf, b.ends)
	n, err := t.m.DeleteMany(b.keys)
	if err != nil {
		return n, err // it names the key's index already
	}
	return n, encodeErr
}

// Compute atomically replaces the value of k with what fn returns, as
// hashmap.Map.Compute does: fn gets the decoded current value (zero V and
// found false if absent) and returns the new value and keep (false removes
// k). No writer in any process changes k in between. fn runs under the
// segment's lock: keep it short and do not call the map from it. If the
// stored value does not decode (ErrDecode; fn is not called) or fn's value
// does not encode, nothing is written. In a cache map an entry it changes
// keeps its expiry, and one it creates lives for DefaultTTL.
func (t *Map[K, V]) Compute(k K, fn func(old V, found bool) (V, bool)) error {
	if fn == nil {
		return fmt.Errorf("compute: %w: a nil function", hashmap.ErrBadOptions)
	}
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return fmt.Errorf("compute: %w", err)
	}
	return t.m.Update(s.key, func(old []byte, found bool) ([]byte, bool, error) {
		var prev V
		if found {
			var err error
			if prev, err = t.values.Decode(old); err != nil {
				return nil, false, fmt.Errorf("compute: decode value: %w", err)
			}
		}
		next, keep := fn(prev, found)
		if !keep {
			return nil, false, nil
		}
		if err := t.encodeValue(s, next); err != nil {
			return nil, false, fmt.Errorf("compute: %w", err)
		}
		return s.val, true, nil
	})
}

// Range iterates over every entry with hashmap.Map.Range's guarantees (a
// consistent view per segment, no lock held while the loop body runs),
// decoding each as it yields it. If the map is closed, or a key or value
// does not decode, iteration stops and the error is stored in *errp (a nil
// errp ignores it). Damage and stuck locks do not stop it: what they leave
// out is reported at the end (ErrCorrupt, ErrTimeout), as by
// hashmap.Map.Range. Delete removes entries that do not decode.
func (t *Map[K, V]) Range(errp *error) iter.Seq2[K, V] {
	// It reads through hashmap.Map.RangeView, since each entry is decoded
	// at once, so iterating over numbers allocates next to nothing.
	if errp == nil {
		errp = new(error) // the caller does not want the error
	}
	return func(yield func(K, V) bool) {
		for kb, vb := range t.m.RangeView(errp) { // each entry is decoded at once
			k, err := t.keys.Decode(kb)
			if err != nil {
				*errp = fmt.Errorf("range: decode key: %w", err)
				return
			}
			v, err := t.values.Decode(vb)
			if err != nil {
				*errp = fmt.Errorf("range: decode value of key %v: %w", k, err)
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// Len is the number of entries in the underlying map, of any type: entries
// written through other codecs or the raw API count too. Like
// hashmap.Map.Len it is an estimate while other processes write.
func (t *Map[K, V]) Len() int { return t.m.Len() }

// Unwrap returns the raw map, for what the typed layer does not cover:
// Close, Stats, Check, Locks, Contains on encoded keys.
func (t *Map[K, V]) Unwrap() *hashmap.Map { return t.m }
