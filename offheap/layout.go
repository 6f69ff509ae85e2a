package offheap

// The header is the first page of every map file. The creating process
// writes all of it once, under an exclusive flock(2), while the state word
// says "initializing"; flipping the state to "ready" is the commit point of
// creation. After that the header is immutable: only a copy found damaged
// is ever rewritten, from the other, so openers may read it without any
// lock beyond the brief flock taken by Open.
//
// The page holds the header twice, as bbolt and LMDB keep two meta pages:
// copy A in its first half and copy B in its second, byte for byte the
// same but for the state word while creation marks them ready (A first,
// then B). Each copy carries its own checksum over what it says, so one
// copy damaged, wherever the damage is, leaves the other to open the file
// with, and a writable Open rewrites the damaged one from it. Splitting
// the one page keeps the data area where version 1 had it.
//
// All integers are little-endian. The endianness marker is the one field
// written in the host's byte order, so that a file written on a big-endian
// machine is recognised as such instead of as garbage.
//
// One copy (offsets from the copy's start: 0 for A, 2048 for B):
//
//	offset  size  field        who writes it      guarded by
//	------  ----  -----------  -----------------  ------------------------------------------
//	     0     8  magic        creator            creation flock; immutable once ready
//	     8     4  version      creator            creation flock; immutable once ready
//	    12     4  endian       creator            creation flock; immutable once ready
//	    16     4  state        creator            atomic store/load; the commit point
//	    20     4  headerSize   creator            creation flock; immutable once ready
//	    24     8  fileSize     creator            creation flock; immutable once ready
//	    32     8  dataOffset   creator            creation flock; immutable once ready
//	    40     8  createdNano  creator            creation flock; immutable once ready
//	    48     4  creatorPID   creator            creation flock; immutable once ready
//	    52     4  layoutLen    creator            creation flock; immutable once ready
//	    56     8  checksum     creator            creation flock; immutable once ready
//	    64   960  reserved     nobody (zero)      not covered by the checksum
//	  1024  1024  layout       creator            creation flock; immutable once ready
//
// The file:
//
//	offset  size  part
//	------  ----  ----------------------------------------------------------
//	     0  2048  header copy A
//	  2048  2048  header copy B
//	  4096        data: users of the map, under their own locks (segment, ipc)
//
// Fields:
//
//   - magic: "SHRDMAP\x00". Anything else is not our file, and Open never
//     writes to it, not even with Create.
//   - version: FormatVersion of the writer. A reader refuses a newer one
//     (ErrVersion) before looking at anything a newer format may redefine,
//     the checksum included. A later format must not leave a copy that
//     verifies as version 2, or this build would open the file by it.
//   - endian: endianMark stored in the writer's native order.
//   - state: stateNone, stateInitializing or stateReady (see below). It is
//     the only field that changes after the header is written, so the
//     checksum leaves it out.
//   - headerSize: HeaderSize, the size of the header page (both copies).
//     Stored so a future format can grow the header and an old reader can
//     tell.
//   - fileSize: the whole reserved size of the file, header included. The
//     file is mapped once at this size and never grows or shrinks, so any
//     other length means someone else changed the file (ErrTruncated,
//     ErrSize).
//   - dataOffset: where the data area starts: HeaderSize in this version.
//   - createdNano: creation time, Unix nanoseconds, for mapctl and for
//     telling two creations of one path apart.
//   - creatorPID: the pid of the creating process, for diagnostics only
//     (pids are reused, so it is never used to decide liveness).
//   - layoutLen: the number of bytes of the layout record in use.
//   - checksum: XXH64 (seed 0) of the copy's bytes 0..63 with the state and
//     checksum fields read as zero, followed by the layoutLen bytes of the
//     layout record in use. Padding (the reserved bytes and the unused
//     layout tail) is left out: a flipped bit there changes nothing that
//     is read, so it costs nothing but a finding of Check, which Repair
//     mends.
//   - reserved: zero. Future fixed fields go here, so the layout record
//     never has to move.
//   - layout: opaque to this package; the layers above describe their
//     segments and tiers in it (segment.Layout.Encode). The largest a map
//     writes is 218 bytes (hashmap's TestLargestLayoutFits), a fifth of
//     the room.
//
// Version 1, which this build still reads, read-only (and never writes
// but to upgrade it: Upgrade), had one copy filling the page: the same
// fields at the same offsets, a layout of up to 3072 bytes at 1024, and a
// checksum over the whole page (state and checksum read as zero), padding
// included.
//
// The fields are placed so that every word wider than a byte is aligned
// to its own size (state is read and written atomically), and the header
// fills exactly one 4 KiB page, so it is also the whole of the first OS
// page on amd64 and can be msynced on its own.

const (
	// HeaderSize is the size of the header: the data area starts at this
	// offset. It is one 4 KiB page, the page size of amd64 and arm64 Linux
	// in their usual configurations.
	HeaderSize = 4096
	// MaxLayoutSize is the largest layout record the header can hold: a
	// copy minus the fixed fields and the room reserved for future ones.
	MaxLayoutSize = headerCopySize - hdrLayout
	// FormatVersion is the header format this build writes, and the newest
	// it reads. Version 1 (one copy of the header) is read too.
	FormatVersion = 2

	// headerCopySize is the size of one copy of the header: half the page.
	headerCopySize = HeaderSize / 2
	// maxLayoutSizeV1 is the largest layout record of a version-1 header.
	maxLayoutSizeV1 = HeaderSize - hdrLayout
)

// Where the two copies start.
const (
	copyA = 0
	copyB = headerCopySize
)

// Offsets of the header fields within a copy (see the byte map above).
const (
	hdrMagic      = 0
	hdrVersion    = 8
	hdrEndian     = 12
	hdrState      = 16
	hdrHeaderSize = 20
	hdrFileSize   = 24
	hdrDataOffset = 32
	hdrCreated    = 40
	hdrPID        = 48
	hdrLayoutLen  = 52
	hdrChecksum   = 56
	hdrReserved   = 64
	hdrLayout     = 1024
)

const (
	// magic opens every map file. The trailing NUL keeps it from matching
	// the start of a text file.
	magic = "SHRDMAP\x00"
	// endianMark reads as 0x01020304 only on a host of the writer's byte
	// order; a big-endian writer's marker reads as 0x04030201 here.
	endianMark = 0x01020304
)

// Values of the state word. They are far apart in Hamming distance (16 bits
// from each other and from zero) rather than 0, 1, 2: an Open with Create
// re-initializes a file whose state is not ready, wiping it, so a flipped
// bit in a ready file must read as corruption, never as "initializing".
const (
	stateNone         = 0          // the header is not written yet (the page is as ftruncate left it)
	stateInitializing = 0x0F0F0F0F // header written, Init running; only the creator holds the flock
	stateReady        = 0xF0F0F0F0 // creation committed; the header is immutable from now on
)
