package segment

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
)

// optimisticTries is how many lock-free reads a reader attempts before it
// takes the read lock. A read fails only when a writer changed the segment
// during it; after a few such collisions the segment is busy and the read
// lock (which makes writers wait for us) guarantees progress.
const optimisticTries = 4

var (
	// errInconsistent: a read could not decode what it found.
	errInconsistent = errors.New("inconsistent read")
	// errBusy: writers kept changing the segment under optimistic reads.
	errBusy = errors.New("segment busy")
	// errMoved: a split moved the key being read to another segment.
	errMoved = errors.New("key moved by a split")
)

// keyedRead is consistentReadAt for a read of the key hashed to hash, on
// the segment *sp: a run counts only if the key still maps to the segment
// when it is validated (optimistic runs read N before the sequence and
// again after: see split.go; the run under the read lock checks once it
// holds the lock, which holds a split of the segment off). When a split
// moved the key, *sp becomes the key's segment and read runs again there;
// read must read the segment through *sp (a closure over the caller's
// receiver, whose address sp is, does).
func keyedRead(sp **Segment, hash uint64, op string, read func() bool) (uint64, error) {
	for {
		s := *sp
		if s.tb.moved(hash, s.index) {
			*sp = s.tb.For(hash)
			continue
		}
		seq, err := s.consistentReadIf(op, read, hash, true)
		if !errors.Is(err, errMoved) {
			return seq, err
		}
	}
}

// consistentRead runs read (which reports whether it could decode what it
// saw) until one run is known to have seen no writer:
//
//   - first without any lock: the run counts if the segment's modification
//     sequence is even and unchanged around it. Readers so write nothing
//     shared, and any number of them in any number of processes cost the
//     writers nothing. read must bounds-check every offset it follows,
//     since what it reads may be torn.
//   - after optimisticTries collisions, under the read lock. On a read-only
//     mapping the lock word cannot be written, so there it keeps reading
//     optimistically, pausing politely, until LockTimeout.
//
// A run that saw no writer and still could not decode the segment means the
// data itself is bad: ErrCorrupt.
func (s *Segment) consistentRead(op string, read func() bool) error {
	_, err := s.consistentReadAt(op, read)
	return err
}

// consistentReadAt is consistentRead that also returns the modification
// sequence the accepted run saw (under the read lock it holds still: every
// change of a value takes the write lock).
func (s *Segment) consistentReadAt(op string, read func() bool) (uint64, error) {
	return s.consistentReadIf(op, read, 0, false)
}

// consistentReadIf is consistentReadAt; keyed, a run counts only while the
// key hashed to hash maps to the segment, else errMoved.
func (s *Segment) consistentReadIf(op string, read func() bool, hash uint64, keyed bool) (uint64, error) {
	seq, err := s.readOptimistic(read, hash, keyed)
	if errors.Is(err, errBusy) {
		if !s.lock.TryReadLock() {
			s.count(stLockWaits, 1)
			err = s.lock.ReadLock(s.tb.timeout)
		} else {
			err = nil
		}
		if err != nil {
			err = s.retryAfterTimeout(err, s.lock.ReadLock)
		}
		if err == nil {
			seq = atomic.LoadUint64(s.seq)
			switch {
			case keyed && s.tb.moved(hash, s.index):
				err = errMoved
			case !read():
				err = errInconsistent
			}
			_ = s.lock.ReadUnlock()
		}
	}
	switch {
	case err == nil:
		return seq, nil
	case errors.Is(err, errMoved):
		return 0, err
	case errors.Is(err, errInconsistent):
		return 0, s.corrupt(-1, "undecodable entry or tier chain during "+op)
	}
	return 0, s.lockErr(op, err)
}

// readOptimistic is the lock-free part of consistentRead; it returns the
// sequence the accepted run saw.
func (s *Segment) readOptimistic(read func() bool, hash uint64, keyed bool) (uint64, error) {
	var p wait.Policy
	var deadline time.Time
	for tries := 1; ; tries++ {
		n := atomic.LoadUint64(s.tb.active)
		if seq := atomic.LoadUint64(s.seq); seq&1 == 0 {
			ok := read()
			if offheap.LoadAfterLoads(s.seq) == seq {
				if keyed && s.tb.split.claim != nil && (atomic.LoadUint64(s.tb.active) != n || int64(segmentFor(hash, s.tb.segmentsIn(n))) != s.index) {
					return 0, errMoved
				}
				if ok {
					return seq, nil
				}
				return 0, errInconsistent
			}
		}
		if !s.tb.readOnly {
			if tries >= optimisticTries {
				return 0, errBusy
			}
			wait.Spin(30)
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(s.tb.timeout)
		}
		if !time.Now().Before(deadline) {
			return 0, rwulock.ErrTimeout
		}
		if !p.Pause() {
			time.Sleep(p.Nap(deadline))
		}
	}
}

