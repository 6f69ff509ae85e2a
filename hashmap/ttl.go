package hashmap

import (
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Touch sets the expiry of key's entry in a cache map to ttl from now
// (NoExpiry: never) and reports whether the key was present and not expired.
// It is one atomic step under the key's segment lock: an entry that expired
// (by Options.Now) or was deleted is never brought back, and the value is
// left as it is. Every process then sees the new expiry. A process killed in
// the middle leaves the old expiry or the new one. ttl must be positive;
// ErrNotCache on a map created without Options.Cache.
func (m *Map) Touch(key []byte, ttl time.Duration) (bool, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, true)
	if err != nil {
		return false, err
	}
	defer c.Leave()
	if !m.layout.Cache {
		return false, ErrNotCache
	}
	if ttl <= 0 {
		return false, fmt.Errorf("%w: TTL %v must be positive (hashmap.NoExpiry for an entry that never expires)", ErrBadOptions, ttl)
	}
	return m.table.For(h).Touch(h, key, m.expiry(ttl))
}

// GetTTL returns the time left before key's entry expires, by the map's
// clock (Options.Now): found is false, with no error, when the key is
// absent or has expired; ttl is NoExpiry for an entry that never expires,
// which every entry of a map that is not a cache is (no error there: its
// entries have no expiry). It reads as Get does, lock-free while no writer
// interferes, so it sees the latest completed Touch, PutWithTTL or Put
// of any process; the entry may still expire, or be changed, the moment
// after. It copies no value and, unlike Get, does not mark the entry used
// for eviction.
func (m *Map) GetTTL(key []byte) (ttl time.Duration, found bool, err error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, false)
	if err != nil {
		return 0, false, err
	}
	defer c.Leave()
	expiry, now, found, err := m.table.For(h).Expiry(h, key)
	if err != nil {
		return 0, false, err
	}
	m.countLookup(h, found)
	switch {
	case !found:
		return 0, false, nil
	case expiry == 0:
		return NoExpiry, true, nil
	}
	return time.Duration(expiry - now), true, nil // positive: found means not expired at now
}
