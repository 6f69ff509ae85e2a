package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Params are the sizing choices a map is created with. They are recorded in
// the file and never change.
type Params struct {
	Entries          int     // entries the map is sized for
	AverageKeySize   int     // bytes
	AverageValueSize int     // bytes
	MaxBloatFactor   float64 // how many times Entries the map may hold in the worst case (>= 1)
	Segments         int     // 0 = chosen from Entries; else a power of two
	// Cache makes the map a cache: every entry carries an expiry time, and
	// a full segment evicts (CLOCK) instead of failing with ErrFull.
	Cache bool
	// NoUndo makes the map without undo records (see Layout.Undo): values
	// rewritten in place do not go through one first.
	NoUndo bool
	// MaxSize, if larger than the file these parameters make, lets the
	// overflow pool grow (see Layout.Grows) until the file is MaxSize
	// bytes. Not for cache maps, which evict instead.
	MaxSize int64
	// MaxSegments, in a map that grows, bounds how many segments it may
	// split into (see Layout.Splits): 0 chooses (defaultMaxSegments), a
	// power of two larger than Segments sets it, -1 makes a map that does
	// not split.
	MaxSegments int
}

// Layout is the geometry of a map file, derived once from Params and then
// read back from the file header by every process that opens it. Maps
// created by this version have Stats, MoveCounters, Undo, FastLedgers and
// Stamps; older files may lack them (MoveCounters' zeros are kept reserved
// so that an older build, which rejects the flag, never reads them as
// damage).
type Layout struct {
	Params
	Segments       int64 // power of two
	Tiers          int64 // Segments first tiers + the overflow pool
	Slots          int64 // hash lookup slots per tier, power of two
	MaxTierEntries int64 // entries per tier before insertion moves to the next tier
	ChunkSize      int64 // bytes, power of two
	Chunks         int64 // chunks per tier, multiple of 64
	TierSize       int64 // bytes, multiple of 64
	GlobalOff      int64
	SegmentsOff    int64
	TiersOff       int64
	End            int64 // size of the whole file
	bitmapOff      int64 // within a tier
	entriesOff     int64 // within a tier
	tagShift       uint  // the hash bits the tag starts at: log2(Segments), or 32 in files that split
	expectedValue  int64 // stored value bytes Prefetch fetches ahead of the header (see requestEntryLines)
	homeChunks     int64 // chunks of an average entry: the size of a home run (see Segment.allocHome)
	homeRuns       int64 // home runs per tier
	slotMask       uint64
	Checksums      bool
	// Stats: the file has a line of counters per segment, at StatsOff.
	Stats    bool
	StatsOff int64
	// MoveCounters: the counters line also counts compactions and
	// relocations (older files keep reserved zeros there).
	MoveCounters bool
	// Undo: each segment has an undo record of UndoSize bytes at UndoOff,
	// so that an in-place rewrite cut short leaves a whole entry, old or
	// new (see record); without it the key is lost.
	Undo     bool
	UndoOff  int64
	UndoSize int64
	// FastLedgers: each process has a second ledger word per segment lock
	// in its registry slot, for TryOverwriteFastLedger (see
	// RecordHasFastLedgers). An older build, which rejects the flag, would
	// take those holds for a dead process's.
	FastLedgers bool
	// Stamps: every tier header's words 32 and 40 hold a stamp (owner,
	// position, hand-out generation, under a checksum; see stamp.go)
	// instead of the owner and order words, and every segment's first
	// tier carries one from creation, so that a tier is what its stamp
	// says and a zeroed segment is told from an empty one. An older build,
	// which rejects the flag, would read the stamp as owner and order.
	Stamps bool
	// Grows: when the overflow pool is used up, a writer lengthens the
	// file by as many tiers again as it has (up to MaxTiers) instead of
	// failing with ErrFull (see Table.growPool). The file then holds
	// between Tiers and MaxTiers tiers; every process maps MaxTiers' worth
	// of address space up front (MaxEnd), so none maps the file again.
	Grows bool
	// MaxTiers is the most tiers the file may hold: Tiers in files that
	// do not grow.
	MaxTiers int64
	// Splits: segments split online (linear hashing, see split.go), from
	// Segments at creation up to MaxSegments, so that a map that grew
	// keeps chains as short as one created at its size. Only with Grows.
	// The active count lives in the global state (Table.Segments); tags
	// are the hash's high 32 bits, so that they do not depend on it.
	Splits bool
	// MaxSegments is the most segments the map may split into, and so the
	// count of first tiers, segment headers, counter lines and undo
	// records the file has room for (tiers 0 to MaxSegments-1 are first
	// tiers; the overflow pool starts at MaxSegments): Segments in files
	// that do not split. The room of segments not yet split into is a
	// hole in the file until a split uses it.
	MaxSegments int64
	// LargeValues: a value too large for one entry is stored in parts
	// (see large.go), and the two high bits of an entry header's key
	// length say what the entry is (KindDescriptor, KindPart); segment
	// header word 40 counts the part entries. Only store maps whose
	// tiers' entry space is under 2^30 bytes have it, so that a length
	// word with a kind bit set never fits a tier: the lock-free readers,
	// which compare the raw word, then answer Unsure. An older build,
	// which rejects the flag, would read kind bits as damage.
	LargeValues bool
}

