package segment

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
)

// Errors of segment operations; the hashmap package re-exports them.
var (
	// ErrLarge: the key holds a large value (see large.go), which this
	// operation does not handle; nothing was changed. The hashmap package
	// catches it and takes the large-value path.
	ErrLarge = errors.New("key holds a large value")
	// ErrFull: the entry fits no tier of its segment and the overflow pool
	// is used up (the map reached its bloat limit). Nothing was written.
	ErrFull = errors.New("map is full")
	// ErrTooLarge: the encoded entry is larger than a whole tier.
	ErrTooLarge = errors.New("entry too large")
	// ErrCorrupt: the file holds something no correct writer produces.
	ErrCorrupt = errors.New("map data corrupt")
)

// corruptError locates a problem found in the file.
type corruptError struct {
	segment int64
	tier    int64 // -1 when the problem is not tied to one tier
	problem string
}

// Error names the segment (and tier, when known) and the problem.
func (e *corruptError) Error() string {
	if e.tier < 0 {
		return fmt.Sprintf("segment %d: %s", e.segment, e.problem)
	}
	return fmt.Sprintf("segment %d tier %d: %s", e.segment, e.tier, e.problem)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *corruptError) Unwrap() error { return ErrCorrupt }

// Table is every segment of one mapped map, in one process.
type Table struct {
	region     *offheap.Region
	dataAt     func(off int64) (start, end int64, ok bool) // see SetDataAt; nil: every byte may be data
	layout     Layout
	allocate   func(off, n int64) error // reserves disk blocks for a tier before first use
	timeout    time.Duration
	extraTiers *uint64
	active     *uint64 // segments in use, N, as a checked word (segmentsWord): the global state's in files that split, else a word of this process holding Segments
	activeCopy *uint64 // its second copy (the same word in files that do not split)
	split      splitter
	present    atomic.Int64 // tiers the file holds as far as this process has seen: Tiers, or more in a file that grows
	growth     growth       // how the file grows (see SetGrowth); zero in files that do not
	segs       []Segment
	chainHints []atomic.Pointer[[]int64] // per segment, the overflow tiers its chain had when this process last looked (see requestChain)
	roomHints  []atomic.Uint64           // per segment, where this process last found room in its chain (a roomHint; see roomFrom)
	readOnly   bool                      // the mapping is PROT_READ: readers never touch lock words
	admin      Locker
	queueLocal bool        // writers of one segment in this process queue on Segment.local first
	closing    atomic.Bool // CloseFastPaths has begun

	// recoverAfterTimeout, if set, repairs what dead processes left in a
	// segment whose lock wait timed out, and reports whether a second wait
	// is worth it (see SetRecoverAfterTimeout).
	recoverAfterTimeout func(segment int64) bool

	// The tiers area as bytes and as words, for Get's fast path, which
	// indexes them directly instead of building a tier view per call.
	tierBytes []byte
	tierWords []uint64
	// The tiers past Tiers in a file that grows, mapped apart (see
	// SetGrowth): the bytes and words of tier Tiers on.
	poolBytes []byte
	poolWords []uint64
	segWords  []uint64     // the segment headers, for the same reason
	tierSpan  offheap.Span // the tiers area again, for TryGet alone (see offheap.Span)
	segSpan   offheap.Span // the segment headers, likewise
	geom      geometry     // the layout's figures Get needs, as it needs them
	undoCap   int64        // bytes an undo record holds (see Segment.saveUndo)

	// Cache maps: the clock expiry times are compared with, and buffers
	// for building stored values (expiry prefix + value) without
	// allocating.
	now  func() int64
	bufs sync.Pool

	// Counted in this process only, for Stats and tests.
	Compactions atomic.Int64 // tiers compacted
	Relocations atomic.Int64 // values moved because they outgrew their chunks
}

// geometry holds the figures of the layout that Get's fast path uses, in
// the form it uses them (masks and shifts instead of sizes), together in
// one line.
type geometry struct {
	segBits    uint   // the hash bits the tag starts at (Layout.tagShift)
	slotMask   uint64 // Slots - 1
	slots      uint64
	tierSize   uint64
	entriesOff uint64 // of the entry space within a tier
	chunks     uint64
	chunkShift uint // log2(ChunkSize)
	cache      bool // a cache map: values carry an expiry, slots a reference bit
	homeRuns   uint64
	homeBytes  uint64 // of a home run
	homeLast   uint64 // the last word of a home run lookups request: within its first two lines
	homeTail   uint64 // bytes of a first home run past its first 64 that Put and TryGet request too, up to an average entry's end (0: none; see homeTail)
	bitmapOff  uint64 // of the chunk bitmap within a tier
}

