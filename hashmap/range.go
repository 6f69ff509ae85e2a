package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/segment"
)

// Range iterates over every entry, one segment at a time, each copied out
// consistently and yielded from the copy: no lock is held while the loop
// body runs, which may call the map, and the slices stay valid after the
// loop. The view is consistent per segment, not across segments. It sets
// *errp to nil first, and to ErrClosed if the map is closed, which stops it;
// a nil errp ignores errors.
//
// Neither damage nor a stuck lock stops it: entries that fail their checksum
// or do not decode, and segments whose tier chain cannot be followed or
// whose lock stays held through the wait, are left out, and at the end *errp
// gets an error matching ErrCorrupt or ErrTimeout that counts them and names
// the first of each (Repair fixes such segments). A loop that breaks early
// hears of none. The checksums make it slower than a copy alone (none with
// NoChecksums).
func (m *Map) Range(errp *error) iter.Seq2[[]byte, []byte] { return m.rangeSegments(errp, false) }

// RangeView is Range for loops that use each entry at once: the slices it
// yields are valid only until the loop body returns (one buffer is reused
// for every segment, and by later RangeViews), so the iteration allocates
// next to nothing once that buffer has grown to the largest segment.
func (m *Map) RangeView(errp *error) iter.Seq2[[]byte, []byte] { return m.rangeSegments(errp, true) }

// rangeBuf is a RangeView's copy of a segment, kept for the next one.
type rangeBuf struct {
	arena []byte
	ends  []int
}

// rangeSegments is Range, and with reuse RangeView: it copies one segment
// at a time and yields from the copy.
func (m *Map) rangeSegments(errp *error, reuse bool) iter.Seq2[[]byte, []byte] {
	if errp == nil {
		errp = new(error) // the caller does not want the error
	}
	return func(yield func(key, value []byte) bool) {
		*errp = nil // an error variable reused from an earlier call must not show through
		if m.gate.Closed() {
			*errp = ErrClosed
			return
		}
		var arena []byte
		var ends []int
		var left rangeLeftOut
		if reuse {
			if b, ok := m.rangeBufs.Get().(*rangeBuf); ok {
				arena, ends = b.arena, b.ends
			}
			defer func() {
				if cap(arena) <= 1<<24 {
					m.rangeBufs.Put(&rangeBuf{arena[:0], ends[:0]})
				}
			}()
		}
		// Segments split meanwhile are visited too, after those in use
		// at the start (n0), until the count stops moving; a key found in
		// one of them is left out if an ancestor segment held it when
		// visited (visits[u]: the segments in use then), so that a key
		// present and unchanged throughout is seen once (see splitSeen).
		n0 := int(m.table.Segments())
		var visits []int64
		var strays salvageStrays // a salvage's copies met outside their key's segment
		for i := 0; i < int(m.table.Segments()); i++ {
			if !reuse {
				arena = nil // fresh per segment: slices already yielded keep theirs
			}
			var damaged segment.Damaged
			var err error
			var at int64
			arena, ends, damaged, at, err = m.copySegment(i, arena, ends)
			visits = append(visits, at)
			switch {
			case errors.Is(err, ErrCorrupt), errors.Is(err, ErrTimeout):
				// A chain that cannot be followed, or a lock held
				// throughout the wait (a process that died holding
				// it, in a map opened read-only, which cannot release
				// it): the other segments are still worth reading
				// (mapctl dump saves what it can).
				if left.skipped++; left.unread == nil {
					left.unread = err
				}
				continue
			case err != nil:
				// The damage met so far goes with it, which the end
				// would have reported.
				if d := left.err(); d != nil {
					err = errors.Join(err, d)
				}
				*errp = err
				return
			}
			left.bad.Add(damaged)
			for j := 0; j+3 < len(ends); j += 4 {
				k := arena[ends[j]:ends[j+1]:ends[j+1]]
				if i >= n0 && m.splitSeen(k, i, visits) {
					continue
				}
				if m.salvaged && strays.deferred(m, k, arena[ends[j+2]:ends[j+3]:ends[j+3]], i, at, false) {
					continue
				}
				if !yield(k, arena[ends[j+2]:ends[j+3]:ends[j+3]]) {
					return
				}
			}
			// Large values, each read whole after the segment's copy: a
			// key deleted since is left out, one changed since is given
			// as it is now.
			for _, k := range damaged.LargeKeys() {
				if i >= n0 && m.splitSeen(k, i, visits) {
					continue
				}
				if m.salvaged && strays.deferred(m, k, nil, i, at, true) {
					continue
				}
				v, found, err := m.rangeLarge(k)
				switch {
				case errors.Is(err, ErrCorrupt):
					if left.largeBad++; left.largeErr == nil {
						left.largeErr = err
					}
					continue
				case err != nil:
					if d := left.err(); d != nil {
						err = errors.Join(err, d)
					}
					*errp = err
					return
				case !found:
					continue
				}
				if !yield(k, v) {
					return
				}
			}
		}
		if m.salvaged && !strays.giveUnmatched(m, yield) {
			return
		}
		if d := left.err(); d != nil {
			*errp = d
		}
	}
}

// rangeLeftOut is what a Range has left out so far.
type rangeLeftOut struct {
	bad     segment.Damaged // entries left out
	unread  error           // the first segment that could not be read
	skipped int             // segments that could not be read

	largeErr error // the first large value left out as damaged
	largeBad int   // large values left out as damaged
}