// Limits of the format. Entry lengths are 32-bit fields; slot chunk indexes
// are 32 bits; a tier must stay addressable by an int64.
const (
	MaxSegments     = 1 << 20
	maxChunks       = 1 << 30 // slot chunk fields are 31 bits: bit 31 is the CLOCK reference bit
	maxEntryBytes   = 1 << 30 // an entry (header, key and value) at most: a tier refuses a larger one (ErrTooLarge)
	maxEntries      = 1 << 40
	maxAverageSize  = maxEntryBytes / 2 // AverageKeySize and AverageValueSize each; the two together with the header fit in maxEntryBytes
	maxBloatFactor  = 1000
	defaultPerSeg   = 1024 // mean entries per segment: many segments for parallelism, each tier's hash lookup (2048 slots, 16 KiB) small enough to stay in cache; not tuned by measurement yet
	layoutMagic     = "SMLAYOUT"
	layoutVersion   = 1 // maps with no flag but checksums (files from before statistics)
	flagsVersion    = 2 // maps with statistics or cache mode: older builds must refuse them
	hashXXH64Seed0  = 1 // hash algorithm id recorded in the layout
	maxLoadPermille = 750
	maxLinesAhead   = 3 // lines of a value Prefetch requests before the entry header arrives

	// An undo record holds entries up to twice the average, within these
	// bounds; a larger entry is rewritten by moving it (see Segment.replace).
	minUndoBytes = 192 - undoHeaderSize
	maxUndoBytes = 4096 - undoHeaderSize
)

// ErrBadParams reports sizing parameters that cannot make a map.
var ErrBadParams = errors.New("invalid map parameters")

// ErrOversize, with ErrBadParams, reports parameters whose map would be
// larger than the format allows: more chunks in a tier than a slot can
// name, or more bytes than MaxMapBytes. Fewer entries make it fit.
var ErrOversize = errors.New("map too large for the format")

// MaxMapBytes bounds a map file: 64 TiB, half of the 47-bit user address
// space of x86-64 and arm64 Linux, which must map the whole file at once.
const MaxMapBytes = 1 << 46

// NewLayout derives the geometry of a map from its parameters. headerSize is
// where the segment areas may start (after the file header).
func NewLayout(p Params, headerSize int64, checksums bool) (Layout, error) {
	if err := checkParams(p, false); err != nil {
		return Layout{}, err
	}
	l, err := newLayout(p, headerSize, checksums, true, !p.NoUndo, 0)
	if err == nil && l.Grows && p.MaxSegments >= 0 {
		if ms := defaultMaxSegments(&l); ms > l.Segments {
			if ls, err := newLayout(p, headerSize, checksums, true, !p.NoUndo, ms); err == nil && ls.Grows && ls.MaxTiers > ls.Tiers {
				l = ls
			}
		}
	}
	l.MoveCounters = err == nil
	l.FastLedgers = err == nil
	l.Stamps = err == nil
	l.LargeValues = err == nil && l.largeValuesFit()
	return l, err
}