// homeByte is where, within a tier's entry space, the home run of an entry
// whose slot tag is tag starts: the tier's entry space is cut into runs of
// an average entry's chunks, and the tag picks one (by its high bits,
// while its low bits pick the slot). An entry has two home runs, this one
// and secondHomeByte's (see Segment.allocHome).
func (g *geometry) homeByte(tag uint32) uint64 {
	return (uint64(tag) * g.homeRuns) >> 32 * g.homeBytes
}

// secondHomeByte is where the second home run of an entry whose slot tag
// is tag starts: homeByte of the tag scrambled by a multiplication by an
// odd constant (2^32 / the golden ratio), a bijection of the tags whose
// high bits depend on all of the tag's, so that keys sharing a first home
// are spread over the second.
func (g *geometry) secondHomeByte(tag uint32) uint64 {
	return g.homeByte(tag * secondHomeMultiplier)
}

const secondHomeMultiplier = 0x9E3779B9

// requestPutLines starts fetching, for a writer of the key with this hash
// in segment index's first tier, the line of its first slot and the lines
// of its two home runs that requestHomeRun loads (those for writing), with
// prefetches rather than requestHomeRun's loads: a load waits in the CPU's
// reorder window until its line arrives, so the entry checksum a Put
// computes next could only partly overlap the wait; after a prefetch, all
// of it does. The runs' later lines are requested here too, not only their
// first, for the same reason.
func (tb *Table) requestPutLines(index, hash uint64) {
	g := &tb.geom
	tag := uint32(hash >> (g.segBits & 63))
	base := index * g.tierSize
	words := tb.tierWords
	first, second := g.homeRunBytes(index, tag)
	offheap.PrefetchWords(&words[base>>3+tierHeaderSize/8+uint64(tag)&g.slotMask], &words[first>>3], &words[second>>3])
	offheap.PrefetchWordsForWrite(&words[(first+g.homeLast)>>3], &words[(second+g.homeLast)>>3])
	// A large value's lines past the first two, in its first home run,
	// where most entries are: without them its copy's stores waited for
	// memory at the unlock. TryGet requests the same lines for reading,
	// after its request of the home runs' first lines. Requested before
	// those, or with the second home run's too, they made a Get slower,
	// likely because those lines, mostly not needed, delay the ones the
	// lookup waits for.
	if g.homeTail != 0 {
		offheap.PrefetchForWrite(tb.tierBytes[first+64 : first+64+g.homeTail])
	}
}

// requestHomeBitmap starts fetching, for writing, the chunk bitmap's word
// that says whether the first home run of the key with this hash in
// segment index's first tier is free: an insert reads it, and at scale it
// is a miss of its own.
func (tb *Table) requestHomeBitmap(index, hash uint64) {
	g := &tb.geom
	tag := uint32(hash >> (g.segBits & 63))
	c := g.homeByte(tag) >> (g.chunkShift & 63)
	w := &tb.tierWords[(index*g.tierSize+g.bitmapOff)>>3+c>>6]
	offheap.PrefetchWordsForWrite(w, w)
}

// homeRunBytes is where segment index's two home runs for tag start, in
// bytes of the tiers area: of a lookup's lines, a run's first (the entry
// header and key) and the one at homeLast after it (the value, which the
// copy streams beyond that) are wanted on their way with the slot's.
func (g *geometry) homeRunBytes(index uint64, tag uint32) (first, second uint64) {
	runs := index*g.tierSize + g.entriesOff
	return runs + g.homeByte(tag), runs + g.secondHomeByte(tag)
}

// requestHomeRun starts fetching the home runs' lines (homeRunBytes) by
// loading words of them, whose values are not used: what matters is that
// the lines are coming. It is for Prefetch, a batch's first pass: there
// prefetch instructions made the batch slower (docs/PERFORMANCE.md).
func (tb *Table) requestHomeRun(index uint64, tag uint32) {
	g := &tb.geom
	first, second := g.homeRunBytes(index, tag)
	w := tb.tierWords
	atomic.LoadUint64(&w[first>>3])
	atomic.LoadUint64(&w[(first+g.homeLast)>>3])
	atomic.LoadUint64(&w[second>>3])
	atomic.LoadUint64(&w[(second+g.homeLast)>>3])
}

