package segment

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/sharedmap/sharedmap/offheap"
)

// get appends the value of key, which hashes to this segment, to dst and
// reports whether it was found.
func (s *Segment) get(hash uint64, key, dst []byte) ([]byte, bool, error) {
	if s.tb.segmentOf(hash) != s.index {
		return s.getConsistent(hash, key, dst)
	}
	return s.tb.Get(hash, key, dst)
}

// Get's fast path is one optimistic pass over the segment's first tier,
// in one frame, reaching the segment's sequence and first tier through
// the table alone (the Segment handle would be one more cold line for
// a random key). A random lookup in a map larger than the caches waits
// for memory twice, for the slot and then for the entry it names,
// unless the entry sits in one of its two home runs (see
// Segment.allocHome), whose lines the probe requests together with the
// slot's: then once. Most entries of a freshly filled map do, so most
// lookups wait for memory once. It is also written against an
// instruction budget, since the CPU overlaps the misses of consecutive
// lookups only while the code between them fits its reorder window,
// and each instruction a lookup saves lets more of the next one's
// misses overlap. So it calls nothing before the value copy for keys
// of 8 to 16 bytes and reads the entry header as two words. Its probe
// is a copy of the writers' look (probeHome), for the price a call and
// bounds checks had (see TryGet). Anything it cannot decide (a key
// beyond the first tier, a torn or damaged entry, a writer in the
// segment) goes to GetConsistent, which reads under the usual rules
// and reports corruption.

// Get appends the value of key (whose hash is hash) to dst and reports
// whether it was found. It tries TryGet first and falls back to
// GetConsistent.
func (tb *Table) Get(hash uint64, key, dst []byte) ([]byte, bool, error) {
	out, answer := tb.TryGet(hash, key, dst)
	if answer != Unsure {
		return out, answer == Found, nil
	}
	return tb.GetConsistent(hash, key, dst)
}

// GetConsistent is Get without its fast path, for a caller whose TryGet was
// unsure: it walks the whole chain, under the read lock after repeated
// collisions with writers, and reports corruption.
func (tb *Table) GetConsistent(hash uint64, key, dst []byte) ([]byte, bool, error) {
	return tb.For(hash).getConsistent(hash, key, dst)
}

// Answer is what TryGet found out.
type Answer int8

const (
	Unsure Answer = iota // TryGet could not tell: Get must answer
	Found                // the key's value was appended
	Absent               // the key is not in the map
)

// TryGet reads the first tier of the key's segment without a lock and
// calls nothing before the value's copy but its requests of lines
// (offheap.PrefetchWordsForRead, and PrefetchForRead in layouts with a
// homeTail) and the compare of keys longer than 16 bytes or shorter
// than 8.
//
// Its probe is probeHome's, written out over the table's Spans: a call
// of probeHome, whose every load Go bounds-checks, cost a Get both the
// call and the checks, and made it measurably slower. The copy makes
// two probes to keep in step: TestFastPathsAgreeWithFind holds both to
// find's answers over thousands of damaged tiers, and with -tags
// sharedmap_checked (CI runs the package's tests and every fuzz target
// so) a load outside the tier panics instead of reading beyond it.
// Every offset it follows is checked as probeHome checks it, before
// the load: a slot's chunk against the tier's chunks, an entry's run
// and lengths against the tier's end. It reads through a Span of the
// key's tier alone, so that in a checked build a load outside that
// tier, not only one outside the map, panics.
//
// It is longer than the package's other functions on purpose: split
// into named steps, each step would be a call (too large to inline) on
// every Get, spilling the live registers around it, which is what the
// budget above rules out.