// largeValuesFit reports whether the layout may have LargeValues: a store
// map whose tiers' entry space is under 2^30 bytes (see Layout.LargeValues).
func (l *Layout) largeValuesFit() bool {
	return !l.Cache && l.Chunks*l.ChunkSize < 1<<30
}

// checkParams refuses parameters outside the ranges newLayout's arithmetic
// is sound for. Those a file records (recorded) are checked too, since a
// damaged or forged layout record would otherwise divide by zero or wrap
// sizes; the rules younger than the format (at most one segment per entry,
// an average entry no larger than an entry can be) are not applied to
// them, so that every file an older build made still opens. Each error
// names the parameter as Options does, the value given and the largest
// value accepted.
func checkParams(p Params, recorded bool) error {
	switch {
	case p.Entries <= 0 || int64(p.Entries) > maxEntries:
		return fmt.Errorf("%w: Entries %d: want 1 to %d (2^40)", ErrBadParams, p.Entries, int64(maxEntries))
	case p.AverageKeySize <= 0 || p.AverageKeySize > maxAverageSize:
		return fmt.Errorf("%w: AverageKeySize %d: want 1 to %d (2^29, the largest average the format records)", ErrBadParams, p.AverageKeySize, maxAverageSize)
	case p.AverageValueSize < 0 || p.AverageValueSize > maxAverageSize:
		return fmt.Errorf("%w: AverageValueSize %d: want 0 to %d (2^29, the largest average the format records)", ErrBadParams, p.AverageValueSize, maxAverageSize)
	case !(p.MaxBloatFactor >= 1 && p.MaxBloatFactor <= maxBloatFactor):
		return fmt.Errorf("%w: MaxBloatFactor %v: want 1 to %d", ErrBadParams, p.MaxBloatFactor, maxBloatFactor)
	case p.Segments < 0 || p.Segments > MaxSegments || (p.Segments > 0 && p.Segments&(p.Segments-1) != 0):
		return fmt.Errorf("%w: Segments %d: want 0 (chosen from Entries) or a power of two up to %d (2^20)", ErrBadParams, p.Segments, MaxSegments)
	case recorded && p.Segments == 0:
		return fmt.Errorf("%w: a recorded layout has 0 segments", ErrBadParams)
	case !recorded && p.Segments > p.Entries:
		// Each segment has a whole tier: more segments than entries only
		// makes the file huge (a million for 10 entries took 20 GB).
		return fmt.Errorf("%w: Segments %d for Entries %d: at most one per entry (0 picks about one per %d)", ErrBadParams, p.Segments, p.Entries, defaultPerSeg)
	case !recorded && averageEntry(p) > maxEntryBytes:
		// Such a map refuses every entry of the sizes it was made for
		// (ErrTooLarge): the average of the two exceeds what an entry can
		// hold, whatever the tier.
		room := maxEntryBytes - (averageEntry(p) - int64(p.AverageKeySize) - int64(p.AverageValueSize))
		return fmt.Errorf("%w: AverageKeySize %d with AverageValueSize %d: an entry holds at most %d bytes of key and value (%d, 1 GiB, with its header); the largest AverageValueSize accepted with this AverageKeySize is %d, the largest AverageKeySize with this AverageValueSize %d",
			ErrBadParams, p.AverageKeySize, p.AverageValueSize, room, int64(maxEntryBytes), room-int64(p.AverageKeySize), room-int64(p.AverageValueSize))
	}
	return nil
}

// defaultMaxSegments is MaxSegments for a map laid out as l without
// splits: Params.MaxSegments if set, else the largest power of two up to
// max(splitFactor x Segments, 1024) and MaxSegments (the format's) whose
// first tiers take at most half of MaxSize. The floor of 1024 lets a small
// map grow as far as a default one splits anyway.
func defaultMaxSegments(l *Layout) int64 {
	if p := int64(l.Params.MaxSegments); p > 0 {
		return p
	}
	ms := min(int64(nextPow2(uint64(max(splitFactor*l.Segments, 1024)))), MaxSegments)
	for ms > l.Segments && ms*l.TierSize > l.MaxSize/2 {
		ms /= 2
	}
	return ms
}

