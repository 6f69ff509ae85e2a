package segment

import (
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/sharedmap/sharedmap/offheap"
)

// Finding the layout of a map whose file header is lost.
//
// The header records the parameters a map was created with; everything
// else in the file is laid out from them (newLayout). What the areas
// before the segments say (the lock arena's and the process registry's own
// headers give where the global state starts; the registry's ledgers and
// counters per process give the segment count, and whether the file keeps
// counters and fast ledgers) leaves few unknowns: whether the file has
// undo records, the average entry size, the entries per tier and the size
// of the overflow pool. Those are enumerated, keeping each layout whose end
// is the file's end; each distinct geometry is then scored against the
// tiers themselves: their header words, hash slots and allocation bitmaps
// must agree, and the entries their slots name must decode, hash to that
// segment and slot tag, and pass their checksums. A wrong geometry reads
// slots and entries at the wrong places, where none of that holds; the
// right one is the only one whose entries verify. Whether it is a cache map
// (which puts an 8-byte expiry before each value) is read from the
// segment headers' eviction words, the slots' reference bits and the
// values; whether it keeps checksums, from the entries.
//
// What cannot be recovered is told, not guessed: the exact Entries, key
// and value sizes and bloat factor the map was created with (any that
// give the same geometry read the same bytes; the ones chosen are said as
// such), and the lock algorithm, which reading does not need.

// InferBase is what the areas before the segments say of a map whose file
// header is lost.
type InferBase struct {
	GlobalOff   int64 // where the global state starts: after the lock arena and the process registry
	Segments    int64 // the segment count, from the registry's ledgers or counters per process
	MaxSegments int64 // the most it may split into (flag splits), from the ledgers, when more than Segments; else 0
	Stats       bool  // the file keeps a line of counters per segment
	FastLedgers bool  // its registry keeps fast ledgers
}

// Inferred is the layout InferLayout found, and what it rests on.
type Inferred struct {
	Layout Layout
	// verified counts the entries the chosen layout was checked on (those
	// named by the slots of the tiers sampled) that decoded, hashed to
	// their segment and slot and passed their checksums; contradicted, the
	// things looked at that disagreed with it.
	verified, contradicted int
	// candidates is how many distinct geometries fit the file's size.
	candidates int
	// Notes say how each choice was made, for a person.
	Notes []string
}

// maxInferCandidates bounds the geometries scored: a file's size admits a
// few hundred at most (measured on the sizes the tests make); more means
// the areas before the segments said something odd.
const maxInferCandidates = 100000

// InferLayout finds the layout of the map in r, a mapping of the whole
// file (fileSize bytes) whose header is lost, from the candidate bases the
// areas before the segments allow. The layout's Params are ones that give
// that geometry, not necessarily those the map was created with (Notes
// says so). It never writes r. It fails if no geometry fits the file, or
// if geometries that read different bytes score alike.
func InferLayout(r *offheap.Region, bases []InferBase, fileSize int64) (Inferred, error) {
	if fileSize > r.Len() {
		return Inferred{}, fmt.Errorf("%w: a file of %d bytes in a mapping of %d", ErrBadLayout, fileSize, r.Len())
	}
	if len(bases) == 0 {
		return Inferred{}, fmt.Errorf("%w: no segment count and offset to start from", ErrBadLayout)
	}
	cands, err := candidateLayouts(bases, fileSize)
	if err != nil {
		return Inferred{}, err
	}
	if len(cands) == 0 {
		return Inferred{}, fmt.Errorf("%w: no layout of %d segments after offset %d ends at the file's end (%d bytes)", ErrBadLayout, bases[0].Segments, bases[0].GlobalOff, fileSize)
	}
	scores := make([]score, len(cands))
	for i := range cands {
		scores[i] = scoreLayout(r, &cands[i])
	}
	best := 0
	for i := range cands {
		if scores[i].better(scores[best], &cands[i], &cands[best]) {
			best = i
		}
	}
	out := Inferred{Layout: cands[best], verified: scores[best].good, contradicted: scores[best].bad, candidates: len(cands)}
	bk := readKeyOf(&cands[best])
	for i := range cands {
		if readKeyOf(&cands[i]) != bk && scores[i].value() >= scores[best].value() && scores[best].good > 0 {
			return out, fmt.Errorf("%w: two layouts read the file differently and fit it as well: %s and %s", ErrBadLayout, describe(&cands[best]), describe(&cands[i]))
		}
	}
	if scores[best].good == 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("no tier looked at names an entry that verifies under any of the %d layouts that fit the file: the map is empty, or its tiers are damaged too", len(cands)))
	}
	l := &out.Layout
	out.Notes = settleParams(r, l, out.Notes)
	// The record the chosen parameters make must be this very geometry.
	var splitTo int64
	if l.Splits {
		splitTo = l.MaxSegments
	}
	again, err := newLayout(l.Params, l.GlobalOff, l.Checksums, l.Stats, l.Undo, splitTo)
	again.markSplits()
	again.MoveCounters, again.FastLedgers, again.Stamps, again.LargeValues = l.MoveCounters, l.FastLedgers, l.Stamps, l.LargeValues
	if err != nil || keyOf(&again) != keyOf(l) {
		return out, fmt.Errorf("%w: the parameters chosen do not give back the layout found (%v)", ErrBadLayout, err)
	}
	out.Layout = again
	out.Notes = append(out.Notes, fmt.Sprintf("layout: %s, chosen of %d that fit the file's size; %d entries looked at verify under it, %d things disagree",
		describe(&out.Layout), len(cands), out.verified, out.contradicted))
	out.Notes = append(out.Notes, fmt.Sprintf("recorded as %d entries of %d-byte keys and %d-byte values, bloat %g: parameters that give this geometry, not necessarily those the map was created with",
		out.Layout.Entries, out.Layout.AverageKeySize, out.Layout.AverageValueSize, out.Layout.MaxBloatFactor))
	if note := growthLogNote(r, &out.Layout); note != "" {
		out.Notes = append(out.Notes, note)
	}
	return out, nil
}

