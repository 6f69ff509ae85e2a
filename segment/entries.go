package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
)

// AppendEntries appends a consistent copy of every entry of the segment to
// arena, and four offsets per entry (key start and end, value start and end)
// to ends. Entries failing their checksum or not decoding are left out and
// counted in damaged; an unfollowable chain is an error matching ErrCorrupt.
func (s *Segment) AppendEntries(arena []byte, ends []int) (_ []byte, _ []int, damaged Damaged, err error) {
	// AppendEntries copies every entry of the segment out, consistently:
	// the bytes are appended to arena, and for each entry four offsets
	// into arena, where its key starts and ends and where its value starts
	// and ends, are appended to ends. An entry that fails its checksum, or
	// whose header does not decode, is left out and counted in damaged:
	// within a consistent copy no writer is midway through it, so that is
	// damage, and its bytes are not the value any Put stored; the entries
	// around it are copied all the same (a copy is how data is saved from
	// a damaged file). A tier chain that cannot be followed is an error
	// matching ErrCorrupt. The checksums are computed on the copy, after
	// it is taken: inside the read they would lengthen the time a writer
	// can spoil it in, or that writers wait for it under the read lock.
	a0, e0 := len(arena), len(ends)
	undecodable := 0
	err = s.consistentRead("range", func() bool {
		arena, ends, undecodable = arena[:a0], ends[:e0], 0
		// Each entry as its header (for the checksum), key and stored
		// value (a cache map's with its expiry).
		_, err := s.walk(func(head, k, v []byte) {
			if _, ok := expiryOf(v); s.tb.layout.Cache && !ok {
				undecodable++ // too short for its expiry
				return
			}
			arena = append(arena, head...)
			ends = append(ends, len(arena))
			arena = append(arena, k...)
			ends = append(ends, len(arena), len(arena))
			arena = append(arena, v...)
			ends = append(ends, len(arena))
		}, func() { undecodable++ })
		return err == nil
	})
	if err != nil {
		return arena[:a0], ends[:e0], Damaged{}, err
	}
	if undecodable > 0 {
		damaged.undecodable, damaged.undecodableSegment = undecodable, s.index
	}
	tb := s.tb
	kept := e0
	for j := e0; j+3 < len(ends); j += 4 {
		ks, ke, ve := ends[j], ends[j+1], ends[j+3]
		k, stored := arena[ks:ke], arena[ke:ve]
		if !tb.checksumHolds(arena[ks-entryHeaderSize:ks], k, stored) {
			if damaged.count == 0 {
				damaged.segment, damaged.firstKey = s.index, bytes.Clone(k)
			}
			damaged.count++
			continue
		}
		if tb.layout.LargeValues {
			switch _, kind := splitKeyLen(binary.LittleEndian.Uint32(arena[ks-entryHeaderSize:])); kind {
			case kindPart:
				continue // a part of a large value, read through its descriptor
			case kindDescriptor:
				damaged.large = append(damaged.large, bytes.Clone(k))
				continue
			}
		}
		v, live, _ := tb.userValue(stored)
		if !live {
			continue // expired
		}
		ends[kept], ends[kept+1], ends[kept+2], ends[kept+3] = ks, ke, ve-len(v), ve
		kept += 4
	}
	return arena, ends[:kept], damaged, nil
}

// Entries calls fn for every entry of the segment, on a consistent copy
// taken by AppendEntries: no lock is held while fn runs, so fn may call the
// map. It stops when fn returns false.
func (s *Segment) Entries(fn func(key, value []byte) bool) error {
	arena, ends, damaged, err := s.AppendEntries(nil, nil)
	if err != nil {
		return err
	}
	for j := 0; j+3 < len(ends); j += 4 {
		if !fn(arena[ends[j]:ends[j+1]], arena[ends[j+2]:ends[j+3]]) {
			return nil
		}
	}
	if damaged.Any() {
		return s.corrupt(-1, damaged.String())
	}
	if len(damaged.large) > 0 {
		return fmt.Errorf("segment %d: %d keys left out: %w", s.index, len(damaged.large), ErrLarge)
	}
	return nil
}

// Damaged tells of the entries AppendEntries left out: those that fail
// their checksum (how many, and where the first was) and those whose
// header does not decode (how many, and the segment of the first).
type Damaged struct {
	count    int
	segment  int64  // of the first
	firstKey []byte // of the first

	undecodable        int
	undecodableSegment int64 // of the first

	large [][]byte // keys whose values are large, left out for the caller to read (not damage)
}

// LargeKeys are the keys whose values are large (in files with
// LargeValues): AppendEntries leaves them out, not as damage, for the
// caller to read whole.
func (d Damaged) LargeKeys() [][]byte { return d.large }

// Any reports whether any entry was left out.
func (d Damaged) Any() bool { return d.count > 0 || d.undecodable > 0 }

// Add counts d's entries in with those of a later segment.
func (d *Damaged) Add(later Damaged) {
	if d.count == 0 {
		d.segment, d.firstKey = later.segment, later.firstKey
	}
	if d.undecodable == 0 {
		d.undecodableSegment = later.undecodableSegment
	}
	d.count += later.count
	d.undecodable += later.undecodable
}

// String says what was left out, for an error message.
func (d Damaged) String() string {
	var parts []string
	if d.count > 0 {
		what := fmt.Sprintf("%d entries that fail their checksum", d.count)
		if d.count == 1 {
			what = "1 entry that fails its checksum"
		}
		parts = append(parts, fmt.Sprintf("%s (the first: segment %d, key %s)", what, d.segment, quoteKey(d.firstKey)))
	}
	if d.undecodable > 0 {
		what := fmt.Sprintf("%d entries that do not decode", d.undecodable)
		if d.undecodable == 1 {
			what = "1 entry that does not decode"
		}
		parts = append(parts, fmt.Sprintf("%s (the first in segment %d)", what, d.undecodableSegment))
	}
	return "left out " + strings.Join(parts, " and ")
}

// walk calls fn with every entry of the chain that decodes: its header, key
// and stored value, and undecodable for every slot whose entry does not.
// It returns errInconsistent (and the tier where it happened) when the
// chain cannot be followed.
func (s *Segment) walk(fn func(head, key, value []byte), undecodable func()) (int64, error) {
	tb := s.tb
	l := &tb.layout
	t := s.index
	for hops := int64(0); hops < tb.Present(); hops++ {
		tv := tb.tier(t)
		for pos := range tv.slots {
			slot := atomic.LoadUint64(&tv.slots[pos])
			if slot == 0 {
				continue
			}
			c := slotChunk(slot)
			klen, vlen, _, ok := tb.entryAt(&tv, c)
			if !ok {
				undecodable()
				continue
			}
			off := c * l.ChunkSize
			fn(tv.space[off:off+entryHeaderSize], tb.entryKey(&tv, c, klen), tb.entryValue(&tv, c, klen, vlen))
		}
		next := tv.next()
		if next == 0 {
			return t, nil
		}
		if _, ok := tb.overflowLink(next); !ok {
			return t, errInconsistent
		}
		t = int64(next - 1)
	}
	return t, errInconsistent // a cycle in the chain
}