// splitFactor is how many times its segments a map splits into by
// default. What splits cost scales with it before any split happens: every
// registry slot has two ledger words per segment the map may split into,
// and the file's apparent size a first tier per such segment: at 16, a
// default map of a million entries reserved over a gigabyte of address
// space for its registry alone. A map that outgrows its Entries by more
// than this still grows, by chains, as maps that do not split do.
const splitFactor = 4

// newLayout lays out a map of p; maxSegments > 0 makes one that splits
// up to maxSegments segments (Layout.Splits).
func newLayout(p Params, headerSize int64, checksums, stats, undo bool, maxSegments int64) (Layout, error) {
	l := Layout{Params: p, Checksums: checksums, Stats: stats, Undo: undo}
	l.Segments = int64(p.Segments)
	if l.Segments == 0 {
		l.Segments = int64(nextPow2(uint64(ceilDiv(int64(p.Entries), defaultPerSeg))))
		if l.Segments > MaxSegments {
			l.Segments = MaxSegments
		}
	}
	l.tagShift = uint(bits.TrailingZeros64(uint64(l.Segments)))
	l.MaxSegments = l.Segments
	if maxSegments > 0 {
		if maxSegments <= l.Segments || maxSegments > MaxSegments || maxSegments&(maxSegments-1) != 0 || p.Cache {
			return Layout{}, fmt.Errorf("%w: MaxSegments %d: want a power of two above Segments %d, up to %d, in a map that is not a cache", ErrBadParams, maxSegments, l.Segments, MaxSegments)
		}
		l.Splits, l.MaxSegments, l.tagShift = true, maxSegments, 32
	}

	perTier := tierEntries(int64(p.Entries), l.Segments)
	l.MaxTierEntries = perTier
	avgEntry := l.averageEntry()
	l.expectedValue = min(avgEntry-entryHeaderSize-int64(p.AverageKeySize), maxLinesAhead*64)
	t := shapeTier(perTier, avgEntry)
	l.Slots, l.ChunkSize, l.Chunks = t.slots, t.chunkSize, t.chunks
	l.slotMask = uint64(l.Slots - 1)
	l.homeChunks = t.homeChunks
	l.homeRuns = l.Chunks / l.homeChunks
	if l.Chunks > maxChunks {
		return Layout{}, fmt.Errorf("%w: %w: Entries %d in %d segments make %d chunks per tier, more than the %d a slot can name; use more Segments or fewer Entries", ErrBadParams, ErrOversize, p.Entries, l.Segments, l.Chunks, int64(maxChunks))
	}
	l.bitmapOff, l.entriesOff, l.TierSize = t.bitmapOff, t.entriesOff, t.size
	l.Tiers = l.MaxSegments + extraTiers(p.MaxBloatFactor, l.Segments)
	l.GlobalOff = headerSize
	l.SegmentsOff = l.GlobalOff + globalSize
	l.StatsOff = l.SegmentsOff + l.MaxSegments*segmentHeaderSize
	statsBytes := int64(0)
	if stats {
		statsBytes = l.MaxSegments * statsLineSize
	}
	l.UndoOff = l.StatsOff + statsBytes
	undoBytes := int64(0)
	if undo {
		l.UndoSize = undoSize(avgEntry)
		undoBytes = l.MaxSegments * l.UndoSize
	}
	l.TiersOff = roundUp(l.UndoOff+undoBytes, 4096)
	end := float64(l.TiersOff) + float64(l.Tiers)*float64(l.TierSize)
	if end > MaxMapBytes {
		return Layout{}, fmt.Errorf("%w: %w: Entries %d of %d bytes each (an average key and value with their header) with MaxBloatFactor %v would need %.0f bytes, more than the %d (64 TiB) a map may take",
			ErrBadParams, ErrOversize, p.Entries, l.averageEntry(), p.MaxBloatFactor, end, int64(MaxMapBytes))
	}
	l.End = l.TiersOff + l.Tiers*l.TierSize
	l.MaxTiers = l.Tiers
	if p.MaxSize > l.End && !p.Cache {
		l.Grows = true
		l.MaxTiers = (min(p.MaxSize, MaxMapBytes) - l.TiersOff) / l.TierSize
	}
	return l, nil
}

