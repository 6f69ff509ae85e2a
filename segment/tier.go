package segment

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/internal/keyhash"
	"github.com/sharedmap/sharedmap/offheap"
)

// tier is a view of one tier in the mapping. It holds only slices into the
// shared memory, so making one costs no allocation.
type tier struct {
	index  int64
	header []uint64 // the 8 words of the tier header
	slots  []uint64
	bitmap []uint64
	space  []byte // entry space
}

// tier returns the view of tier t, which must be < Tiers.
func (tb *Table) tier(t int64) tier {
	l := &tb.layout
	bytes, words, base := tb.area(t) // within mappings Open and SetGrowth bounds-checked once
	w := base / 8
	return tier{
		index:  t,
		header: words[w : w+tierHeaderSize/8 : w+tierHeaderSize/8],
		slots:  words[w+tierHeaderSize/8 : w+tierHeaderSize/8+l.Slots : w+tierHeaderSize/8+l.Slots],
		bitmap: words[w+l.bitmapOff/8 : w+l.bitmapOff/8+l.Chunks/64 : w+l.bitmapOff/8+l.Chunks/64],
		space:  bytes[base+l.entriesOff : base+l.entriesOff+l.Chunks*l.ChunkSize : base+l.entriesOff+l.Chunks*l.ChunkSize],
	}
}

func (t *tier) next() uint64          { return atomic.LoadUint64(&t.header[thNext/8]) }
func (t *tier) entries() uint64       { return atomic.LoadUint64(&t.header[thEntries/8]) }
func (t *tier) addEntries(d int64)    { atomic.AddUint64(&t.header[thEntries/8], uint64(d)) }
func (t *tier) usedChunks() uint64    { return atomic.LoadUint64(&t.header[thUsedChunks/8]) }
func (t *tier) lowestFree() uint64    { return atomic.LoadUint64(&t.header[thLowestFree/8]) }
func (t *tier) setLowestFree(v int64) { atomic.StoreUint64(&t.header[thLowestFree/8], uint64(v)) }

// entryAt decodes the entry header at chunk c, checking every field against
// the tier bounds. ok is false if the bytes cannot be an entry: corruption,
// or a torn read by an optimistic reader.
func (tb *Table) entryAt(t *tier, c int64) (klen, vlen, nch int64, ok bool) {
	l := &tb.layout
	if c < 0 || c >= l.Chunks {
		return 0, 0, 0, false
	}
	off := c * l.ChunkSize
	h := t.space[off : off+entryHeaderSize]
	klen = int64(binary.LittleEndian.Uint32(h[ehKeyLen:]))
	if l.LargeValues {
		var kind uint32
		if klen, kind = splitKeyLen(uint32(klen)); kind == kindDescriptor|kindPart {
			return 0, 0, 0, false
		}
	}
	vlen = int64(binary.LittleEndian.Uint32(h[ehValueLen:]))
	nch = int64(binary.LittleEndian.Uint32(h[ehChunks:]))
	if nch <= 0 || nch > l.Chunks-c || entryHeaderSize+klen+vlen > nch*l.ChunkSize {
		return 0, 0, 0, false
	}
	return klen, vlen, nch, true
}

// Kinds of entry, in files with Layout.LargeValues: the two high bits of
// the header's key length word. Neither: an ordinary entry (a key and its
// value). Both at once is damage.
const (
	kindDescriptor = 1 << 31 // the key's value is large: the entry holds its descriptor
	kindPart       = 1 << 30 // a part of a large value, under a part key
	kindMask       = kindDescriptor | kindPart
)

// splitKeyLen splits an entry header's key length word into the length
// and the kind bits.
func splitKeyLen(w uint32) (klen int64, kind uint32) {
	return int64(w &^ kindMask), w & kindMask
}

// kindAt is the kind of the entry at chunk c, which entryAt accepted: 0 in
// files without LargeValues.
func (tb *Table) kindAt(t *tier, c int64) uint32 {
	if !tb.layout.LargeValues {
		return 0
	}
	off := c * tb.layout.ChunkSize
	return binary.LittleEndian.Uint32(t.space[off+ehKeyLen:]) & kindMask
}