// prefetchHomeRun requests requestHomeRun's lines with prefetch instructions,
// for a lone lookup's probe (probeHome), which reads them as soon as its
// slot arrives. A load of a line not yet come holds its place in the CPU's
// reorder window, and, on x86, keeps the locked instruction after it (a
// Put's unlock) from executing, until the line comes, though the probe
// needs one home run's lines at most; a prefetch leaves at once. Even
// after Put requested the lines by prefetch (requestPutLines), loads here
// still made a Put slower; TryGet's copy of the probe gains the same way.
func (tb *Table) prefetchHomeRun(index uint64, tag uint32) {
	g := &tb.geom
	first, second := g.homeRunBytes(index, tag)
	w := tb.tierWords
	offheap.PrefetchWordsForRead(&w[first>>3], &w[(first+g.homeLast)>>3], &w[second>>3], &w[(second+g.homeLast)>>3])
}

func newGeometry(l *Layout) geometry {
	return geometry{segBits: l.tagShift, slotMask: l.slotMask, slots: uint64(l.Slots),
		tierSize: uint64(l.TierSize), entriesOff: uint64(l.entriesOff), chunks: uint64(l.Chunks),
		chunkShift: uint(bits.TrailingZeros64(uint64(l.ChunkSize))), cache: l.Cache,
		homeRuns: uint64(l.homeRuns), homeBytes: uint64(l.homeChunks * l.ChunkSize),
		homeLast: uint64(min(l.homeChunks*l.ChunkSize, 128) - 8),
		homeTail: homeTail(l.homeChunks*l.ChunkSize, l.averageEntry()), bitmapOff: uint64(l.bitmapOff)}
}

// homeTail is the length of a home run's part that requestPutLines and
// TryGet request beyond its first 64 bytes: up to an average entry's end (at
// most prefetchMax), for runs and entries longer than the two lines the
// probe requests anyway. It starts at byte 64, not 128: the probe requests
// the lines of bytes 0 and homeLast, and in a run that starts mid-line
// (every other run of 160 or 224 bytes) the line between those two begins
// before byte 128.
func homeTail(homeBytes, averageEntry int64) uint64 {
	if n := min(homeBytes, averageEntry, prefetchMax); n > 128 {
		return uint64(n - 64)
	}
	return 0
}

// Locker is an exclusive lock shared by every process that maps the file.
type Locker interface {
	Lock()
	Unlock() error
}

// SetAdminLock makes the table take overflow tiers under admin, the file's
// admin lock (nil: by CAS alone). It is the innermost lock.
func (t *Table) SetAdminLock(admin Locker) {
	// The tier's disk blocks are then reserved before the pool counter
	// moves, so a full disk wastes no tier. Innermost: taken with a
	// segment lock held, never the other way.
	t.admin = admin
}

// SetRecoverAfterTimeout makes a lock wait that times out call
// repair(segment) and, if it reports true, wait once more.
func (t *Table) SetRecoverAfterTimeout(repair func(segment int64) bool) {
	// A process that died holding the lock (or waiting for it) is why a
	// wait times out, and repair is what releases its share.
	t.recoverAfterTimeout = repair
}

// retryAfterTimeout is the slow path of a lock wait that failed with err:
// on a timeout, count the wait as one that ran out (stLockTimeouts: once,
// whatever the second wait's outcome), recover, and wait again with again.
func (s *Segment) retryAfterTimeout(err error, again func(time.Duration) error) error {
	if !errors.Is(err, rwulock.ErrTimeout) {
		return err
	}
	s.count(stLockTimeouts, 1)
	if s.tb.recoverAfterTimeout == nil || !s.tb.recoverAfterTimeout(s.index) {
		return err
	}
	return again(s.tb.timeout)
}

// SetLocalQueue makes this process's writers of one segment queue on a local
// token before the shared lock word. Set it before use.
func (t *Table) SetLocalQueue(on bool) {
	// SetLocalQueue makes this process's modifying operations on one
	// segment queue on a process-local token before they take the
	// segment's lock word, so that at most one of them at a time waits on
	// the shared word (the local half of lock cohorting). The queue's wait
	// counts towards the lock timeout, as the word's does. It must be set
	// before the table is used.
	t.queueLocal = on
	for i := range t.segs {
		if on && t.segs[i].local == nil {
			t.segs[i].local = make(chan struct{}, 1)
		}
	}
}

