package segment

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/offheap"
)

// score is how well a layout fits what the file's tiers hold.
type score struct{ good, bad, bitmaps int }

// value weighs a contradiction as two verified entries: a wrong geometry
// reads almost nothing but contradictions; the right one, in a damaged
// file, a few among many entries.
func (s score) value() int { return s.good - 2*s.bad }

// better orders scores, and layouts that score alike by the one that
// accounts for more of the allocation bitmaps, then by more chunks (two
// layouts that differ only in chunks past the last entry read the same).
func (s score) better(o score, l, ol *Layout) bool {
	switch {
	case s.value() != o.value():
		return s.value() > o.value()
	case s.bitmaps != o.bitmaps:
		return s.bitmaps > o.bitmaps
	}
	return l.Chunks > ol.Chunks
}

// sampled lists the tiers a score looks at: up to sampleTiers first tiers
// spread over the segments, and as many overflow tiers from the pool's
// start.
func sampled(l *Layout) []int64 {
	var out []int64
	step := max(1, l.MaxSegments/sampleTiers)
	for t := int64(0); t < l.MaxSegments; t += step {
		out = append(out, t)
	}
	for t := l.MaxSegments; t < l.Tiers && t < l.MaxSegments+sampleTiers; t++ {
		out = append(out, t)
	}
	return out
}

// scoreLayout reads the sampled tiers of r as l lays them out and counts
// what agrees and what does not. It reads with plain loads: the file may
// be in use, and a torn read only costs a point.
func scoreLayout(r *offheap.Region, l *Layout) score {
	var sc score
	le := binary.LittleEndian
	for _, t := range sampled(l) {
		base := l.TiersOff + t*l.TierSize
		tierBytes := r.Bytes(base, l.TierSize)
		word := func(off int64) uint64 { return le.Uint64(tierBytes[off:]) }
		nonzero := int64(0)
		for i := range l.Slots {
			if word(tierHeaderSize+8*i) != 0 {
				nonzero++
			}
		}
		if nonzero == 0 && allZero(tierBytes[:tierHeaderSize]) {
			continue
		}
		next, entries, lowest, used, owner, order := word(thNext), word(thEntries), word(thLowestFree), word(thUsedChunks), word(thOwner), word(thOrder)
		seg := t
		if entries != uint64(nonzero) {
			sc.bad++
		}
		if used > uint64(l.Chunks) || lowest > uint64(l.Chunks) {
			sc.bad++
		}
		if next != 0 && (next <= uint64(l.MaxSegments) || next > uint64(l.Tiers)) {
			sc.bad++
		}
		st, stamped := decodeStamp(t, owner, order)
		switch {
		case stamped && (t >= l.MaxSegments || st == firstStamp(t)):
			// A stamp verifies only on the tier it was made for: found at
			// this geometry's place, it speaks for the geometry.
			sc.good++
			if t >= l.MaxSegments {
				seg = int64(st.owner) - 1
			}
		case t < l.MaxSegments && (owner != 0 || order != 0):
			sc.bad++
		case t >= l.MaxSegments && (owner == 0 || owner > uint64(l.MaxSegments)):
			sc.bad++
			seg = -1
		case t >= l.MaxSegments:
			seg = int64(owner - 1)
		}
		pop := 0
		for i := range l.Chunks / 64 {
			pop += bits.OnesCount64(word(l.bitmapOff + 8*i))
		}
		if uint64(pop) == used {
			sc.bitmaps++
		} else {
			sc.bad++
		}
		looked := 0
		for i := int64(0); i < l.Slots && looked < maxSlotsLooked; i++ {
			slot := word(tierHeaderSize + 8*i)
			if slot == 0 {
				continue
			}
			looked++
			if entryFits(l, tierBytes, slot, seg) {
				sc.good++
			} else {
				sc.bad++
			}
		}
	}
	return sc
}

// entryFits reports whether slot, read from the tier whose bytes are
// tier (of segment seg, or -1 if unknown), names an entry that decodes
// inside the tier, whose key hashes to seg and to the slot's tag, and
// whose checksum, if it has one, holds.
func entryFits(l *Layout, tier []byte, slot uint64, seg int64) bool {
	key, value, head, ok := entryIn(l, tier, slot)
	if !ok {
		return false
	}
	h := xxhash.Sum64(key)
	if uint32(h>>l.tagShift) != slotTag(slot) || (seg >= 0 && !mayHold(l, h, seg)) {
		return false
	}
	sum := binary.LittleEndian.Uint32(head[ehChecksum:])
	return sum == 0 || sum == entryChecksum(head[:ehChecksum], key, value)
}

// mayHold reports whether segment seg of a map laid out as l may hold a
// key hashed to h: in a map that splits, under some count of segments in
// use (the count itself is not trusted here), that is when the hash's
// low bits below the smallest power of two past seg (and at least
// Segments) are seg: whether seg was split into (its bits are the key's
// below twice the power of two under the count) or not (the key's bits
// below that power, or twice it, name seg).
func mayHold(l *Layout, h uint64, seg int64) bool {
	if !l.Splits {
		return int64(segmentFor(h, uint64(l.Segments))) == seg
	}
	m := max(nextPow2(uint64(seg)+1), uint64(l.Segments)) // the smallest power of two past seg
	return h&(m-1) == uint64(seg)
}

