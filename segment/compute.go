package segment

import "sync/atomic"

// compute runs fn on the current value of key (a copy; found false if
// absent) under the segment's update lock, and stores what it returns: the
// new value if keep, else removes the key. No other writer can change the
// key in between, in any process. fn must not call into the map.
func (s *Segment) compute(hash uint64, key []byte, fn func(old []byte, found bool) ([]byte, bool)) error {
	return s.ComputeExpiring(hash, key, 0, fn)
}

// ComputeExpiring is Compute with an expiry time (Unix nanoseconds, 0 =
// never) for a value it stores in a cache map where the key was absent (or
// had expired, which fn also sees as absent); a live entry keeps its own
// expiry. Other maps ignore it.
func (s *Segment) ComputeExpiring(hash uint64, key []byte, expiry int64, fn func(old []byte, found bool) ([]byte, bool)) error {
	return s.update(hash, key, expiry, true, func(old []byte, found bool) ([]byte, Outcome) {
		value, keep := fn(old, found)
		if !keep {
			return nil, Remove
		}
		return value, Store
	})
}

// Outcome is what an Update's function decides.
type Outcome int

const (
	Store  Outcome = iota // store the value it returned
	Remove                // remove the key (or leave it absent)
	Leave                 // change nothing
)

// Update runs fn on the current value of key under the segment's update
// lock and does what it decides. old is a copy in a pooled buffer, valid
// only during fn; the value fn returns may alias it. expiry is as
// ComputeExpiring's: for an entry it creates.
func (s *Segment) Update(hash uint64, key []byte, expiry int64, fn func(old []byte, found bool) ([]byte, Outcome)) error {
	return s.update(hash, key, expiry, false, fn)
}

// update is Update; with ownCopy, old is fn's to keep (Compute's contract)
// instead of a pooled buffer.
func (s *Segment) update(hash uint64, key []byte, expiry int64, ownCopy bool, fn func(old []byte, found bool) ([]byte, Outcome)) error {
	s, p, w, err := s.previewThenLock("compute", hash, key)
	if err != nil {
		return err
	}
	defer func() { w.endOrAbandon(recover()) }()
	loc, found, err := s.findPreviewed(&p, hash, key)
	if err != nil {
		return err
	}
	var old []byte
	var oldBuf *[]byte
	live := false
	if found {
		stored := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		var v []byte
		v, live, _ = s.tb.userValue(stored)
		if live && s.tb.layout.Cache {
			// A live entry keeps its expiry, as a counter in a fixed
			// window must: expiry applies to the entry fn creates.
			expiry, _ = expiryOf(stored)
		}
		switch {
		case live && ownCopy:
			old = append([]byte(nil), v...)
		case live:
			old, oldBuf = s.tb.copyValue(v)
			defer s.tb.releaseValue(oldBuf)
		}
	}
	value, outcome := fn(old, live)
	switch outcome {
	case Leave:
		return nil
	case Remove:
		if found {
			_, err := s.removeAt(&w, &loc)
			return err
		}
		return nil
	}
	if err := s.store(&w, hash, &loc, found, key, value, expiry); err != nil {
		return err
	}
	if found && !live {
		atomic.AddUint64(s.expired, 1)
	}
	s.countLocked(stPuts)
	return nil
}