// MaxEnd is the most bytes the file may take: End in files that do not
// grow.
func (l *Layout) MaxEnd() int64 { return l.TiersOff + l.MaxTiers*l.TierSize }

// tiersIn is how many tiers a file of length bytes holds whole, between
// Tiers and MaxTiers.
func (l *Layout) tiersIn(length int64) int64 {
	return min(max((length-l.TiersOff)/l.TierSize, l.Tiers), l.MaxTiers)
}

// tierEntries is MaxTierEntries for a map of entries in segments. A
// segment's first tier is sized a little beyond the 99.999th percentile of
// a Poisson count around the mean (mean + 4.5 sd, where that percentile is
// about 4.3 sd), so that few segments ever need an overflow tier.
func tierEntries(entries, segments int64) int64 {
	mean := float64(entries) / float64(segments)
	return int64(math.Ceil(mean+4.5*math.Sqrt(mean))) + 8
}

// tierShape is the geometry of a tier, in bytes from its start but for
// the counts.
type tierShape struct {
	slots      int64 // hash lookup slots, a power of two
	chunkSize  int64
	chunks     int64
	homeChunks int64 // chunks of an average entry
	bitmapOff  int64
	entriesOff int64
	size       int64
}

// shapeTier lays out a tier that takes perTier entries of avgEntry bytes
// on average.
func shapeTier(perTier, avgEntry int64) tierShape {
	var t tierShape
	t.slots = max(64, int64(nextPow2(uint64(ceilDiv(perTier*1000, maxLoadPermille)))))
	// Chunks: about 8 per average entry, so internal fragmentation stays
	// under an eighth; entries of other sizes take more or fewer chunks.
	t.chunkSize = 16
	for t.chunkSize*8 < avgEntry && t.chunkSize < 1<<16 {
		t.chunkSize *= 2
	}
	chunksPerEntry := ceilDiv(avgEntry, t.chunkSize) + 1 // +1: the rounding of sizes around the average
	t.chunks = roundUp(perTier*chunksPerEntry, 64)
	t.homeChunks = chunksPerEntry - 1
	t.bitmapOff = tierHeaderSize + t.slots*slotSize
	t.entriesOff = roundUp(t.bitmapOff+t.chunks/8, 64)
	t.size = roundUp(t.entriesOff+t.chunks*t.chunkSize, 4096)
	return t
}

// undoSize is the size of a segment's undo record for entries of avgEntry
// bytes on average.
func undoSize(avgEntry int64) int64 {
	return roundUp(undoHeaderSize+min(max(2*avgEntry, minUndoBytes), maxUndoBytes), 64)
}

// extraTiers is the size of the overflow pool of a map of segments grown
// to bloat times its entries.
func extraTiers(bloat float64, segments int64) int64 {
	return int64(math.Ceil((bloat-1)*float64(segments))) + segments/8 + 1
}

// segmentFor is the segment of a key hashed to hash when n segments are
// active (Segments <= n <= MaxSegments): linear hashing's address. With n
// in [m, 2m), m a power of two, the hash's low bits below 2m pick the
// segment, and those that name one not split into yet (>= n) lose their
// top bit, naming the segment that will split into it. With n a power of
// two it is hash & (n-1), as in files that do not split.
func segmentFor(hash, n uint64) uint64 {
	m := uint64(1) << (bits.Len64(n) - 1)
	i := hash & (2*m - 1)
	if i >= n {
		i -= m
	}
	return i
}

// slotsWord is where tier t's hash lookup starts, in words of the tiers
// area.
func (l *Layout) slotsWord(t int64) int64 { return (t*l.TierSize + tierHeaderSize) / 8 }

// entryByte is where chunk c of tier t starts, in bytes of the tiers area.
func (l *Layout) entryByte(t, c int64) int64 { return t*l.TierSize + l.entriesOff + c*l.ChunkSize }

// MaxEntryBytes is the largest encoded entry (header, key, value) a tier can
// hold.
func (l *Layout) MaxEntryBytes() int64 {
	n := l.Chunks * l.ChunkSize
	if n > maxEntryBytes {
		n = maxEntryBytes
	}
	return n
}