// TryGet is Get's fast path, for callers that count every instruction: it
// returns dst extended by the value and Found, dst and Absent, or dst and
// Unsure when Get must answer. It reads the first tier of the key's segment
// without a lock. It is longer than the package's other functions on purpose
// (see the comment above it).
func (tb *Table) TryGet(hash uint64, key, dst []byte) ([]byte, Answer) {
	g := &tb.geom
	n := atomic.LoadUint64(tb.active)
	index := segmentFor(hash, tb.segmentsIn(n)) // bounded: a damaged N, or a closed map's zeros, names no segment
	seqWord := tb.segSpan.Word64(index*segmentHeaderSize + shSeq)
	seq := atomic.LoadUint64(seqWord)
	shift := g.chunkShift & 63
	base := index * g.tierSize // of the segment's first tier in the tiers area
	// The tier up to its entry space's end, without the padding after.
	tier := tb.tierSpan.Sub(base, g.entriesOff+g.chunks<<shift)
	tag := uint32(hash >> (g.segBits & 63))
	// The key's home runs' lines (requestHomeRun's), on their way with the
	// slot's. By prefetch, not load: a load of a line not yet come holds
	// its place in the CPU's reorder window until the line comes, a
	// prefetch leaves at once, so the window holds more of the work
	// around it.
	first, second := g.entriesOff+g.homeByte(tag), g.entriesOff+g.secondHomeByte(tag)
	offheap.PrefetchWordsForRead(tier.Word64(first&^7), tier.Word64((first+g.homeLast)&^7),
		tier.Word64(second&^7), tier.Word64((second+g.homeLast)&^7))
	if g.homeTail != 0 {
		// A long value's later lines in its first home run, as a Put
		// requests them (requestPutLines): otherwise the copy requests
		// them only when it reaches them, one memory latency after the
		// slot's. See requestPutLines for what else was tried.
		offheap.PrefetchForRead(tier.Bytes(first+64, g.homeTail))
	}
	kn := uint64(len(key))
	// Keys of 8 to 16 bytes compare as two words, overlapping when shorter
	// than 16, as sameKey does.
	var keyLo, keyHi uint64
	short := kn >= 8 && kn <= 16
	if short {
		keyLo, keyHi = binary.LittleEndian.Uint64(key), binary.LittleEndian.Uint64(key[kn-8:])
	}
	for p, probes := uint64(tag), g.slots; probes > 0; p, probes = p+1, probes-1 {
		slotAt := tierHeaderSize + (p&g.slotMask)*8
		slot := tier.Load64(slotAt)
		if slot == 0 {
			if tier.Load64(thNext) != 0 {
				return dst, Unsure // a later tier may hold the key
			}
			if seq&1 == 0 && offheap.LoadAfterLoads(seqWord) == seq && atomic.LoadUint64(tb.active) == n {
				return dst, Absent
			}
			return dst, Unsure
		}
		if slotTag(slot) != tag {
			continue
		}
		c := uint64(uint32(slot)&^refBit) - 1
		if c >= g.chunks {
			return dst, Unsure
		}
		at := g.entriesOff + c<<shift
		// As in probeHome: the entry must decode, its run in the tier and
		// holding header, key and value, before any of them is read.
		lens := tier.Uint64(at) // key length, value length
		klen, vlen := uint64(uint32(lens)), lens>>32
		nch := uint64(uint32(tier.Uint64(at + 8)))
		if nch-1 >= g.chunks-c || entryHeaderSize+klen+vlen > nch<<shift {
			return dst, Unsure
		}
		k := at + entryHeaderSize
		if klen != kn {
			continue
		}
		if short {
			// Go's | and ^ bind alike, left to right: the brackets matter.
			if (tier.Uint64(k)^keyLo)|(tier.Uint64(k+klen-8)^keyHi) != 0 {
				continue
			}
		} else if string(tier.Bytes(k, klen)) != string(key) {
			continue
		}
		if g.cache {
			return tb.tryCached(dst, seqWord, seq, (base+slotAt)/8, slot, base+k+klen, vlen)
		}
		out := append(dst, tier.Bytes(k+klen, vlen)...)
		if seq&1 == 0 && offheap.LoadAfterLoads(seqWord) == seq && atomic.LoadUint64(tb.active) == n {
			return out, Found
		}
		return dst, Unsure
	}
	return dst, Unsure
}