// Segment is a handle on one Segment: its header words and its lock.
type Segment struct {
	// local is the token of SetLocalQueue's queue, a channel of one rather
	// than a mutex so that the wait for it can time out: its holder may be
	// a Compute whose function writes to its own segment, or a writer
	// waiting out a lock another process keeps.
	local   chan struct{}
	tb      *Table
	index   int64
	lock    *rwulock.Lock
	seq     *uint64 // modification sequence: odd while a writer changes the segment
	entries *uint64
	tiers   *uint64
	fast    *uint64 // this process's fast ledger of the lock (see SetFastLedgers); nil: none

	// Store maps with LargeValues: how many of the segment's entries are
	// parts of large values (Len leaves them out). Same word as hand.
	parts *uint64

	// Cache maps.
	hand             *uint64 // the CLOCK hand: a position over the chain's slots
	evicted, expired *uint64 // entries evicted, and expired ones reclaimed

	counters []uint64 // the segment's line of counters; nil in files without

	// The undo record (see saveUndo): header words and saved bytes; nil in
	// files without.
	undoHead []uint64
	undoData []byte
	undoRec  []byte // both, as bytes
}

// Open attaches to the segments of a mapping laid out as l. allocate (may be
// nil) reserves disk blocks for a range before the range is first written;
// timeout bounds every lock wait.
func Open(r *offheap.Region, l Layout, allocate func(off, n int64) error, timeout time.Duration) (*Table, error) {
	if r.Len() < l.End {
		return nil, fmt.Errorf("%w: mapping of %d bytes, layout needs %d", ErrBadLayout, r.Len(), l.End)
	}
	if allocate == nil {
		allocate = func(int64, int64) error { return nil }
	}
	tb := &Table{region: r, layout: l, allocate: allocate, timeout: timeout,
		extraTiers: r.Uint64(l.GlobalOff + gExtraTiersUsed), readOnly: r.ReadOnly(),
		now: func() int64 { return time.Now().UnixNano() }}
	tb.present.Store(l.Tiers)
	tb.openSplits()
	tiersLen := l.Tiers * l.TierSize
	tb.tierBytes = r.Bytes(l.TiersOff, tiersLen)
	tb.tierWords = r.Uint64s(l.TiersOff, tiersLen/8)
	tb.segWords = r.Uint64s(l.SegmentsOff, l.MaxSegments*segmentHeaderSize/8)
	tb.tierSpan = r.Span(l.TiersOff, tiersLen)
	tb.segSpan = r.Span(l.SegmentsOff, l.MaxSegments*segmentHeaderSize)
	tb.geom = newGeometry(&tb.layout)
	tb.segs = make([]Segment, l.MaxSegments)
	tb.chainHints = make([]atomic.Pointer[[]int64], l.MaxSegments)
	tb.roomHints = make([]atomic.Uint64, l.MaxSegments)
	for i := range tb.segs {
		off := l.SegmentsOff + int64(i)*segmentHeaderSize
		tb.segs[i] = Segment{
			tb:      tb,
			index:   int64(i),
			lock:    rwulock.AtWithSleepers(r.Uint64(off+shLock), r.Uint32(off+shSleepers)),
			seq:     r.Uint64(off + shSeq),
			entries: r.Uint64(off + shEntries),
			tiers:   r.Uint64(off + shTiers),
			hand:    r.Uint64(off + shHand),
			parts:   r.Uint64(off + shParts),
			evicted: r.Uint64(off + shEvicted),
			expired: r.Uint64(off + shExpired),
		}
		if l.Stats {
			tb.segs[i].counters = r.Uint64s(l.StatsOff+int64(i)*statsLineSize, statsLineSize/8)
		}
		if l.Undo {
			off := l.UndoOff + int64(i)*l.UndoSize
			tb.segs[i].undoHead = r.Uint64s(off, undoHeaderSize/8)
			tb.segs[i].undoData = r.Bytes(off+undoHeaderSize, l.UndoSize-undoHeaderSize)
			tb.segs[i].undoRec = r.Bytes(off, l.UndoSize)
		}
	}
	tb.undoCap = math.MaxInt64 // no record: every rewrite that fits goes in place, as before
	if l.Undo {
		tb.undoCap = l.UndoSize - undoHeaderSize
	}
	return tb, nil
}