// Encode serializes the layout for the file header.
func (l *Layout) Encode() []byte {
	b := make([]byte, 0, 256)
	b = append(b, layoutMagic...)
	for _, v := range l.fields() {
		b = binary.LittleEndian.AppendUint64(b, uint64(*v))
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(l.MaxBloatFactor))
	if l.Grows {
		b = binary.LittleEndian.AppendUint64(b, uint64(l.MaxTiers))
	}
	return b
}

// fields lists the integer fields in their encoded order.
func (l *Layout) fields() []*int64 {
	var version, hash, flags, entries, key, value int64 = layoutVersion, hashXXH64Seed0, 0, int64(l.Entries), int64(l.AverageKeySize), int64(l.AverageValueSize)
	if l.Checksums {
		flags |= flagChecksums
	}
	if l.Cache {
		flags |= flagCache
	}
	if l.Stats {
		flags |= flagStats
	}
	if l.MoveCounters {
		flags |= flagMoveCounters
	}
	if l.Undo {
		flags |= flagUndo
	}
	if l.FastLedgers {
		flags |= flagFastLedgers
	}
	if l.Stamps {
		flags |= flagStamps
	}
	if l.Grows {
		flags |= flagGrows
	}
	if l.LargeValues {
		flags |= flagLargeValues
	}
	if l.Splits {
		flags |= flagSplits | encodeSplitBits(l.MaxSegments)
	}
	if flags&^flagChecksums != 0 {
		version = flagsVersion
	}
	return []*int64{&version, &hash, &flags, &entries, &key, &value,
		&l.Segments, &l.Tiers, &l.Slots, &l.MaxTierEntries, &l.ChunkSize, &l.Chunks, &l.TierSize,
		&l.GlobalOff, &l.SegmentsOff, &l.TiersOff, &l.End}
}

// Layout flags (field 2 of the record).
const (
	flagChecksums    = 1
	flagCache        = 2
	flagStats        = 4
	flagMoveCounters = 8 // only with flagStats
	flagUndo         = 16
	flagFastLedgers  = 32
	flagStamps       = 64
	flagGrows        = 128 // the record has MaxTiers after MaxBloatFactor
	flagLargeValues  = 256 // store maps whose tiers' entry space is under 2^30 bytes
	flagSplits       = 512 // only with flagGrows; log2(MaxSegments) in splitBitsMask
)

// The flags word's bits 16..20 hold log2(MaxSegments) in files with
// flagSplits, and are zero in others. The count is packed there rather
// than given a word of its own so that the record keeps the length that
// the header's room was measured for (offheap.MaxLayoutSize), and a
// caller may still choose it (Params.MaxSegments): a rule deriving it
// from the other fields would tie every file to the rule of the build
// that made it.
const (
	splitBitsShift = 16
	splitBitsMask  = 31 << splitBitsShift
)

// encodeSplitBits is the flags word's field for MaxSegments ms, a power
// of two up to 2^20; decodeSplitBits reads it back (0 if absent).
func encodeSplitBits(ms int64) int64 {
	return int64(bits.TrailingZeros64(uint64(ms))) << splitBitsShift
}

func decodeSplitBits(flags int64) int64 {
	if flags&splitBitsMask == 0 {
		return 0
	}
	return 1 << ((flags & splitBitsMask) >> splitBitsShift)
}

// layoutFields is the number of integer fields before MaxBloatFactor.
const layoutFields = 17

// RecordLen is the length of the segment layout record at the start of b
// (other records may follow it): longer in files that grow. It reads only
// the flags, as RecordHasStats does; DecodeLayout checks the rest.
func RecordLen(b []byte) int {
	n := len(layoutMagic) + 8*(layoutFields+1)
	off := len(layoutMagic) + 8*2
	if len(b) >= off+8 && string(b[:len(layoutMagic)]) == layoutMagic &&
		binary.LittleEndian.Uint64(b[off:])&flagGrows != 0 {
		n += 8
	}
	return n
}

// ErrBadLayout reports a layout record that this version cannot use: from a
// newer format, damaged, or inconsistent with the file.
var ErrBadLayout = errors.New("bad map layout")