// probeHome looks for key in the first tier of segment index, without a
// lock: the probe of the writers' lock-free looks (lookupHome,
// tryOverwriteOptimistic), and the model of TryGet's own copy of it. For keys of 8
// to 16 bytes it calls nothing.
// Found: the stored value is bytes v to v+vlen of the tiers area, in the
// entry's run of nch chunks, which it checked lies in the tier, and slot,
// at word slotAt of the tiers area, names the entry. Absent: no tier holds
// the key. Unsure: a later tier may hold it, or an entry the probe met did
// not decode (torn, or damaged: the slow path reports it). The caller
// validates with the segment's sequence, and uses what was checked here
// rather than reading any of it again.
func (tb *Table) probeHome(index, hash uint64, key []byte) (slotAt, slot, v, vlen, nch uint64, answer Answer) {
	g := &tb.geom
	words := tb.tierWords
	base := index * g.tierSize // bytes
	slotsAt := base>>3 + tierHeaderSize/8
	tag := uint32(hash >> (g.segBits & 63))
	// The key's home runs, where its entry is unless others took them
	// first, are on their way with the slot.
	tb.prefetchHomeRun(index, tag)
	n := uint64(len(key))
	shift := g.chunkShift & 63
	for p, probes := uint64(tag), g.slots; probes > 0; p, probes = p+1, probes-1 {
		slotAt = slotsAt + p&g.slotMask
		slot = atomic.LoadUint64(&words[slotAt])
		if slot == 0 {
			if atomic.LoadUint64(&words[base>>3+thNext/8]) != 0 {
				break // a later tier may hold the key
			}
			return 0, 0, 0, 0, 0, Absent
		}
		if slotTag(slot) != tag {
			continue
		}
		c := uint64(uint32(slot)&^refBit) - 1
		if c >= g.chunks {
			break
		}
		at := base + g.entriesOff + c<<shift
		// Every entry the probe meets must decode, as in find: the run
		// lies in the tier and holds header, key and value, checked before
		// either is sliced.
		lens := words[at>>3] // key length, value length
		klen, vlen := uint64(uint32(lens)), lens>>32
		nch := uint64(uint32(words[at>>3+1]))
		if nch-1 >= g.chunks-c || entryHeaderSize+klen+vlen > nch<<shift {
			break
		}
		k := at + entryHeaderSize
		if klen == n && sameKey(tb.tierBytes[k:k+n], key) {
			return slotAt, slot, k + n, vlen, nch, Found
		}
	}
	return 0, 0, 0, 0, 0, Unsure
}

// tryCached ends TryGet in a cache map, whose stored value (bytes v to
// v+vlen of the tiers area, bounds checked) starts with its expiry: an
// expired entry is absent, a live one is marked referenced for the CLOCK
// hand (slot, at word slotAt) and copied out.
func (tb *Table) tryCached(dst []byte, seqWord *uint64, seq uint64, slotAt, slot, v, vlen uint64) ([]byte, Answer) {
	value, live, ok := tb.userValue(tb.tierBytes[v : v+vlen])
	answer, out := Absent, dst
	switch {
	case !ok:
		return dst, Unsure
	case live:
		tb.reference(&tb.tierWords[slotAt], slot)
		answer, out = Found, append(dst, value...)
	}
	if seq&1 == 0 && offheap.LoadAfterLoads(seqWord) == seq {
		return out, answer
	}
	return dst, Unsure
}

// sameKey reports whether stored, as long as key, holds the same bytes.
// Keys of 8 to 16 bytes are compared in two 8-byte words (overlapping when
// shorter than 16) without a call, which in Get's fast path would spill
// every live register around it.
func sameKey(stored, key []byte) bool {
	if n := len(key); n >= 8 && n <= 16 && len(stored) == n {
		// Go's | and ^ bind alike, left to right: the brackets matter.
		return (binary.LittleEndian.Uint64(stored)^binary.LittleEndian.Uint64(key))|
			(binary.LittleEndian.Uint64(stored[n-8:])^binary.LittleEndian.Uint64(key[n-8:])) == 0
	}
	return string(stored) == string(key)
}

