package segment

import (
	"sync/atomic"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// optimisticTries is how many lock-free reads Get attempts before it takes
// the read lock. A read fails only when a writer changed the segment during
// it; after a few such collisions the segment is busy and the read lock
// (which makes writers wait for us) guarantees progress.
const optimisticTries = 4

// Get appends the value of key to dst and reports whether it was found.
//
// It first reads without any lock: it notes the segment's modification
// sequence, looks the key up, copies the value, and accepts the result if
// the sequence is unchanged and even. Readers so write nothing shared, and
// any number of them in any number of processes cost the writers nothing.
// Every offset read this way is bounds-checked before use, since it may be
// torn.
func (s *Segment) Get(hash uint64, key, dst []byte) ([]byte, bool, error) {
	start := len(dst)
	for range optimisticTries {
		seq := atomic.LoadUint64(s.seq)
		if seq&1 == 0 {
			loc, found, ok := s.find(hash, key)
			if ok && found {
				dst = append(dst, s.tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)...)
			}
			if atomic.LoadUint64(s.seq) == seq && ok {
				return dst, found, nil
			}
			dst = dst[:start]
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

// Entries calls fn for every entry of the segment, under the read lock, with
// key and value views valid only during the call. fn must not call into the
// map (it would wait for itself); copy what you keep. It stops when fn
// returns false.
func (s *Segment) Entries(fn func(key, value []byte) bool) error {
	if err := s.lock.ReadLock(s.tb.timeout); err != nil {
		return s.lockErr("range", err)
	}
	defer s.lock.ReadUnlock() //nolint:errcheck // we hold it
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
				return s.corrupt(t, "undecodable entry during iteration")
			}
			if !fn(tb.entryKey(&tv, c, klen), tb.entryValue(&tv, c, klen, vlen)) {
				return nil
			}
		}
		next := tv.next()
		if next == 0 {
			return nil
		}
		if next > uint64(l.Tiers) || int64(next-1) < l.Segments {
			return s.corrupt(t, "tier link out of range")
		}
		t = int64(next - 1)
	}
	return s.corrupt(t, "cycle in the tier chain")
}