// getConsistent is Get through consistentRead: the whole chain, the read lock
// after repeated collisions, corruption reported.
func (s *Segment) getConsistent(hash uint64, key, dst []byte) ([]byte, bool, error) {
	start := len(dst)
	var found, large bool
	_, err := keyedRead(&s, hash, "get", func() bool {
		dst, large = dst[:start], false
		loc, f, ok := s.find(hash, key)
		found = f && ok
		if found && loc.kind != 0 {
			found, large = false, true
			return true
		}
		if found {
			v, live, good := s.tb.userValue(s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen))
			if !good {
				return false
			}
			found = live
			if live {
				s.tb.reference(&loc.tier.slots[loc.pos], loc.slot)
				dst = append(dst, v...)
			}
		}
		return ok
	})
	if err == nil && large {
		err = ErrLarge
	}
	if err != nil {
		return dst[:start], false, err
	}
	return dst, found, nil
}

// Has reports whether key is present, without copying its value.
func (s *Segment) Has(hash uint64, key []byte) (bool, error) {
	var found bool
	_, err := keyedRead(&s, hash, "get", func() bool {
		loc, f, ok := s.find(hash, key)
		found = f && ok
		if found {
			_, live, good := s.tb.userValue(s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen))
			found = live
			if live {
				// A look counts as a read for eviction, as Get's does.
				s.tb.reference(&loc.tier.slots[loc.pos], loc.slot)
			}
			return good
		}
		return ok
	})
	return found, err
}

// GetVersioned is Get that also returns the even sequence the value was read
// at (unchanged while no value of the segment changes) and the entry's
// expiry.
func (s *Segment) GetVersioned(hash uint64, key, dst []byte) (out []byte, found bool, seq uint64, expiry int64, err error) {
	// GetVersioned is Get that also returns the segment's modification
	// sequence the value was read at (even): while Seq still returns it,
	// no value of the segment changed or was removed since (inserts of new
	// keys do not count: they change no value). expiry is the entry's
	// expiry time in a cache map (0: none). A cache of decoded values
	// relies on it.
	start := len(dst)
	large := false
	seq, err = keyedRead(&s, hash, "get", func() bool {
		out, found, expiry, large = dst[:start], false, 0, false
		loc, f, ok := s.find(hash, key)
		if !ok || !f {
			return ok
		}
		if loc.kind != 0 {
			large = true
			return true
		}
		stored := s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
		v, live, good := s.tb.userValue(stored)
		if !good {
			return false
		}
		if live {
			found = true
			if s.tb.layout.Cache {
				expiry, _ = expiryOf(stored)
			}
			s.tb.reference(&loc.tier.slots[loc.pos], loc.slot)
			out = append(out, v...)
		}
		return true
	})
	if err == nil && large {
		err = ErrLarge
	}
	if err != nil {
		return dst[:start], false, 0, 0, err
	}
	return out, found, seq, expiry, nil
}

// GetChecked is Get that also verifies the entry's checksum: a failure is an
// error matching ErrCorrupt, with dst unchanged.
func (s *Segment) GetChecked(hash uint64, key, dst []byte) ([]byte, bool, error) {
	// The checksum comes first, so that damage to a cache map's expiry is
	// not taken for an expiry; then the entry's liveness is decided, once,
	// from the copy. In a file without checksums it is Get.
	start := len(dst)
	var head [entryHeaderSize]byte
	var slotAt *uint64
	var slot uint64
	out, found, large := dst, false, false
	_, err := keyedRead(&s, hash, "get", func() bool {
		out, found, large = dst[:start], false, false
		loc, f, ok := s.find(hash, key)
		if !ok || !f {
			return ok
		}
		if loc.kind != 0 {
			large = true
			return true
		}
		off := loc.chunk * s.tb.layout.ChunkSize
		copy(head[:], loc.tier.space[off:off+entryHeaderSize])
		// The stored value, a cache map's with its expiry: the checksum
		// covers it.
		out = append(out, s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)...)
		found, slotAt, slot = true, &loc.tier.slots[loc.pos], loc.slot
		return true
	})
	if err == nil && large {
		err = ErrLarge
	}
	if err != nil || !found {
		return dst[:start], false, err
	}
	if !s.tb.checksumHolds(head[:], key, out[start:]) {
		return dst[:start], false, s.corrupt(-1, fmt.Sprintf("the entry of key %s fails its checksum", quoteKey(key)))
	}
	v, live, good := s.tb.userValue(out[start:])
	switch {
	case !good:
		return dst[:start], false, s.corrupt(-1, fmt.Sprintf("the entry of key %s is too short for its expiry", quoteKey(key)))
	case !live:
		return dst[:start], false, nil
	}
	s.tb.reference(slotAt, slot) // a CAS from the slot as read: a slot changed since is left alone
	return out[:start+copy(out[start:], v)], true, nil
}

// quoteKey quotes key for an error message as %q does, cut after 64 bytes
// with its length said: enough to tell which key it was, where a whole
// key of megabytes would bury the message.
func quoteKey(key []byte) string {
	const shown = 64
	if len(key) <= shown {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q… (%d bytes)", key[:shown], len(key))
}