// key and value slice an entry whose header entryAt accepted.
func (tb *Table) entryKey(t *tier, c, klen int64) []byte {
	off := c*tb.layout.ChunkSize + entryHeaderSize
	return t.space[off : off+klen]
}

func (tb *Table) entryValue(t *tier, c, klen, vlen int64) []byte {
	off := c*tb.layout.ChunkSize + entryHeaderSize + klen
	return t.space[off : off+vlen]
}

// prefetchSkip is how much of an entry a writer usually finds in its cache
// already: its lookup loaded the header and key and requested both home
// runs' first 128 bytes (see requestHomeRun), where most entries are put.
const prefetchSkip = 128

// prefetchMax bounds how much of an entry is prefetched: a larger value's
// lines would leave the L1 cache before its copy reached them, and the
// copy's own sequential stores are what the hardware prefetcher follows.
const prefetchMax = 4096

// prefetchTail asks for the cache lines of entry (the bytes a writer is
// about to store, from the entry's first) past prefetchSkip, and returns
// at once. Writers call it before computing the entry's checksum, which
// then runs while the lines arrive. Without it a Put of a 1 KiB value paid
// for the 15 missing lines at its unlock, whose lock-prefixed instruction
// waits for every earlier store.
func prefetchTail(entry []byte) {
	if len(entry) > prefetchSkip {
		offheap.PrefetchForWrite(entry[prefetchSkip:min(len(entry), prefetchMax)])
	}
}

// entryHead is an entry's header as the two little-endian words it is
// stored as: the key and value lengths, then the run's chunk count and the
// checksum. Kept in registers and stored a word at a time: built as a
// byte array by 4-byte stores and copied out by a 16-byte load, it cost a
// failed store-to-load forwarding on every Put.
type entryHead struct{ lengths, chunksAndSum uint64 }

// entryHeader encodes the header of an entry holding key and value in a run
// of nch chunks, checksum included. It reads only the caller's slices, so
// writers compute it outside the write lock, except where taking the run
// made them modify already (a compaction or an eviction).
func (tb *Table) entryHeader(nch int64, key, value []byte) entryHead {
	return tb.kindHeader(nch, 0, key, value)
}

// kindHeader is entryHeader of an entry of the given kind (kindDescriptor,
// kindPart or 0), whose bits the key length word carries and the checksum
// covers.
func (tb *Table) kindHeader(nch int64, kind uint32, key, value []byte) entryHead {
	h := entryHead{lengths: uint64(uint32(len(key))|kind) | uint64(uint32(len(value)))<<32, chunksAndSum: uint64(uint32(nch))}
	if tb.layout.Checksums {
		h.chunksAndSum |= uint64(headChecksum(h.lengths, uint32(nch), key, value)) << 32
	}
	return h
}

// store writes h at the start of b, the entry's bytes.
func (h *entryHead) store(b []byte) {
	binary.LittleEndian.PutUint64(b[ehKeyLen:], h.lengths)
	binary.LittleEndian.PutUint64(b[ehChunks:], h.chunksAndSum)
}

// entryBytes is the entry at chunk c with a key of klen bytes and value,
// from its header to its value's end: the bytes a writer of that entry
// stores into.
func (tb *Table) entryBytes(t *tier, c, klen int64, value []byte) []byte {
	off := c * tb.layout.ChunkSize
	return t.space[off : off+entryHeaderSize+klen+int64(len(value))]
}

// writeEntry stores a whole entry (header, key, value) at chunk c.
func (tb *Table) writeEntry(t *tier, c int64, h *entryHead, key, value []byte) {
	e := tb.entryBytes(t, c, int64(len(key)), value)
	h.store(e)
	copy(e[entryHeaderSize:], key)
	copy(e[entryHeaderSize+len(key):], value)
}

