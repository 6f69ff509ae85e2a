package segment

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
	"github.com/sharedmap/sharedmap/rwulock"
)

// optimisticTries is how many lock-free reads Get attempts before it takes
// the read lock. A read fails only when a writer changed the segment during
// it; after a few such collisions the segment is busy and the read lock
// (which makes writers wait for us) guarantees progress.
const optimisticTries = 4

// errInconsistent: an optimistic pass could not decode what it read.
var errInconsistent = errors.New("inconsistent optimistic read")

// Get appends the value of key to dst and reports whether it was found.
//
// It first reads without any lock: it notes the segment's modification
// sequence, looks the key up, copies the value, and accepts the result if
// the sequence is unchanged and even. Readers so write nothing shared, and
// any number of them in any number of processes cost the writers nothing.
// Every offset read this way is bounds-checked before use, since it may be
// torn. On a read-only mapping the lock word cannot be written, so there
// Get keeps reading optimistically (pausing politely) until LockTimeout.
func (s *Segment) Get(hash uint64, key, dst []byte) ([]byte, bool, error) {
	start := len(dst)
	tries := 0
	var p wait.Policy
	var deadline time.Time
	for {
		seq := atomic.LoadUint64(s.seq)
		if seq&1 == 0 {
			loc, found, ok := s.find(hash, key)
			if ok && found {
				dst = append(dst, s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)...)
			}
			if atomic.LoadUint64(s.seq) == seq {
				if ok {
					return dst, found, nil
				}
				if s.tb.readOnly {
					// Stable and still undecodable: not a race, the data is bad.
					return dst[:start], false, s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
				}
			}
			dst = dst[:start]
		}
		tries++
		if !s.tb.readOnly && tries >= optimisticTries {
			break
		}
		if s.tb.readOnly {
			if deadline.IsZero() {
				deadline = time.Now().Add(s.tb.timeout)
			}
			if !pauseUntil(&p, deadline) {
				return dst, false, s.lockErr("get", rwulock.ErrTimeout)
			}
			continue
		}
		wait.Spin(30)
	}
	if err := s.lock.ReadLock(s.tb.timeout); err != nil {
		return dst, false, s.lockErr("get", err)
	}
	defer s.lock.ReadUnlock() //nolint:errcheck // we hold it
	loc, found, ok := s.find(hash, key)
	if !ok {
		return dst, false, s.corrupt(loc.tier.index, "undecodable entry or tier chain on lookup")
	}
	if found {
		dst = append(dst, s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)...)
	}
	return dst, found, nil
}

// pauseUntil waits politely before the next optimistic attempt; false once
// the deadline has passed.
func pauseUntil(p *wait.Policy, deadline time.Time) bool {
	if !time.Now().Before(deadline) {
		return false
	}
	if !p.Pause() {
		time.Sleep(p.Nap(deadline))
	}
	return true
}

// Entries calls fn for every entry of the segment, with key and value views
// valid only during the call. fn must not call into the map (it may run
// under the segment's read lock); copy what you keep. It stops when fn
// returns false. On a read-only mapping it copies the segment out in an
// optimistic pass validated by the modification sequence, retried until
// LockTimeout, and calls fn on the copies.
func (s *Segment) Entries(fn func(key, value []byte) bool) error {
	if s.tb.readOnly {
		return s.entriesOptimistic(fn)
	}
	if err := s.lock.ReadLock(s.tb.timeout); err != nil {
		return s.lockErr("range", err)
	}
	defer s.lock.ReadUnlock() //nolint:errcheck // we hold it
	t, err := s.walk(fn)
	if errors.Is(err, errInconsistent) {
		return s.corrupt(t, "undecodable entry or tier chain during iteration")
	}
	return err
}

func (s *Segment) entriesOptimistic(fn func(key, value []byte) bool) error {
	deadline := time.Now().Add(s.tb.timeout)
	var p wait.Policy
	var arena []byte
	var spans [][2]int // key end, value end in arena, per entry
	for {
		seq := atomic.LoadUint64(s.seq)
		if seq&1 == 0 {
			arena, spans = arena[:0], spans[:0]
			t, err := s.walk(func(k, v []byte) bool {
				arena = append(arena, k...)
				ke := len(arena)
				arena = append(arena, v...)
				spans = append(spans, [2]int{ke, len(arena)})
				return true
			})
			if atomic.LoadUint64(s.seq) == seq {
				if err != nil {
					return s.corrupt(t, "undecodable entry or tier chain during iteration")
				}
				start := 0
				for _, sp := range spans {
					if !fn(arena[start:sp[0]], arena[sp[0]:sp[1]]) {
						return nil
					}
					start = sp[1]
				}
				return nil
			}
		}
		if !pauseUntil(&p, deadline) {
			return s.lockErr("range", rwulock.ErrTimeout)
		}
	}
}

// walk visits every entry of the chain. It returns errInconsistent (and the
// tier where it happened) when something cannot be decoded.
func (s *Segment) walk(fn func(key, value []byte) bool) (int64, error) {
	tb := s.tb
	l := &tb.layout
	t := s.index
	for hops := int64(0); hops < l.Tiers; hops++ {
		tv := tb.tier(t)
		for pos := range tv.slots {
			slot := atomic.LoadUint64(&tv.slots[pos])
			if slot == 0 {
				continue
			}
			c := slotChunk(slot)
			klen, vlen, _, ok := tb.entryAt(&tv, c)
			if !ok {
				return t, errInconsistent
			}
			if !fn(tb.entryKey(&tv, c, klen), tb.entryValue(&tv, c, klen, vlen)) {
				return t, nil
			}
		}
		next := tv.next()
		if next == 0 {
			return t, nil
		}
		if next > uint64(l.Tiers) || int64(next-1) < l.Segments {
			return t, errInconsistent
		}
		t = int64(next - 1)
	}
	return t, errInconsistent // a cycle in the chain
}
