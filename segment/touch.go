package segment

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Touch sets the expiry of key's live entry in a cache map, in place through
// the undo record, and reports whether the entry was live. In other maps it
// changes nothing and reports whether key is present.
func (s *Segment) Touch(hash uint64, key []byte, expiry int64) (bool, error) {
	// Touch sets the expiry of key's entry in a cache map to expiry (Unix
	// nanoseconds, 0: never), if the entry is live: present, and not
	// expired by the table's clock read under the segment's update lock.
	// It reports whether it was. An expired entry is left as it is (its
	// space is reclaimed as any expired entry's), so a Touch never brings
	// back an entry that readers have stopped seeing. The entry's header
	// and expiry are rewritten in place under the write lock, through the
	// undo record, so every reader, in any process, sees the old expiry or
	// the new one, a death in the middle leaves one of them once recovered
	// (a file without undo records may lose the entry then, as with a
	// Put), and the segment's sequence moves, as after any change of a
	// value. In a map that is not a cache it changes nothing and reports
	// whether the key is present.
	tb := s.tb
	if !tb.layout.Cache {
		return s.Has(hash, key)
	}
	s, p, w, err := s.previewThenLock("touch", hash, key)
	if err != nil {
		return false, err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, err := s.findPreviewed(&p, hash, key)
	if err != nil {
		return false, err
	}
	if !found {
		return false, nil
	}
	stored := tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
	exp, ok := expiryOf(stored)
	switch {
	case !ok:
		return false, s.corrupt(loc.tier.index, fmt.Sprintf("the entry of key %s is too short for its expiry", quoteKey(key)))
	case exp != 0 && exp <= tb.now():
		return false, nil
	case exp == expiry:
		return true, nil
	}
	touched, buf := tb.copyValue(stored)
	defer tb.releaseValue(buf)
	binary.LittleEndian.PutUint64(touched, uint64(expiry))
	// Only the header (its checksum) and the expiry change: the undo record
	// saves those bytes and the key between them, so even an entry whose
	// value is too large for the record is rewritten with its old bytes
	// saved. Only a key too large for it goes the way of a Put.
	if !s.undoHolds(entryHeaderSize + loc.klen + metaSize) {
		if err := s.replace(&w, hash, &loc, key, touched); err != nil {
			return false, err
		}
		return true, nil
	}
	h := tb.entryHeader(loc.nch, key, touched)
	if err := w.modify("touch"); err != nil {
		return false, err
	}
	s.rewriteInPlace(tb.layout.entryByte(loc.tier.index, loc.chunk), &h, loc.klen, touched[:metaSize], atomic.LoadUint64(s.seq), saveOld)
	return true, nil
}

// Expiry returns key's expiry in a cache map (0: never; always 0 elsewhere)
// and the clock reading its liveness was judged by; found is false if absent
// or expired. It copies no value and sets no reference bit.
func (s *Segment) Expiry(hash uint64, key []byte) (expiry, now int64, found bool, err error) {
	// Expiry looks key up as Get does (without a lock while no writer
	// interferes, else under the read lock) and returns its entry's expiry
	// in a cache map (Unix nanoseconds, 0: never; always 0 in other maps),
	// with the clock reading its liveness was judged by. found is false
	// when the key is absent or its entry has expired by then. It copies
	// no value and sets no reference bit: a look at an entry's expiry is
	// not a use of the entry.
	tb := s.tb
	if tb.layout.Cache {
		now = tb.now()
	}
	_, err = keyedRead(&s, hash, "get", func() bool {
		expiry, found = 0, false
		loc, f, ok := s.find(hash, key)
		if !ok || !f {
			return ok
		}
		if !tb.layout.Cache {
			found = true
			return true
		}
		exp, good := expiryOf(tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen))
		if !good {
			return false
		}
		if exp == 0 || exp > now {
			expiry, found = exp, true
		}
		return true
	})
	if err != nil {
		return 0, now, false, err
	}
	return expiry, now, found, nil
}
