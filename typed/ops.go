package typed

import (
	"fmt"
	"time"
)

// Touch sets the expiry of k's entry in a cache map to ttl from now, and
// reports whether k was there (present, not expired), in one step under
// the key's segment lock: see hashmap.Map.Touch. The value is neither
// decoded nor changed. A near-cache (NewCached) serves the entry again
// only after reading it anew, with its new expiry.
func (t *Map[K, V]) Touch(k K, ttl time.Duration) (bool, error) {
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return false, fmt.Errorf("touch: %w", err)
	}
	return t.m.Touch(s.key, ttl)
}

// GetTTL returns the time left before k's entry expires; found is false
// when k is absent or expired, and ttl is hashmap.NoExpiry for an entry
// that never expires: see hashmap.Map.GetTTL. It does not decode the
// value, nor go through a near-cache.
func (t *Map[K, V]) GetTTL(k K) (ttl time.Duration, found bool, err error) {
	s := t.getScratch()
	defer t.putScratch(s)
	if err := t.encodeKey(s, k); err != nil {
		return 0, false, fmt.Errorf("get TTL: %w", err)
	}
	return t.m.GetTTL(s.key)
}

// Clear removes every entry of the underlying map, of any type (entries
// written through other codecs or the raw API too), one segment at a
// time: see hashmap.Map.Clear for what it promises readers and writers of
// every process, and after a crash. A near-cache serves none of the
// removed values afterwards.
func (t *Map[K, V]) Clear() error { return t.m.Clear() }

// DeleteFunc removes every entry for which fn returns true, and returns
// how many it removed: hashmap.Map.DeleteFunc with each key and value
// decoded. fn runs under a segment's lock: keep it short and do not call
// the map from it. An entry whose key or value does not decode with the
// map's codecs is not passed to fn and stays; once every segment has been
// gone through, DeleteFunc returns an error matching ErrDecode that counts
// such entries and names the first (remove them with Delete, or the raw
// map's DeleteFunc). Values decoded for fn are fn's to keep.
func (t *Map[K, V]) DeleteFunc(fn func(k K, v V) bool) (int, error) {
	if fn == nil {
		return t.m.DeleteFunc(nil) // its ErrBadOptions
	}
	undecodable := 0
	var first error
	n, err := t.m.DeleteFunc(func(kb, vb []byte) bool {
		k, err := t.keys.Decode(kb)
		if err != nil {
			if undecodable++; first == nil {
				first = fmt.Errorf("decode key: %w", err)
			}
			return false
		}
		v, err := t.values.Decode(vb)
		if err != nil {
			if undecodable++; first == nil {
				first = fmt.Errorf("decode value of key %v: %w", k, err)
			}
			return false
		}
		return fn(k, v)
	})
	if err != nil {
		return n, err
	}
	if undecodable > 0 {
		return n, fmt.Errorf("delete func: %d entries left that do not decode, the first: %w", undecodable, first)
	}
	return n, nil
}