// entryIn decodes the entry slot names in tier as l lays it out, bounding
// every length by the tier.
func entryIn(l *Layout, tier []byte, slot uint64) (key, value, head []byte, ok bool) {
	c := slotChunk(slot)
	if c < 0 || c >= l.Chunks {
		return nil, nil, nil, false
	}
	off := l.entriesOff + c*l.ChunkSize
	head = tier[off : off+entryHeaderSize]
	klen := int64(binary.LittleEndian.Uint32(head[ehKeyLen:]))
	if l.LargeValues {
		klen, _ = splitKeyLen(uint32(klen))
	}
	vlen := int64(binary.LittleEndian.Uint32(head[ehValueLen:]))
	nch := int64(binary.LittleEndian.Uint32(head[ehChunks:]))
	if nch <= 0 || nch > l.Chunks-c || entryHeaderSize+klen+vlen > nch*l.ChunkSize {
		return nil, nil, nil, false
	}
	key = tier[off+entryHeaderSize : off+entryHeaderSize+klen]
	value = tier[off+entryHeaderSize+klen : off+entryHeaderSize+klen+vlen]
	return key, value, head, true
}

// examined is what the entries of the chosen layout say of its flags.
type examined struct {
	entries, summed int // entries that fit, and those with a checksum
	refBits         int // slots with the CLOCK reference bit set
	short           int // values shorter than a cache map's expiry
	zeroPrefix      int // values whose first 8 bytes are zero (a cache map's "never expires")
	recentPrefix    int // values whose first 8 bytes read as a time near now
	hiddenPrefix    int // values whose first 8 bytes are Hidden (a cache map's placeholder)
	cacheWords      int // segment headers with CLOCK hand or eviction counts
	stamped         int // tiers whose stamp verifies (files with stamps)
}

// examine reads the sampled tiers and the segment headers of r as l lays
// them out.
func examine(r *offheap.Region, l *Layout) examined {
	var ex examined
	le := binary.LittleEndian
	now := time.Now()
	from, to := now.AddDate(-2, 0, 0).UnixNano(), now.AddDate(20, 0, 0).UnixNano()
	for _, t := range sampled(l) {
		tier := r.Bytes(l.TiersOff+t*l.TierSize, l.TierSize)
		seg := t
		st, stamped := decodeStamp(t, le.Uint64(tier[thOwner:]), le.Uint64(tier[thOrder:]))
		switch {
		case stamped:
			ex.stamped++
			seg = int64(st.owner) - 1
		case t >= l.Segments:
			seg = int64(le.Uint64(tier[thOwner:])) - 1
		}
		for i := range l.Slots {
			slot := le.Uint64(tier[tierHeaderSize+8*i:])
			if slot == 0 || !entryFits(l, tier, slot, seg) {
				continue
			}
			_, value, head, _ := entryIn(l, tier, slot)
			ex.entries++
			if le.Uint32(head[ehChecksum:]) != 0 {
				ex.summed++
			}
			if slot&refBit != 0 {
				ex.refBits++
			}
			switch {
			case len(value) < metaSize:
				ex.short++
			case le.Uint64(value) == 0:
				ex.zeroPrefix++
			case int64(le.Uint64(value)) >= from && int64(le.Uint64(value)) <= to:
				ex.recentPrefix++
			case int64(le.Uint64(value)) == Hidden:
				ex.hiddenPrefix++
			}
		}
	}
	heads := r.Bytes(l.SegmentsOff, l.Segments*segmentHeaderSize)
	for i := range l.Segments {
		if !allZero(heads[i*segmentHeaderSize+shHand : (i+1)*segmentHeaderSize]) {
			ex.cacheWords++
		}
	}
	return ex
}

// cache decides whether the map is a cache map, whose stored values begin
// with an 8-byte expiry, and says why; canBe says whether the geometry
// found allows one (entries large enough for an expiry). Only the marks of a cache map in
// use (eviction words, reference bits) are proof; values that all begin
// with 8 bytes an expiry could be are taken for one, and said to be.
func (ex examined) cache(canBe bool) (bool, string) {
	switch {
	case !canBe:
		return false, "read as a plain map: the tiers are laid out for entries too small for a cache map's"
	case ex.short > 0:
		return false, fmt.Sprintf("read as a plain map: %d values are shorter than the 8-byte expiry a cache map puts before each", ex.short)
	case ex.cacheWords > 0 || ex.refBits > 0:
		return true, fmt.Sprintf("read as a cache map (each stored value's first 8 bytes its expiry): %d segment headers hold eviction words and %d slots reference bits, which only cache maps have",
			ex.cacheWords, ex.refBits)
	case ex.entries > 0 && ex.zeroPrefix+ex.recentPrefix+ex.hiddenPrefix == ex.entries:
		return true, fmt.Sprintf("read as a cache map (each stored value's first 8 bytes its expiry): all %d values looked at begin with 8 bytes that read as an expiry (%d never, %d a time near now, %d placeholders); nothing else tells, so if this was a plain map, each value read lacks its first 8 bytes",
			ex.entries, ex.zeroPrefix, ex.recentPrefix, ex.hiddenPrefix)
	}
	return false, "read as a plain map: nothing marks it a cache map (eviction words, reference bits, values that begin with an expiry)"
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
