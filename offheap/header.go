package offheap

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// header is the decoded header page (see layout.go for the byte map).
type header struct {
	version    uint32
	state      uint32
	fileSize   int64
	dataOffset int64
	created    int64 // Unix nanoseconds
	pid        uint32
	layout     []byte
}

// encodeHeader writes h over page, which must be HeaderSize bytes, with
// the checksum computed last. The state is stored with a plain write:
// callers either hold the creation flock or write into a private buffer.
func encodeHeader(page []byte, h *header) {
	if len(page) != HeaderSize || len(h.layout) > MaxLayoutSize {
		panic(fmt.Sprintf("sharedmap: assertion failed: encoding a %d-byte header page with a %d-byte layout", len(page), len(h.layout)))
	}
	le := binary.LittleEndian
	clear(page)
	copy(page[hdrMagic:], magic)
	le.PutUint32(page[hdrVersion:], h.version)
	binary.NativeEndian.PutUint32(page[hdrEndian:], endianMark)
	le.PutUint32(page[hdrState:], h.state)
	le.PutUint32(page[hdrHeaderSize:], HeaderSize)
	le.PutUint64(page[hdrFileSize:], uint64(h.fileSize))
	le.PutUint64(page[hdrDataOffset:], uint64(h.dataOffset))
	le.PutUint64(page[hdrCreated:], uint64(h.created))
	le.PutUint32(page[hdrPID:], h.pid)
	le.PutUint32(page[hdrLayoutLen:], uint32(len(h.layout)))
	copy(page[hdrLayout:], h.layout)
	le.PutUint64(page[hdrChecksum:], headerChecksum(page))
}

// headerChecksum hashes a whole header page with the state and checksum
// fields read as zero: the state changes after the checksum is written,
// and the checksum cannot cover itself.
func headerChecksum(page []byte) uint64 {
	var zero [8]byte
	d := xxhash.New()
	_, _ = d.Write(page[:hdrState])
	_, _ = d.Write(zero[:4])
	_, _ = d.Write(page[hdrState+4 : hdrChecksum])
	_, _ = d.Write(zero[:8])
	_, _ = d.Write(page[hdrChecksum+8 : HeaderSize])
	return d.Sum64()
}

// decodeHeader parses and checks a header page, which may be shorter than
// HeaderSize (a truncated file) or anything at all (a foreign file). It
// never panics and never trusts a length before checking it.
//
// The checks run in the order in which each one makes the next meaningful:
// magic (is it ours?), length, byte order, version (a newer format may
// redefine everything after it), state, checksum, then the fields. A header
// whose state is not ready is returned with an ErrNotReady error and only
// magic, version and state filled in: it was being written when its creator
// died, so nothing else in it can be trusted, and Open decides whether to
// re-initialize it.
func decodeHeader(page []byte) (header, error) {
	var h header
	le := binary.LittleEndian
	if n := min(len(page), len(magic)); !bytes.Equal(page[:n], []byte(magic)[:n]) {
		return h, fmt.Errorf("%w: the first bytes are %q, not %q", ErrNotSharedMap, page[:n], magic)
	}
	if len(page) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, len(page), HeaderSize)
	}
	if m := le.Uint32(page[hdrEndian:]); m != endianMark {
		if m == swap32(endianMark) {
			return h, fmt.Errorf("%w: written on a big-endian machine; this format is little-endian", ErrEndianness)
		}
		return h, fmt.Errorf("%w: byte-order marker %#08x, want %#08x", ErrEndianness, m, endianMark)
	}
	h.version = le.Uint32(page[hdrVersion:])
	switch {
	case h.version > FormatVersion:
		return h, fmt.Errorf("%w: the file has format version %d, this build reads up to %d; use a newer sharedmap", ErrVersion, h.version, FormatVersion)
	case h.version == 0:
		return h, fmt.Errorf("%w: format version 0", ErrCorrupt)
	}
	h.state = le.Uint32(page[hdrState:])
	switch h.state {
	case stateReady:
	case stateNone, stateInitializing:
		return h, fmt.Errorf("%w: state %#x: its creator did not finish initializing it", ErrNotReady, h.state)
	default:
		return h, fmt.Errorf("%w: unknown state %#x", ErrCorrupt, h.state)
	}
	if want, got := headerChecksum(page[:HeaderSize]), le.Uint64(page[hdrChecksum:]); want != got {
		return h, fmt.Errorf("%w: header checksum is %#016x, the header hashes to %#016x", ErrChecksum, got, want)
	}
	// The checksum matched, so what follows can only fail for a file built
	// by hand or by a buggy writer; still, no length is used unchecked.
	hs := le.Uint32(page[hdrHeaderSize:])
	h.fileSize = int64(le.Uint64(page[hdrFileSize:]))
	h.dataOffset = int64(le.Uint64(page[hdrDataOffset:]))
	h.created = int64(le.Uint64(page[hdrCreated:]))
	h.pid = le.Uint32(page[hdrPID:])
	n := le.Uint32(page[hdrLayoutLen:])
	switch {
	case hs != HeaderSize:
		return h, fmt.Errorf("%w: header size %d, want %d", ErrCorrupt, hs, HeaderSize)
	case h.dataOffset != HeaderSize:
		return h, fmt.Errorf("%w: data offset %d, want %d", ErrCorrupt, h.dataOffset, HeaderSize)
	case h.fileSize <= HeaderSize || h.fileSize > maxMapSize:
		return h, fmt.Errorf("%w: recorded file size %d is out of range (%d..%d)", ErrCorrupt, h.fileSize, HeaderSize+1, int64(maxMapSize))
	case n > MaxLayoutSize:
		return h, fmt.Errorf("%w: layout length %d exceeds %d", ErrCorrupt, n, MaxLayoutSize)
	}
	h.layout = bytes.Clone(page[hdrLayout : hdrLayout+n])
	return h, nil
}

func swap32(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}