// rewriteInPlace stores header h and value over the entry at byte off of
// the tiers area, whose key (of klen bytes) stays where it is, with the
// undo record used as rec says. The caller holds the write lock with the
// sequence odd (seq), has checked that value fits the entry's run and,
// unless rec is unsaved, that the record holds the entry.
func (s *Segment) rewriteInPlace(off int64, h *entryHead, klen int64, value []byte, seq uint64, rec record) {
	switch rec {
	case saveOld:
		s.saveUndo(off, entryHeaderSize+klen+int64(len(value)), seq)
	case staged:
		s.nameStaged(off)
	}
	b, off := s.tb.bytesAt(off)
	v := off + entryHeaderSize + klen
	h.store(b[off : off+entryHeaderSize])
	testStep()
	// In two halves, so that tests can stop a writer in the middle of the
	// value (a death leaves it torn anywhere).
	half := int64(len(value)) / 2
	copy(b[v:v+half], value[:half])
	testStep()
	copy(b[v+half:v+int64(len(value))], value[half:])
	testStep()
	s.clearUndo()
	testStep()
}

// entryChecksum covers the lengths, the chunk count (head: the header before
// its checksum field), the key and the value. It is never 0, so that 0 can
// mean "not computed".
func entryChecksum(head, key, value []byte) uint32 {
	if len(head) == ehChecksum {
		return headChecksum(binary.LittleEndian.Uint64(head), binary.LittleEndian.Uint32(head[8:]), key, value)
	}
	return streamChecksum(head, key, value)
}

// headChecksum is entryChecksum of the header whose first 12 bytes are
// lengths and chunks, as little-endian words.
func headChecksum(lengths uint64, chunks uint32, key, value []byte) uint32 {
	if sum, ok := keyhash.Entry(lengths, chunks, key, value); ok {
		return checksumOf(sum)
	}
	var head [ehChecksum]byte
	binary.LittleEndian.PutUint64(head[:], lengths)
	binary.LittleEndian.PutUint32(head[8:], chunks)
	return streamChecksum(head[:], key, value)
}

// streamChecksum is entryChecksum computed over copies of head, key and
// value, or streamed through a digest when they are long.
func streamChecksum(head, key, value []byte) uint32 {
	var sum uint64
	switch n := len(head) + len(key) + len(value); {
	case n <= smallChecksumBytes:
		sum = smallEntrySum(head, key, value)
	case n <= checksumStackBytes:
		// One pass over a contiguous copy: for small entries the copy costs
		// less than a streaming digest's buffering.
		var buf [checksumStackBytes]byte
		sum = xxhash.Sum64(append(append(append(buf[:0], head...), key...), value...))
	default:
		var d xxhash.Digest
		d.Reset()
		_, _ = d.Write(head)
		_, _ = d.Write(key)
		_, _ = d.Write(value)
		sum = d.Sum64()
	}
	return checksumOf(sum)
}

// checksumOf is the stored checksum of an entry whose XXH64 is sum: its
// low 32 bits, 1 for 0.
func checksumOf(sum uint64) uint32 {
	if s := uint32(sum); s != 0 {
		return s
	}
	return 1
}

// smallEntrySum is the XXH64 of a small entry, from a copy in a buffer
// that fits it: Go zeroes a stack buffer whole before use, and zeroing the
// 512-byte one is a noticeable part of a small Put's instructions.
func smallEntrySum(head, key, value []byte) uint64 {
	var buf [smallChecksumBytes]byte
	return xxhash.Sum64(append(append(append(buf[:0], head...), key...), value...))
}

// checksumStackBytes is the largest entry checksummed from a copy on the
// stack; smallChecksumBytes the largest copied into the smaller buffer.
const (
	checksumStackBytes = 512
	smallChecksumBytes = 128
)

// validEntry decodes the entry at chunk c and checks its checksum (when the
// map keeps them).
func (tb *Table) validEntry(t *tier, c int64) (key []byte, nch int64, ok bool) {
	klen, vlen, nch, ok := tb.entryAt(t, c)
	if !ok {
		return nil, 0, false
	}
	key = tb.entryKey(t, c, klen)
	off := c * tb.layout.ChunkSize
	if !tb.checksumHolds(t.space[off:off+entryHeaderSize], key, tb.entryValue(t, c, klen, vlen)) {
		return nil, 0, false
	}
	return key, nch, true
}

// checksumHolds reports whether an entry's header, key and stored value
// agree with the checksum in the header (always, in a map without them).
func (tb *Table) checksumHolds(head, key, stored []byte) bool {
	return !tb.layout.Checksums || binary.LittleEndian.Uint32(head[ehChecksum:]) == entryChecksum(head[:ehChecksum], key, stored)
}
