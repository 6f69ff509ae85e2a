package offheap

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// The header occupies the first page of the file. Everything in it is
// written once by the creating process, except the state word, which flips
// from initializing to ready as the commit point of creation.
//
//	offset size field         written by   guarded by
//	0      8    magic         creator      flock during creation, then immutable
//	8      4    version       creator      immutable
//	12     4    endian        creator      immutable: 0x01020304 as a native uint32
//	16     4    state         creator      atomic store; 1 initializing, 2 ready
//	20     4    layoutLen     creator      immutable
//	24     8    fileSize      creator      immutable: the whole reserved size
//	32     8    dataOffset    creator      immutable: HeaderSize
//	40     8    createdUnix   creator      immutable: creation time, ns
//	48     4    creatorPID    creator      immutable
//	52     4    reserved
//	56     8    checksum      creator      immutable: XXH64 of bytes [0, 64+layoutLen) with state and checksum as 0
//	64     n    layout        creator      immutable: opaque to this package
const (
	// HeaderSize is the size of the header page; data starts after it.
	HeaderSize = 4096
	// MaxLayoutSize is the largest layout record the header holds.
	MaxLayoutSize = HeaderSize - hdrLayout
	// FormatVersion is the file format this build writes and reads.
	FormatVersion = 1

	magic       = "SHRDMAP\x00"
	endianMark  = 0x01020304
	stateInit   = 1
	stateReady  = 2
	hdrMagic    = 0
	hdrVersion  = 8
	hdrEndian   = 12
	hdrState    = 16
	hdrLayLen   = 20
	hdrFileSize = 24
	hdrDataOff  = 32
	hdrCreated  = 40
	hdrPID      = 48
	hdrChecksum = 56
	hdrLayout   = 64
)

// header is the decoded header page.
type header struct {
	version    uint32
	state      uint32
	fileSize   int64
	dataOffset int64
	created    int64
	pid        uint32
	layout     []byte
}

// encodeHeader writes h into page (HeaderSize bytes), checksum included.
func encodeHeader(page []byte, h *header) {
	clear(page[:HeaderSize])
	copy(page[hdrMagic:], magic)
	binary.LittleEndian.PutUint32(page[hdrVersion:], h.version)
	binary.LittleEndian.PutUint32(page[hdrEndian:], endianMark)
	binary.LittleEndian.PutUint32(page[hdrLayLen:], uint32(len(h.layout)))
	binary.LittleEndian.PutUint64(page[hdrFileSize:], uint64(h.fileSize))
	binary.LittleEndian.PutUint64(page[hdrDataOff:], uint64(h.dataOffset))
	binary.LittleEndian.PutUint64(page[hdrCreated:], uint64(h.created))
	binary.LittleEndian.PutUint32(page[hdrPID:], h.pid)
	copy(page[hdrLayout:], h.layout)
	binary.LittleEndian.PutUint64(page[hdrChecksum:], headerChecksum(page, len(h.layout)))
	binary.LittleEndian.PutUint32(page[hdrState:], h.state)
}

// headerChecksum hashes the header as written, with the mutable state word
// and the checksum itself taken as zero.
func headerChecksum(page []byte, layoutLen int) uint64 {
	var d xxhash.Digest
	d.Reset()
	var zero [8]byte
	_, _ = d.Write(page[:hdrState])
	_, _ = d.Write(zero[:4])
	_, _ = d.Write(page[hdrState+4 : hdrChecksum])
	_, _ = d.Write(zero[:8])
	_, _ = d.Write(page[hdrLayout : hdrLayout+layoutLen])
	return d.Sum64()
}

// decodeHeader parses and checks a header page. It never panics on any
// input, and reports the first problem as one of the sentinel errors. The
// state is returned as found; callers decide what a non-ready state means.
func decodeHeader(page []byte) (header, error) {
	var h header
	if len(page) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrTruncated, len(page), HeaderSize)
	}
	if string(page[hdrMagic:hdrMagic+8]) != magic {
		return h, fmt.Errorf("%w: no sharedmap magic at offset 0", ErrNotSharedMap)
	}
	h.version = binary.LittleEndian.Uint32(page[hdrVersion:])
	if h.version > FormatVersion {
		return h, fmt.Errorf("%w: format version %d, this build reads up to %d", ErrVersion, h.version, FormatVersion)
	}
	if h.version == 0 {
		return h, fmt.Errorf("%w: format version 0", ErrNotSharedMap)
	}
	if e := binary.LittleEndian.Uint32(page[hdrEndian:]); e != endianMark {
		return h, fmt.Errorf("%w: marker %#x", ErrEndianness, e)
	}
	h.state = binary.LittleEndian.Uint32(page[hdrState:])
	n := binary.LittleEndian.Uint32(page[hdrLayLen:])
	if n > MaxLayoutSize {
		return h, fmt.Errorf("%w: layout length %d exceeds %d", ErrChecksum, n, MaxLayoutSize)
	}
	if sum := binary.LittleEndian.Uint64(page[hdrChecksum:]); sum != headerChecksum(page, int(n)) {
		return h, fmt.Errorf("%w: header checksum %#x does not match its contents", ErrChecksum, sum)
	}
	h.fileSize = int64(binary.LittleEndian.Uint64(page[hdrFileSize:]))
	h.dataOffset = int64(binary.LittleEndian.Uint64(page[hdrDataOff:]))
	h.created = int64(binary.LittleEndian.Uint64(page[hdrCreated:]))
	h.pid = binary.LittleEndian.Uint32(page[hdrPID:])
	h.layout = append([]byte(nil), page[hdrLayout:hdrLayout+int(n)]...)
	if h.dataOffset != HeaderSize || h.fileSize < HeaderSize {
		return h, fmt.Errorf("%w: data offset %d, file size %d", ErrChecksum, h.dataOffset, h.fileSize)
	}
	return h, nil
}
