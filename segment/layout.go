package segment

// This file holds everything the segment package keeps in shared memory.
//
// The file, after offheap's header page (HeaderSize bytes) and the areas
// hashmap places before GlobalOff (the lock arena and the process
// registry; docs/FORMAT.md has the whole file):
//
//	offset            size              area
//	GlobalOff         globalSize (4096) global state
//	SegmentsOff       Segments * 64     segment headers
//	StatsOff          Segments * 64     counters, a line per segment (files with statistics)
//	UndoOff           Segments * UndoSize  undo records, one per segment (files with Undo)
//	TiersOff          Tiers * TierSize  tiers: Segments first tiers, then the overflow pool
//
// Global state (at GlobalOff):
//
//	offset size field            written by               guarded by
//	0      8    extraTiersUsed   Put that links a tier    atomic CAS (bounded by Tiers-Segments)
//	8      4088 reserved: zeros (CheckGlobal)
//
// Segment header (64 bytes, one cache line, at SegmentsOff + i*64):
//
//	offset size field     written by                    guarded by
//	0      8    lock      every operation               rwulock word (seed 002)
//	8      4    sleepers  waiters of the lock           atomic add (futex wake hint)
//	12     4    clearing  Clear: the odd seq's low     write lock (atomic; see clear.go)
//	                      32 bits while it runs, else 0
//	16     8    seq       writers: odd while modifying  write lock; read optimistically by Get
//	24     8    entries   inserts and deletes           update lock (atomic, read by Len)
//	32     8    tiers     linking a tier (overflow tiers in the chain)  update lock (atomic, read by Stats)
//	40     8    hand      cache maps: the CLOCK hand     write lock
//	          or parts    store maps with LargeValues: part entries   update lock (atomic, read by Len)
//	                      among the entries (else reserved zero)
//	48     8    evicted   cache maps: entries evicted    write lock (atomic, read by Stats)
//	56     8    expired   cache maps: expired entries    write lock (atomic, read by Stats)
//	                      reclaimed
//
// Counters of a segment (64 bytes, one cache line, at StatsOff + i*64), all
// atomic. (Readers count their hits and misses in their own process's
// registry slot instead, so that reading writes no shared line.)
//
//	offset size field          written by
//	0      8    puts           Put, PutIfAbsent, Compute that stored (under the update or write lock)
//	8      8    deletes        Delete, Compute that removed (under the update lock)
//	16     8    lockWaits      operations that found the lock taken and waited
//	24     8    lockTimeouts   lock waits of operations that ran out (LockTimeout), recovered after or not
//	32     8    compactions    compacting a tier (under the write lock); files with MoveCounters, else reserved
//	40     8    relocations    moving a value that outgrew its run (under the write lock); likewise
//	48     16   reserved
//
// Undo record of a segment (UndoSize bytes, at UndoOff + i*UndoSize): bytes
// that belong at the place it names while an entry is rewritten in place,
// the entry's old bytes or its new ones (see record). Written under the
// segment's write lock, read by recovery, which copies them to that place.
//
//	offset size              field
//	0      8                 at: where the saved bytes go, as a byte offset into the tiers area + 1; 0 = no rewrite under way
//	8      8                 seq: the segment's (odd) sequence during that rewrite
//	16     8                 len: how many bytes are saved
//	24     UndoSize-24       the saved bytes: the entry from its header to the end of the new value
//
// (The saved bytes follow the header directly: an entry of a 16-byte key
// and a 64-byte value and the header fit two lines.)
//
// Tier (TierSize bytes, at TiersOff + t*TierSize; tier t < Segments is the
// first tier of segment t):
//
//	offset       size             field
//	0            64               tier header (below)
//	64           Slots*8          hash lookup: slot = tag<<32 | (first chunk + 1); 0 = empty
//	bitmapOff    BitmapWords*8    chunk allocation bitmap, 1 = used
//	entriesOff   Chunks*ChunkSize entry space
//
// Tier header:
//
//	offset size field        written by             guarded by
//	0      8    next         linking a tier         update lock; atomic, read by Get (tier index + 1, 0 = none)
//	8      8    entries      inserts and deletes    update lock
//	16     8    lowestFree   allocator              update lock (a hint: no free chunk below it)
//	24     8    usedChunks   allocator              update lock
//	32     8    owner        linking a tier         update lock (segment index + 1, 0 = free)
//	40     8    order        linking a tier         update lock (position in the chain, 0 = first)
//	48     8    move         compaction             write lock: an entry sliding by less than its
//	                                                length (bit 63, source chunk << 31, destination)
//	56     8    moveDone     compaction             write lock: that entry's length << 32, bytes moved
//
// Files written before the move journal have zeros there (then reserved),
// which is no move. In files with stamps (Layout.Stamps) words 32 and 40
// hold the tier's stamp instead of owner and order: owner and position,
// then generation and checksum, 32 bits each (stamp.go), written at
// creation for first tiers and before the link for overflow tiers.
//
// Entry (at a chunk boundary, a run of Chunks chunks):
//
//	offset   size   field
//	0        4      key length
//	4        4      value length
//	8        4      chunks in the run
//	12       4      checksum (low 32 bits of XXH64 over bytes 0-11, key and value, 1 for 0; 0 = not computed)
//	16       klen   key
//	16+klen  vlen   value; in cache maps its first 8 bytes are the expiry
//	                (Unix nanoseconds, 0 = never), and the caller's value follows
//
// A slot's chunk field is 31 bits; bit 31 of the slot is the CLOCK reference
// bit of cache maps, set by Get (by CAS, only when clear, so a hot entry
// costs its readers one write per sweep) and cleared by the eviction hand.
//
// Every multi-byte field is little-endian; every word read by another
// process without the lock is read with sync/atomic. Words the lock gives
// one writer at a time (seq, puts) are written with offheap.AddExclusive:
// plain adds on amd64, whose stores other CPUs see in program order.
const (
	globalSize        = 4096
	segmentHeaderSize = 64
	tierHeaderSize    = 64
	entryHeaderSize   = 16
	undoHeaderSize    = 24
	slotSize          = 8

	// Global state offsets.
	gExtraTiersUsed = 0

	// Segment header offsets.
	shLock     = 0
	shSleepers = 8
	shClearing = 12
	shSeq      = 16
	shEntries  = 24
	shTiers    = 32
	shHand     = 40
	shParts    = 40 // store maps with LargeValues
	shEvicted  = 48
	shExpired  = 56

	// Counters.
	statsLineSize  = 64
	stPuts         = 0
	stDeletes      = 8
	stLockWaits    = 16
	stLockTimeouts = 24
	stCompactions  = 32
	stRelocations  = 40

	// Cache maps.
	metaSize = 8       // expiry prefix of every value
	refBit   = 1 << 31 // in a slot: read since the hand last passed

	// Undo record offsets (in words).
	udAt  = 0
	udSeq = 1
	udLen = 2

	// Tier header offsets.
	thNext       = 0
	thEntries    = 8
	thLowestFree = 16
	thUsedChunks = 24
	thOwner      = 32
	thOrder      = 40
	thMove       = 48
	thMoveDone   = 56

	// Entry header offsets.
	ehKeyLen   = 0
	ehValueLen = 4
	ehChunks   = 8
	ehChecksum = 12
)
