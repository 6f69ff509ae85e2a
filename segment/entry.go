package segment

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Hidden is the most negative time, passed at every clock (a TTL is
// positive, so now + TTL is above it whatever now is). Like any expired
// entry, a placeholder is absent to Get, Has, Range, GetVersioned and
// GetChecked; Put, PutIfAbsent, Compute and Update see it as absent and
// replace it, a Delete removes it, and the eviction hand reclaims it
// whenever it passes, reference bit or not. hashmap keeps its fill tokens
// so (docs/FORMAT.md section 3.12).

// Hidden is an expiry no time to live gives: a cache map's entry stored with
// it is a placeholder for its key, held in the file but absent to every reader
// and replaced by any write, as an expired entry is. Only GetEntry and
// UpdateEntry see it.
const Hidden int64 = math.MinInt64

// GetEntry appends to dst key's value as stored, expired or not, with its
// expiry (0: never); found reports whether there is an entry at all. It sets
// no reference bit.
func (s *Segment) GetEntry(hash uint64, key, dst []byte) (value []byte, expiry int64, found bool, err error) {
	// GetEntry appends to dst the value of key, which hashes to this
	// segment, as stored: in a cache map whether or not it has expired,
	// with its expiry (0: never). found reports whether the segment has an
	// entry for key at all. Outside cache maps it is Get with expiry 0. It
	// reads as Get does (without a lock unless writers keep interfering)
	// and sets no reference bit: it is for callers that keep marks of
	// their own in entries no reader sees (see Hidden), not a read of the
	// key's value.
	start := len(dst)
	large := false
	_, err = keyedRead(&s, hash, "get", func() bool {
		value, expiry, found, large = dst[:start], 0, false, false
		loc, f, ok := s.find(hash, key)
		if !ok || !f {
			return ok
		}
		if loc.kind != 0 {
			large = true
			return true
		}
		stored := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		if s.tb.layout.Cache {
			exp, good := expiryOf(stored)
			if !good {
				return false
			}
			expiry, stored = exp, stored[metaSize:]
		}
		found = true
		value = append(value, stored...)
		return true
	})
	if err == nil && large {
		err = ErrLarge
	}
	if err != nil {
		return dst[:start], 0, false, err
	}
	return value, expiry, found, nil
}

// UpdateEntry is Update over entries as stored, expired or not: fn gets the
// value, its expiry and whether there is an entry, and returns the value,
// expiry and Outcome. fn runs under the update lock on a copy valid only
// during it.
func (s *Segment) UpdateEntry(hash uint64, key []byte, fn func(value []byte, expiry int64, found bool) ([]byte, int64, Outcome)) error {
	// UpdateEntry is Update over entries as stored: fn gets key's value
	// and expiry (0: never; always 0 outside cache maps) whether or not
	// the entry has expired, found reporting whether there is an entry at
	// all, and returns the outcome with the value to store and its expiry,
	// which maps other than caches ignore. The value fn gets is a copy in
	// a pooled buffer, valid only while fn runs; the value it returns may
	// alias it. fn runs under the segment's update lock and must not call
	// into the map.
	//
	// Counters: a store counts as a put and a removal of a live entry as a
	// delete, and an expired entry replaced or removed as an expired entry
	// reclaimed, except that placeholders (expiry Hidden) count as none of
	// these: neither storing one, nor removing one, nor storing over one.
	s, p, w, err := s.previewThenLock("update", hash, key)
	if err != nil {
		return err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, err := s.findPreviewed(&p, hash, key)
	if err != nil {
		return err
	}
	cache := s.tb.layout.Cache
	var old []byte
	var oldExpiry int64
	live := found
	if found {
		stored := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		if cache {
			exp, good := expiryOf(stored)
			if !good {
				return s.corrupt(loc.tier.index, fmt.Sprintf("the entry of key %s is too short for its expiry", quoteKey(key)))
			}
			oldExpiry, stored = exp, stored[metaSize:]
			live = exp == 0 || exp > s.tb.now()
		}
		var buf *[]byte
		old, buf = s.tb.copyValue(stored)
		defer s.tb.releaseValue(buf)
	}
	value, expiry, outcome := fn(old, oldExpiry, found)
	// reclaimed counts an expired entry replaced or removed, as the other
	// writers do; a placeholder is no entry of the caller's.
	reclaimed := func() {
		if found && !live && oldExpiry != Hidden {
			atomic.AddUint64(s.expired, 1)
		}
	}
	switch outcome {
	case Leave:
		return nil
	case Remove:
		if !found {
			return nil
		}
		if _, err := s.dropEntry(&w, &loc, "delete"); err != nil {
			return err
		}
		if live {
			s.count(stDeletes, 1)
		}
		reclaimed()
		return nil
	}
	if !cache {
		expiry = 0
	}
	if err := s.store(&w, hash, &loc, found, key, value, expiry); err != nil {
		return err
	}
	reclaimed()
	if expiry != Hidden {
		s.countLocked(stPuts)
	}
	return nil
}