// DecodeLayout reads a layout written by Encode and checks that it is one
// NewLayout could have produced for the same parameters and a file of
// fileSize bytes: every offset used later is derived and bounded here, so
// that a damaged header can never send an access outside the file.
func DecodeLayout(b []byte, headerSize, fileSize int64) (Layout, error) {
	const n = layoutFields
	if len(b) != RecordLen(b) || string(b[:len(layoutMagic)]) != layoutMagic {
		return Layout{}, fmt.Errorf("%w: not a sharedmap layout record (%d bytes)", ErrBadLayout, len(b))
	}
	v := make([]int64, n)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[len(layoutMagic)+8*i:]))
	}
	bloat := math.Float64frombits(binary.LittleEndian.Uint64(b[len(layoutMagic)+8*n:]))
	if v[0] != layoutVersion && v[0] != flagsVersion {
		return Layout{}, fmt.Errorf("%w: layout version %d, this build reads %d and %d", ErrBadLayout, v[0], layoutVersion, flagsVersion)
	}
	splitMax := decodeSplitBits(v[2])
	v[2] &^= splitBitsMask
	if v[2]&^(flagChecksums|flagCache|flagStats|flagMoveCounters|flagUndo|flagFastLedgers|flagStamps|flagGrows|flagLargeValues|flagSplits) != 0 || (v[2]&^flagChecksums != 0) != (v[0] == flagsVersion) ||
		(v[2]&flagMoveCounters != 0 && v[2]&flagStats == 0) || (v[2]&flagGrows != 0 && v[2]&flagCache != 0) ||
		(v[2]&flagSplits != 0 && v[2]&flagGrows == 0) || (v[2]&flagSplits != 0) != (splitMax != 0) {
		return Layout{}, fmt.Errorf("%w: flags %#x do not match layout version %d", ErrBadLayout, v[2]|encodeSplitBits(splitMax), v[0])
	}
	if v[1] != hashXXH64Seed0 {
		return Layout{}, fmt.Errorf("%w: unknown hash algorithm %d", ErrBadLayout, v[1])
	}
	p := Params{Entries: int(v[3]), AverageKeySize: int(v[4]), AverageValueSize: int(v[5]), MaxBloatFactor: bloat, Segments: int(v[6]),
		Cache: v[2]&flagCache != 0, NoUndo: v[2]&flagUndo == 0}
	if err := checkParams(p, true); err != nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrBadLayout, err)
	}
	var maxSegments int64
	if v[2]&flagSplits != 0 {
		maxSegments = splitMax
		if maxSegments <= int64(p.Segments) || maxSegments > MaxSegments || maxSegments&(maxSegments-1) != 0 {
			return Layout{}, fmt.Errorf("%w: MaxSegments %d: want a power of two above the %d segments the map was created with, up to %d", ErrBadLayout, maxSegments, p.Segments, MaxSegments)
		}
	}
	want, err := newLayout(p, headerSize, v[2]&flagChecksums != 0, v[2]&flagStats != 0, v[2]&flagUndo != 0, maxSegments)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: %v", ErrBadLayout, err)
	}
	want.MoveCounters = v[2]&flagMoveCounters != 0
	want.FastLedgers = v[2]&flagFastLedgers != 0
	want.Stamps = v[2]&flagStamps != 0
	want.LargeValues = v[2]&flagLargeValues != 0
	if want.LargeValues && !want.largeValuesFit() {
		return Layout{}, fmt.Errorf("%w: flags %#x: large values in a cache map or in tiers of 2^30 bytes or more", ErrBadLayout, v[2])
	}
	got := want
	gf, wf := got.fields(), want.fields()
	for i := 6; i < n; i++ {
		*gf[i] = v[i]
		if *gf[i] != *wf[i] {
			return Layout{}, fmt.Errorf("%w: field %d is %d, expected %d for these parameters", ErrBadLayout, i, v[i], *wf[i])
		}
	}
	if want.End > fileSize {
		return Layout{}, fmt.Errorf("%w: the map needs %d bytes, the file has %d", ErrBadLayout, want.End, fileSize)
	}
	if v[2]&flagGrows != 0 {
		maxTiers := int64(binary.LittleEndian.Uint64(b[len(layoutMagic)+8*(n+1):]))
		if maxTiers <= want.Tiers || maxTiers > (MaxMapBytes-want.TiersOff)/want.TierSize {
			return Layout{}, fmt.Errorf("%w: MaxTiers %d: want more than the %d tiers the file starts with, within %d bytes", ErrBadLayout, maxTiers, want.Tiers, int64(MaxMapBytes))
		}
		want.Grows, want.MaxTiers, want.MaxSize = true, maxTiers, want.TiersOff+maxTiers*want.TierSize
	}
	if want.Splits {
		want.Params.MaxSegments = int(want.MaxSegments)
	}
	return want, nil
}