// splitsTo is newLayout's maxSegments for base b: 0 unless it splits.
func splitsTo(b InferBase) int64 {
	if b.MaxSegments > b.Segments {
		return b.MaxSegments
	}
	return 0
}

// markSplits makes a layout inferred for a map that splits one that grows
// too, as every such map does, to the tiers the file holds: the growth
// log is where the count of segments in use leaves room for it.
func (l *Layout) markSplits() {
	if l.Splits {
		l.Grows, l.MaxTiers, l.MaxSize = true, l.Tiers, l.End
	}
}

// candidateLayouts lists, once each, the layouts that start from one of
// bases and end at the file's end: InferLayout's candidates.
func candidateLayouts(bases []InferBase, fileSize int64) ([]Layout, error) {
	var cands []Layout
	seen := map[geometryKey]bool{}
	for _, b := range bases {
		if b.Segments <= 0 || b.Segments > MaxSegments || b.Segments&(b.Segments-1) != 0 || b.GlobalOff <= 0 || b.GlobalOff >= fileSize ||
			b.MaxSegments != 0 && (b.MaxSegments <= b.Segments || b.MaxSegments > MaxSegments || b.MaxSegments&(b.MaxSegments-1) != 0) {
			continue
		}
		for _, undo := range []bool{true, false} {
			err := eachLayout(b, undo, fileSize, func(l Layout) error {
				k := keyOf(&l)
				if seen[k] {
					return nil
				}
				seen[k] = true
				cands = append(cands, l)
				if len(cands) > maxInferCandidates {
					return fmt.Errorf("%w: more than %d layouts fit the file", ErrBadLayout, maxInferCandidates)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return cands, nil
}

// settleParams decides, from the entries of the map in r laid out as l,
// whether it keeps checksums and whether it is a cache map, and sets l's
// parameters so; it appends to notes what it found.
func settleParams(r *offheap.Region, l *Layout, notes []string) []string {
	ex := examine(r, l)
	l.Checksums = ex.summed > 0
	l.Stamps = ex.stamped > 0
	// Every store map made since stamps has large values where its
	// tiers allow them; taking the flag for a file without any costs
	// nothing, since no entry of it has a kind bit to read.
	l.LargeValues = l.Stamps && l.largeValuesFit()
	if l.Stamps {
		notes = append(notes, fmt.Sprintf("tier stamps: kept (%d tiers looked at carry one that verifies)", ex.stamped))
	}
	switch {
	case ex.summed > 0:
		notes = append(notes, fmt.Sprintf("entry checksums: kept (%d of %d entries looked at carry one)", ex.summed, ex.entries))
	case ex.entries > 0:
		notes = append(notes, fmt.Sprintf("entry checksums: none (none of the %d entries looked at carries one): entries are read unverified", ex.entries))
	}
	// A cache map's average entry counts its expiry: the same class of
	// entry, keys and values 8 bytes shorter.
	avg := l.averageEntry()
	cacheAvg := max(avg, entryHeaderSize+1+metaSize)
	canBe := shapeTier(9, cacheAvg) == shapeTier(9, avg) && (!l.Undo || undoSize(cacheAvg) == undoSize(avg))
	cache, why := ex.cache(canBe)
	if cache {
		kv := cacheAvg - entryHeaderSize - metaSize
		key := max(1, kv-maxEntryBytes/2)
		l.Params.Cache, l.Params.AverageKeySize, l.Params.AverageValueSize = true, int(key), int(kv-key)
	}
	notes = append(notes, why)
	return notes
}

// geometryKey tells layouts apart by everything that places bytes.
type geometryKey struct {
	globalOff, segments, maxSegments, tiersOff, tierSize, tiers, slots, chunks, chunkSize, undoSize int64
	stats, fast, undo                                                                               bool
}

func keyOf(l *Layout) geometryKey {
	return geometryKey{l.GlobalOff, l.Segments, l.MaxSegments, l.TiersOff, l.TierSize, l.Tiers, l.Slots, l.Chunks, l.ChunkSize, l.UndoSize, l.Stats, l.FastLedgers, l.Undo}
}

// readKey tells layouts apart by what a reader of entries reads: two
// layouts that differ only in what readers never look at (the chunk count
// past the last entry, the undo records) read the same entries.
type readKey struct{ segmentsOff, segments, maxSegments, tiersOff, tierSize, tiers, slots, chunkSize, entriesOff int64 }

func readKeyOf(l *Layout) readKey {
	return readKey{l.SegmentsOff, l.Segments, l.MaxSegments, l.TiersOff, l.TierSize, l.Tiers, l.Slots, l.ChunkSize, l.entriesOff}
}

// describe says what a layout places where readers look, for a person.
// (Whether the file has undo records, only recovery reads; two layouts
// that differ in it alone read the same.)
func describe(l *Layout) string {
	segs := "segments"
	if l.Segments == 1 {
		segs = "segment"
	}
	return fmt.Sprintf("%d %s, %d tiers of %d bytes from offset %d (%d slots, %d chunks of %d bytes)",
		l.Segments, segs, l.Tiers, l.TierSize, l.TiersOff, l.Slots, l.Chunks, l.ChunkSize)
}

// eachLayout calls visit with every layout of base, with or without undo
// records, that newLayout makes and whose end is the file's end (on a
// host whose pages are larger than 4 KiB, the file is the end rounded up to
// one).
func eachLayout(b InferBase, undo bool, fileSize int64, visit func(Layout) error) error {
	s, ms := b.Segments, max(b.MaxSegments, b.Segments)
	page := int64(os.Getpagesize())
	minTiers := ms + s/8 + 1
	undoOff := b.GlobalOff + globalSize + ms*segmentHeaderSize
	if b.Stats {
		undoOff += ms * statsLineSize
	}
	divisors := map[int64][]int64{}
	var err error
	eachEntryClass(func(avg int64) bool {
		tiersOff := undoOff
		if undo {
			tiersOff += ms * undoSize(avg)
		}
		tiersOff = roundUp(tiersOff, 4096)
		// The smallest tier of this class (the fewest entries a tier
		// takes) must fit; larger entries only make tiers larger.
		if tiersOff+minTiers*shapeTier(9, avg).size > fileSize {
			return false
		}
		for end := fileSize / 4096 * 4096; end > fileSize-page && end > tiersOff; end -= 4096 {
			q := (end - tiersOff) / 4096
			ds, ok := divisors[q]
			if !ok {
				ds = divisorsOf(q)
				divisors[q] = ds
			}
			for _, d := range ds {
				tiers := q / d
				if tiers < minTiers || tiers > ms+999*s+s/8+1 {
					continue
				}
				if err = eachTierOf(b, undo, avg, 4096*d, tiers, end, visit); err != nil {
					return false
				}
			}
		}
		return true
	})
	return err
}

// eachEntryClass calls visit with one average entry size of each class
// that lays tiers out alike (the same chunk size and chunks per average
// entry, and the same undo record size), from the smallest (a one-byte key
// and an empty value) up, until visit returns false or the entry reaches
// the largest the format allows.
func eachEntryClass(visit func(avg int64) bool) {
	for avg := int64(entryHeaderSize + 1); avg <= entryHeaderSize+maxEntryBytes+metaSize; {
		if !visit(avg) {
			return
		}
		t := shapeTier(9, avg)
		next := t.homeChunks*t.chunkSize + 1 // one more chunk per entry
		if t.chunkSize < 1<<16 {
			next = min(next, 8*t.chunkSize+1) // a larger chunk
		}
		if u := undoSize(avg); 2*avg < maxUndoBytes {
			next = min(next, max(avg+1, (u-undoHeaderSize)/2+1)) // a larger undo record
		}
		avg = next
	}
}

// divisorsOf lists the divisors of q > 0, smallest first.
func divisorsOf(q int64) []int64 {
	var lo, hi []int64
	for d := int64(1); d*d <= q; d++ {
		if q%d == 0 {
			lo = append(lo, d)
			if d*d != q {
				hi = append(hi, q/d)
			}
		}
	}
	slices.Reverse(hi)
	return append(lo, hi...)
}

// eachTierOf calls visit with the layouts of base whose tiers are size
// bytes, tiers of them, for entries of avg bytes, ending at end: one for
// each distinct tier shape a count of entries per tier gives.
func eachTierOf(b InferBase, undo bool, avg, size, tiers, end int64, visit func(Layout) error) error {
	maxPer := int64(maxChunks) / (shapeTier(9, avg).homeChunks + 1)
	// The tier's size grows with the entries it takes: find those that
	// make it size bytes.
	lo := int64(9) + int64(sortSearch(maxPer-9, func(i int64) bool { return shapeTier(9+i, avg).size >= size }))
	if lo > maxPer || shapeTier(lo, avg).size != size {
		return nil
	}
	var last tierShape
	for per := lo; per <= maxPer && per < lo+1<<16; per++ {
		t := shapeTier(per, avg)
		if t.size != size {
			break
		}
		if t.slots == last.slots && t.chunks == last.chunks {
			continue
		}
		entries, ok := entriesFor(per, b.Segments)
		if !ok {
			continue
		}
		last = t
		kv := avg - entryHeaderSize
		key := max(1, kv-maxEntryBytes/2)
		ms := max(b.MaxSegments, b.Segments)
		x := tiers - ms - b.Segments/8 - 1
		bloat := 1 + float64(x)/float64(b.Segments)
		for extraTiers(bloat, b.Segments) > x+b.Segments/8+1 {
			bloat = math.Nextafter(bloat, 0)
		}
		p := Params{Entries: int(entries), AverageKeySize: int(key), AverageValueSize: int(kv - key),
			MaxBloatFactor: bloat, Segments: int(b.Segments), NoUndo: !undo}
		if checkParams(p, true) != nil {
			continue
		}
		l, err := newLayout(p, b.GlobalOff, true, b.Stats, undo, splitsTo(b))
		if err != nil || l.End != end || l.TierSize != size || l.Tiers != tiers {
			continue
		}
		l.markSplits()
		l.MoveCounters, l.FastLedgers = b.Stats, b.FastLedgers
		if err := visit(l); err != nil {
			return err
		}
	}
	return nil
}

// sortSearch is sort.Search over int64: the smallest i in [0, n) for which
// f is true, or n.
func sortSearch(n int64, f func(int64) bool) int64 {
	lo, hi := int64(0), n
	for lo < hi {
		mid := int64(uint64(lo+hi) >> 1)
		if !f(mid) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// entriesFor finds a count of entries for which a map of segments takes
// per entries per tier (tierEntries), if there is one.
func entriesFor(per, segments int64) (int64, bool) {
	y := float64(per - 8)
	if y < 1 {
		return 0, false
	}
	root := (-4.5 + math.Sqrt(20.25+4*y)) / 2
	e := int64(math.Floor(root * root * float64(segments)))
	for _, c := range []int64{e, e - 1, e + 1, e - 2, e + 2} {
		if c >= 1 && c <= 1<<40 && tierEntries(c, segments) == per {
			return c, true
		}
	}
	return 0, false
}

// sampleTiers is how many first tiers, and how many overflow tiers,
// scoreLayout looks at: enough for entries to tell the right geometry
// from the others, few enough to score every candidate in well under a
// second for a map of a million entries.
const sampleTiers = 64

// maxSlotsLooked bounds the entries looked at per tier.
const maxSlotsLooked = 32