// seqWord is segment index's modification sequence, reached through the
// table (see Get).
func (tb *Table) seqWord(index int64) *uint64 {
	return &tb.segWords[index*(segmentHeaderSize/8)+shSeq/8]
}

// lookupHome is a writer's look for key (which hashes to segment index)
// in the segment's first tier, without a lock: probeHome's answer as
// Segment-relative figures. When found, pos is the key's slot index, slot
// the slot as read (its entry's first chunk is slotChunk(slot)) and vlen
// the stored value's length, and the whole run lies in the tier. decided
// is false when the answer lies beyond the first tier or something did not
// decode. The caller validates the result with the segment's sequence.
func (tb *Table) lookupHome(index int64, hash uint64, key []byte) (pos int64, slot uint64, vlen int64, found, decided bool) {
	slotAt, slot, _, v, _, answer := tb.probeHome(uint64(index), hash, key)
	if answer != Found {
		return 0, 0, 0, false, answer == Absent
	}
	return int64(slotAt) - tb.layout.slotsWord(index), slot, int64(v), true, true
}

// requestEntryLines starts fetching the cache lines after the first that an
// entry at byte at of the tiers area, with a key of klen bytes and a value
// of the map's average size, would cover. Prefetch uses it, for a batch
// whose lookups follow later: a lone lookup no longer does, since on a CPU
// that overlaps consecutive lookups the loads cost more than they saved
// (see Table.Get). An entry that starts late in its line covers one line
// more than one that starts early, which is why this counts lines rather
// than always requesting the second. It requests them with prefetches, not
// loads: loads of a 1 KiB value's 16 lines for each of a batch's keys held
// the CPU's reorder window, so that a batch of long values took longer
// with loads; with short values the two are alike.
func (tb *Table) requestEntryLines(at, klen int64) {
	end := at + entryHeaderSize + klen + tb.layout.expectedValue
	if limit := int64(len(tb.tierBytes)); end > limit {
		end = limit
	}
	if first := (at | 63) + 1; first < end {
		offheap.PrefetchForRead(tb.tierBytes[first:end])
	}
}

// Prefetch starts fetching the lines that lookups of keys (hashes[i] the
// hash of keys[i]) will read, so that their cache misses overlap. It only
// loads.
func (tb *Table) Prefetch(hashes []uint64, keys [][]byte) {
	// It requests first every key's segment sequence, home slot and home run, then,
	// once those have arrived, the entry each slot names. It only loads,
	// to warm the cache; it decides nothing, and the lookups that follow
	// validate as always. hashes[i] is the hash of keys[i].
	l := &tb.layout
	for _, h := range hashes {
		index := tb.segmentOf(h)
		_ = atomic.LoadUint64(tb.seqWord(index))
		tag := uint32(h >> l.tagShift)
		_ = atomic.LoadUint64(&tb.tierWords[l.slotsWord(index)+int64(uint64(tag)&l.slotMask)])
		// The lookup's probe reads the home runs whether the entry is
		// there or not: requested here, they cost the lookup no wait.
		tb.requestHomeRun(uint64(index), tag)
	}
	for i, h := range hashes[:min(len(hashes), len(keys))] {
		index := tb.segmentOf(h)
		tag := uint32(h >> l.tagShift)
		at := l.slotsWord(index)
		slots := tb.tierWords[at : at+l.Slots]
		// The first few slots of the run, usually in the home's line.
		for p, n := uint64(tag)&l.slotMask, 0; n < prefetchProbes; p, n = (p+1)&l.slotMask, n+1 {
			slot := atomic.LoadUint64(&slots[p])
			if slot == 0 {
				break
			}
			if slotTag(slot) != tag {
				continue
			}
			if c := slotChunk(slot); c >= 0 && c < l.Chunks {
				entry := l.entryByte(index, c)
				_ = atomic.LoadUint64(&tb.tierWords[entry/8])
				tb.requestEntryLines(entry, int64(len(keys[i])))
			}
			break
		}
	}
}

// prefetchProbes bounds how far along a key's run Prefetch looks for its
// entry: runs are short at the map's load, and a longer one is left to the
// lookup.
const prefetchProbes = 4