func nextPow2(x uint64) uint64 {
	if x <= 1 {
		return 1
	}
	return 1 << bits.Len64(x-1)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func roundUp(a, m int64) int64 { return ceilDiv(a, m) * m }

// RecordSegments reads the segment count from a layout record without
// checking the rest, for callers that place other areas before the
// segments and need their size to know where the segments start.
func RecordSegments(b []byte) (int64, bool) {
	off := len(layoutMagic) + 8*6
	if len(b) < off+8 || string(b[:len(layoutMagic)]) != layoutMagic {
		return 0, false
	}
	n := int64(binary.LittleEndian.Uint64(b[off:]))
	return n, n > 0 && n <= 1<<30
}

// RecordMaxSegments reads from a layout record how many segments the map
// may split into (MaxSegments; the segment count in files that do not
// split), without checking the rest, as RecordSegments does: the process
// registry, which precedes the segments, has a ledger per segment.
func RecordMaxSegments(b []byte) (int64, bool) {
	n, ok := RecordSegments(b)
	flags := int64(binary.LittleEndian.Uint64(b[len(layoutMagic)+8*2:]))
	if !ok || flags&flagSplits == 0 {
		return n, ok
	}
	m := decodeSplitBits(flags)
	return m, m > 0 && m <= MaxSegments
}

// RecordGrowth reads from a layout record the size its file may grow to
// (Layout.MaxEnd; 0 for a file that does not grow) and the lengths it may
// have on the way, TiersOff plus whole tiers, without checking the rest,
// as RecordLen does: the file is mapped and its length checked before
// DecodeLayout checks the record (which refuses one whose fields
// disagree).
func RecordGrowth(b []byte) (limit, base, step int64) {
	if RecordLen(b) > len(b) || RecordLen(b) == len(layoutMagic)+8*(layoutFields+1) {
		return 0, 0, 0
	}
	field := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[len(layoutMagic)+8*i:])) }
	tiersOff, tierSize, maxTiers := field(15), field(12), field(layoutFields+1)
	if tiersOff <= 0 || tierSize <= 0 || maxTiers <= 0 || tiersOff > MaxMapBytes || maxTiers > (MaxMapBytes-tiersOff)/tierSize {
		return 0, 0, 0
	}
	return tiersOff + maxTiers*tierSize, tiersOff, tierSize
}

// RecordHasFastLedgers reads from a layout record whether the file has
// fast ledgers (Layout.FastLedgers), without checking the rest, as
// RecordHasStats does.
func RecordHasFastLedgers(b []byte) bool {
	off := len(layoutMagic) + 8*2
	return len(b) >= off+8 && string(b[:len(layoutMagic)]) == layoutMagic &&
		binary.LittleEndian.Uint64(b[off:])&flagFastLedgers != 0
}

// RecordHasStats reads from a layout record whether the file has
// statistics (a line of counters per segment), without checking the rest:
// the hashmap sizes the process registry, which precedes the segments, by it.
func RecordHasStats(b []byte) bool {
	off := len(layoutMagic) + 8*2
	return len(b) >= off+8 && string(b[:len(layoutMagic)]) == layoutMagic &&
		binary.LittleEndian.Uint64(b[off:])&flagStats != 0
}

// averageEntry is the bytes of an entry of the average sizes the map was
// made for.
func (l *Layout) averageEntry() int64 { return averageEntry(l.Params) }

// averageEntry is the bytes of an entry of the average sizes p plans for.
func averageEntry(p Params) int64 {
	n := int64(entryHeaderSize) + int64(p.AverageKeySize) + int64(p.AverageValueSize)
	if p.Cache {
		n += metaSize
	}
	return n
}