// SetDataAt gives the table a way to find the holes of its file (see
// offheap.File.DataAt), which CheckGlobal's look at every overflow tier's
// header uses to skip tiers never written: read through the mapping, each
// would take a page of the page cache. Set it before the table is used.
func (tb *Table) SetDataAt(dataAt func(off int64) (start, end int64, ok bool)) {
	tb.dataAt = dataAt
}

// Layout returns the geometry of the map.
func (tb *Table) Layout() *Layout { return &tb.layout }

// For returns the segment a key hash belongs to now. A split may move
// the key before the caller takes the segment's lock: every locked path
// checks again under the lock (see lockKeyed).
func (tb *Table) For(hash uint64) *Segment { return &tb.segs[tb.segmentOf(hash)] }

// Segment returns segment i (below Layout.MaxSegments; those from
// Segments() on are not in use yet).
func (tb *Table) Segment(i int) *Segment { return &tb.segs[i] }

// Len sums the entry counts of all segments in use. It takes no lock:
// with writers running it is a moment's estimate.
func (tb *Table) Len() int64 {
	var n int64
	for i := range tb.Segments() {
		n += tb.segs[i].Len()
	}
	return n
}

// ExtraTiersInUse is how many overflow tiers have been linked.
func (tb *Table) ExtraTiersInUse() int64 { return int64(atomic.LoadUint64(tb.extraTiers)) }

// Index is the segment's position in the table.
func (s *Segment) Index() int64 { return s.index }

// Lock is the segment's read/write/update lock.
func (s *Segment) Lock() *rwulock.Lock { return s.lock }

// Len is the segment's count of keys: its entries but for the parts of
// large values.
func (s *Segment) Len() int64 {
	n := int64(atomic.LoadUint64(s.entries))
	if s.tb.layout.LargeValues {
		n -= int64(atomic.LoadUint64(s.parts))
	}
	return n
}

// entryCount is the segment's count of entries, parts of large values
// included.
func (s *Segment) entryCount() int64 { return int64(atomic.LoadUint64(s.entries)) }

// Parts is how many of the segment's entries are parts of large values (0
// in files without LargeValues).
func (s *Segment) Parts() int64 {
	if !s.tb.layout.LargeValues {
		return 0
	}
	return int64(atomic.LoadUint64(s.parts))
}

// Tiers is the number of tiers in the segment's chain.
func (s *Segment) Tiers() int64 { return int64(atomic.LoadUint64(s.tiers)) + 1 }

// Seq is the modification sequence; odd while a writer is inside.
func (s *Segment) Seq() uint64 { return atomic.LoadUint64(s.seq) }

// SeqAfterReads is Seq read after every load this goroutine made before it
// (offheap.LoadAfterLoads): the closing read of a look at the segment
// validated by its sequence.
func (s *Segment) SeqAfterReads() uint64 { return offheap.LoadAfterLoads(s.seq) }

// location is where a key was found.
type location struct {
	tier       tier
	slot       uint64 // the slot as read
	pos        int64  // slot index
	chunk      int64
	klen, vlen int64
	nch        int64
	kind       uint32 // kindDescriptor for a large value's descriptor (see find)
}

// find looks the key up in the segment's chain of tiers. ok is false if the
// chain or an entry cannot be decoded: a torn optimistic read, or, under a
// lock, corruption.
//
// In files with LargeValues it never matches a part entry, and a match
// whose entry is a descriptor has loc.kind set: a caller that does not
// handle descriptors must answer ErrLarge (see errIfLarge) before it
// changes anything, so that a path that forgets them fails instead of
// taking the descriptor for the value.
func (s *Segment) find(hash uint64, key []byte) (loc location, found, ok bool) {
	return s.findKind(hash, key, false)
}

// findKind is find, of a part key when part is set (matching part entries
// alone) and of a user key otherwise.
func (s *Segment) findKind(hash uint64, key []byte, part bool) (loc location, found, ok bool) {
	tb := s.tb
	l := &tb.layout
	tag := uint32(hash >> tb.layout.tagShift)
	home := int64(uint64(tag) & l.slotMask)
	hint, learned := tb.requestChain(s.index, home), false
	t := s.index
	for hops := int64(0); hops < tb.Present(); hops++ {
		if hops > 0 && !learned && (hops > int64(len(hint)) || hint[hops-1] != t) {
			hint, learned = tb.learnChain(s.index), true
		}
		tv := tb.tier(t)
		pos := home
		for probes := int64(0); probes < l.Slots; probes++ {
			slot := atomic.LoadUint64(&tv.slots[pos])
			if slot == 0 {
				break
			}
			if slotTag(slot) == tag {
				c := slotChunk(slot)
				klen, vlen, nch, good := tb.entryAt(&tv, c)
				if !good {
					return location{}, false, false
				}
				if klen == int64(len(key)) && string(tb.entryKey(&tv, c, klen)) == string(key) {
					if kind := tb.kindAt(&tv, c); (kind == kindPart) == part {
						return location{tier: tv, slot: slot, pos: pos, chunk: c, klen: klen, vlen: vlen, nch: nch, kind: kind}, true, true
					}
				}
			}
			pos = (pos + 1) & int64(l.slotMask)
		}
		next := tv.next()
		if next == 0 {
			return location{}, false, true
		}
		if _, ok := tb.overflowLink(next); !ok {
			return location{}, false, false
		}
		t = int64(next - 1)
	}
	return location{}, false, false // a cycle in the chain
}