// err is the error a Range ends with for what it left out: the entries
// and the segments skipped; nil for none.
func (l *rangeLeftOut) err() error {
	var errs []error
	switch {
	case l.skipped == 1:
		errs = append(errs, fmt.Errorf("%w; its entries were left out", l.unread))
	case l.skipped > 1:
		errs = append(errs, fmt.Errorf("%w; its entries, and those of %d more segments that could not be read, were left out", l.unread, l.skipped-1))
	}
	if l.bad.Any() {
		errs = append(errs, fmt.Errorf("%w: %v; Repair drops them", ErrCorrupt, l.bad))
	}
	switch {
	case l.largeBad == 1:
		errs = append(errs, fmt.Errorf("%w; it was left out", l.largeErr))
	case l.largeBad > 1:
		errs = append(errs, fmt.Errorf("%w; it and %d more large values were left out", l.largeErr, l.largeBad-1))
	}
	return errors.Join(errs...)
}

// copySegment is one segment's AppendEntries for rangeSegments, inside
// the in-flight gate but not across the loop body's yield, which may close
// the map. The deferred Leave matters: mapctl reads under
// debug.SetPanicOnFault, and a fault on a file truncated under it panics
// out of AppendEntries; without the Leave, the Close that follows waits for
// this call for good.
//
// at is the count of segments in use the copy holds for: read before and
// after it, and the copy taken again until the two agree, since a split
// of the segment commits the new count while the segment's sequence is
// odd, which no consistent copy overlaps (0: the copy failed).
func (m *Map) copySegment(i int, arena []byte, ends []int) (_ []byte, _ []int, _ segment.Damaged, at int64, err error) {
	c, err := m.enterAny(false)
	if err != nil {
		return arena, ends, segment.Damaged{}, 0, err
	}
	defer c.Leave()
	for {
		before := m.table.Segments()
		var d segment.Damaged
		arena, ends, d, err = m.table.Segment(i).AppendEntries(arena[:0], ends[:0])
		if err != nil {
			return arena, ends, d, 0, err
		}
		if m.table.Segments() == before {
			return arena, ends, d, before, nil
		}
	}
}

// splitSeen reports whether a Range has seen key already, found in
// segment seg, split into after the Range began: whether one of its
// ancestors (the segment it split from, and so on) held the key when the
// Range visited it, that is, with the segments in use then (visits[u];
// 0 for a segment that could not be read), the key mapped there.
func (m *Map) splitSeen(key []byte, seg int, visits []int64) bool {
	h := xxhash.Sum64(key)
	for u := segment.SplitParent(int64(seg), m.layout.Segments); u >= 0; u = segment.SplitParent(u, m.layout.Segments) {
		if at := visits[u]; at != 0 && segment.SegmentFor(h, at) == u {
			return true
		}
	}
	return false
}

// salvageStrays is what a salvage's Range sets aside in a map that split:
// a split cut short after its commit leaves stale copies of the keys it
// moved in the segment it split, and the live ones, which may have been
// overwritten since, in the new segment. A copy met outside its key's
// segment is held back until the end, and given only if the key's own
// segment gave none: what the Range itself gave decides, not a lookup,
// which would not check the entry's checksum or see a segment the Range
// could not read.
type salvageStrays struct {
	home    []uint64 // hashes of the keys given from their own segment
	entries []strayEntry
}

// strayEntry is a copy set aside: its key and value (nil for a large
// value, read at the end).
type strayEntry struct {
	key, value []byte
	large      bool
}

// deferred reports whether the copy of key found in segment seg, with at
// segments in use, is set aside; if not, the Range gives it now, and a
// copy in its key's own segment is noted as given.
func (s *salvageStrays) deferred(m *Map, key, value []byte, seg int, at int64, large bool) bool {
	h := xxhash.Sum64(key)
	if at == 0 || !m.layout.Splits || segment.SegmentFor(h, at) == int64(seg) {
		s.home = append(s.home, h)
		return false
	}
	s.entries = append(s.entries, strayEntry{key: bytes.Clone(key), value: bytes.Clone(value), large: large})
	return true
}

// giveUnmatched yields the copies set aside whose key its own segment did
// not give (a large value read as it is now; one that no longer reads is
// left out, as Range leaves it out), and reports whether the Range goes
// on.
func (s *salvageStrays) giveUnmatched(m *Map, yield func(key, value []byte) bool) bool {
	if len(s.entries) == 0 {
		return true
	}
	slices.Sort(s.home)
	for _, e := range s.entries {
		if _, given := slices.BinarySearch(s.home, xxhash.Sum64(e.key)); given {
			continue
		}
		v := e.value
		if e.large {
			var found bool
			var err error
			if v, found, err = m.rangeLarge(e.key); err != nil || !found {
				continue
			}
		}
		if !yield(e.key, v) {
			return false
		}
	}
	return true
}

// rangeLarge reads the large value of key for a Range, inside the
// in-flight gate (not across the loop body's yield).
func (m *Map) rangeLarge(key []byte) ([]byte, bool, error) {
	h := xxhash.Sum64(key)
	c, err := m.enter(h, false)
	if err != nil {
		return nil, false, err
	}
	defer c.Leave()
	return m.getLarge(h, key, nil)
}