func (s *Segment) corrupt(t int64, problem string) error {
	return &corruptError{segment: s.index, tier: t, problem: problem}
}

// lockErr is err, from a lock wait of op, with the segment named. (A wait
// that ran out was counted where it did: retryAfterTimeout, beginUpdate.)
func (s *Segment) lockErr(op string, err error) error {
	return fmt.Errorf("%s: segment %d: %w", op, s.index, err)
}

// UsedChunks sums the chunks in use over every tier in use, without locks.
func (tb *Table) UsedChunks() int64 {
	var n int64
	l := &tb.layout
	for t := int64(0); t < l.MaxSegments+tb.ExtraTiersInUse() && t < tb.Present(); t++ {
		if t == tb.Segments() && t < l.MaxSegments {
			t = l.MaxSegments // first tiers of segments not split into yet: holes
		}
		tv := tb.tier(t)
		n += int64(tv.usedChunks())
	}
	return n
}

// count adds n to the counter at offset field of the segment's line, in
// files that have one.
func (s *Segment) count(field int, n uint64) {
	if s.counters != nil && !s.tb.readOnly {
		atomic.AddUint64(&s.counters[field/8], n)
	}
}

// countLocked adds one to the counter at offset field of the segment's
// line, for a caller that holds the segment's update or write lock: every
// writer of the field does, so no other can add at the same time.
func (s *Segment) countLocked(field int) {
	if s.counters != nil && !s.tb.readOnly {
		offheap.AddExclusive(&s.counters[field/8], 1)
	}
}

// countMove counts a compaction or a relocation in this process's counter
// local and, in files that keep them, at offset field of the segment's line.
func (s *Segment) countMove(local *atomic.Int64, field int) {
	local.Add(1)
	if s.tb.layout.MoveCounters {
		s.count(field, 1)
	}
}

// Counters are a segment's Counters since the map was created, summed over
// every process. (Hits and misses are the hashmap's: readers count them in
// their own registry slots.)
type Counters struct {
	Puts, Deletes int64 // entries stored and removed by operations
	// Operations that waited for the lock, and their waits that ran out
	// LockTimeout: each such wait once, whether the recovery pass after it
	// let the operation in or it ended in ErrTimeout.
	LockWaits, LockTimeouts int64
	Evicted, Expired        int64 // cache maps: evicted, and expired entries reclaimed
	// Tiers compacted and values moved because they outgrew their runs, in
	// files with Layout.MoveCounters (0 in older ones).
	Compactions, Relocations int64
}

// Counters reads the segment's counters, without locks. Files from before
// statistics have none (all zero but Evicted and Expired).
func (s *Segment) Counters() Counters {
	c := Counters{Evicted: s.evictedCount(), Expired: s.expiredCount()}
	if s.counters == nil {
		return c
	}
	load := func(field int) int64 { return int64(atomic.LoadUint64(&s.counters[field/8])) }
	c.Puts, c.Deletes = load(stPuts), load(stDeletes)
	c.LockWaits, c.LockTimeouts = load(stLockWaits), load(stLockTimeouts)
	if s.tb.layout.MoveCounters {
		c.Compactions, c.Relocations = load(stCompactions), load(stRelocations)
	}
	return c
}

// SetLedgers gives each segment lock of this table its ledger word in this
// process's registry slot (ledger(i) for segment i), so that what this
// process holds can be told apart if it dies. Call it before any operation.
func (tb *Table) SetLedgers(ledger func(i int) *uint64) {
	for i := range tb.segs {
		tb.segs[i].lock.SetLedger(ledger(i))
	}
}
