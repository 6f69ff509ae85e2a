package offheap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// header is the decoded header (see layout.go for the byte map).
type header struct {
	version    uint32
	state      uint32
	fileSize   int64
	dataOffset int64
	created    int64 // Unix nanoseconds
	pid        uint32
	layout     []byte
}

// same reports whether h and o say the same thing, the state aside.
func (h *header) same(o *header) bool {
	return h.version == o.version && h.fileSize == o.fileSize && h.dataOffset == o.dataOffset &&
		h.created == o.created && h.pid == o.pid && bytes.Equal(h.layout, o.layout)
}

// encodeHeader writes h over page, which must be HeaderSize bytes: both
// copies, each with its checksum computed last and its padding zero. The
// state is stored with a plain write: callers either hold the creation
// flock or write into a private buffer.
func encodeHeader(page []byte, h *header) {
	if len(page) != HeaderSize {
		panic(fmt.Sprintf("sharedmap: assertion failed: encoding a %d-byte header page", len(page)))
	}
	encodeCopy(page[copyA:copyA+headerCopySize], h)
	encodeCopy(page[copyB:copyB+headerCopySize], h)
}

// encodeCopy writes h over c, one copy's headerCopySize bytes.
func encodeCopy(c []byte, h *header) {
	if len(c) != headerCopySize || len(h.layout) > MaxLayoutSize || h.version != FormatVersion {
		panic(fmt.Sprintf("sharedmap: assertion failed: encoding a version %d header copy of %d bytes with a %d-byte layout", h.version, len(c), len(h.layout)))
	}
	le := binary.LittleEndian
	clear(c)
	copy(c[hdrMagic:], magic)
	le.PutUint32(c[hdrVersion:], h.version)
	binary.NativeEndian.PutUint32(c[hdrEndian:], endianMark)
	le.PutUint32(c[hdrState:], h.state)
	le.PutUint32(c[hdrHeaderSize:], HeaderSize)
	le.PutUint64(c[hdrFileSize:], uint64(h.fileSize))
	le.PutUint64(c[hdrDataOffset:], uint64(h.dataOffset))
	le.PutUint64(c[hdrCreated:], uint64(h.created))
	le.PutUint32(c[hdrPID:], h.pid)
	le.PutUint32(c[hdrLayoutLen:], uint32(len(h.layout)))
	copy(c[hdrLayout:], h.layout)
	le.PutUint64(c[hdrChecksum:], copyChecksum(c, len(h.layout)))
}

// copyChecksum hashes what one copy of a version-2 header says: its fixed
// fields, with the state and checksum read as zero (the state changes after
// the checksum is written, and the checksum cannot cover itself), then the
// n bytes of the layout record in use. Padding is left out: nothing reads
// it, so a flipped bit there must not cost the copy.
func copyChecksum(c []byte, n int) uint64 {
	var zero [8]byte
	d := xxhash.New()
	_, _ = d.Write(c[:hdrState])
	_, _ = d.Write(zero[:4])
	_, _ = d.Write(c[hdrState+4 : hdrChecksum])
	_, _ = d.Write(zero[:8])
	_, _ = d.Write(c[hdrLayout : hdrLayout+n])
	return d.Sum64()
}

// headerChecksumV1 hashes a whole version-1 header page with the state and
// checksum fields read as zero: version 1 covered every byte, padding
// included.
func headerChecksumV1(page []byte) uint64 {
	var zero [8]byte
	d := xxhash.New()
	_, _ = d.Write(page[:hdrState])
	_, _ = d.Write(zero[:4])
	_, _ = d.Write(page[hdrState+4 : hdrChecksum])
	_, _ = d.Write(zero[:8])
	_, _ = d.Write(page[hdrChecksum+8 : HeaderSize])
	return d.Sum64()
}

// copyKind is what decoding one copy of the header found.
type copyKind uint8

const (
	copySound    copyKind = iota // verifies and says ready
	copyNotReady                 // says none or initializing: its creator has not finished
	copyDamaged                  // fails a check: damage, or a copy being rewritten
	copyRefused                  // a newer format or the other byte order: not ours to judge
)

// copyResult is one decoded copy.
type copyResult struct {
	h    header
	kind copyKind
	err  error // nil for copySound
}

// faultKind says what is wrong with a copy of a header that Open could use
// all the same.
type faultKind uint8

const (
	faultDamaged   faultKind = iota + 1 // the copy does not verify: a writable Open rewrites it
	faultLagging                        // the copy says initializing while the other says ready: creation stopped between the two
	faultPadding                        // the copy verifies, but bytes no field uses are not zero
	faultUpgrading                      // copy B of a version-1 page being upgraded was cut short (see decodeV1Upgrading)
)

// headerFault is something wrong in the header page that did not stop the
// file from opening.
type headerFault struct {
	copy int // 0 for copy A, 1 for copy B
	kind faultKind
	err  error
}

func (f headerFault) Error() string {
	return fmt.Sprintf("file header copy %c (bytes %d..%d): %v", 'A'+f.copy, f.copy*headerCopySize, (f.copy+1)*headerCopySize-1, f.err)
}

// decodeHeader parses and checks a header page, which may be shorter than
// HeaderSize (a truncated file) or anything at all (a foreign file). It
// never panics and never trusts a length before checking it.
//
// A version-2 page holds two copies of the header. Each is checked on its
// own, and the header is taken from one that verifies and says ready; what
// is wrong with the other, or with the padding of the one taken, comes
// back as faults. Both copies are written at creation and never change
// afterwards but for the state word, which creation flips to ready in A,
// then in B: a copy that still says initializing beside a ready one is a
// creation cut short between the two flips, and the file is ready.
//
// A version-1 page holds one header, checked as version 1 did: a checksum
// over the whole page; or, when that fails and copy B does not verify,
// with the page's second half read as zero (decodeV1Upgrading).
//
// A header whose state is not ready in every copy is returned with an
// ErrNotReady error and only magic, version and state filled in: it was
// being written when its creator died, so nothing else in it can be
// trusted, and Open decides whether to re-initialize it. A page in which
// one copy is not ready and the other damaged is not returned as
// ErrNotReady: it may be a ready file with both copies damaged, and Create
// must not wipe it.
func decodeHeader(page []byte) (header, []headerFault, error) {
	var h header
	if n := min(len(page), len(magic)); !bytes.Equal(page[:n], []byte(magic)[:n]) &&
		!(len(page) >= HeaderSize && string(page[copyB:copyB+len(magic)]) == magic) {
		return h, nil, fmt.Errorf("%w: the first bytes are %q, not %q", ErrNotSharedMap, page[:n], magic)
	}
	if len(page) < HeaderSize {
		return h, nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, len(page), HeaderSize)
	}
	page = page[:HeaderSize]
	var v1 *copyResult
	if string(page[:len(magic)]) == magic && binary.LittleEndian.Uint32(page[hdrVersion:]) == 1 {
		r := decodeV1(page)
		if r.kind != copyDamaged {
			return r.h, nil, r.err
		}
		v1 = &r // or a version-2 copy A damaged to read 1: copy B decides
	}
	a, b := decodeCopy(page[copyA:copyA+headerCopySize]), decodeCopy(page[copyB:copyB+headerCopySize])
	if v1 != nil {
		if b.kind != copySound {
			if r := decodeV1Upgrading(page); r.kind == copySound {
				return r.h, []headerFault{{copy: 1, kind: faultUpgrading, err: errors.New(
					"an upgrade to format version 2 stopped while writing this copy; the version-1 header opens the file: upgrade it again to finish")}}, nil
			}
			return v1.h, nil, v1.err
		}
		a = *v1
	}
	var faults []headerFault
	switch {
	case a.kind == copySound && b.kind == copySound:
		if !a.h.same(&b.h) {
			return h, nil, fmt.Errorf("%w: the two copies of the header both verify but differ (copy A records a %d-byte file created %d by pid %d, copy B a %d-byte file created %d by pid %d)",
				ErrCorrupt, a.h.fileSize, a.h.created, a.h.pid, b.h.fileSize, b.h.created, b.h.pid)
		}
		faults = appendPadding(faults, page, 0, &a.h)
		faults = appendPadding(faults, page, 1, &b.h)
		return a.h, faults, nil
	case a.kind == copySound || b.kind == copySound:
		good, bad, badIndex := a, b, 1
		if b.kind == copySound {
			good, bad, badIndex = b, a, 0
		}
		f := headerFault{copy: badIndex, kind: faultDamaged, err: bad.err}
		if bad.kind == copyNotReady {
			f.kind = faultLagging
			f.err = fmt.Errorf("says initializing, the other copy ready: its creator stopped between marking the two ready")
		}
		faults = append(faults, f)
		faults = appendPadding(faults, page, 1-badIndex, &good.h)
		return good.h, faults, nil
	case a.kind == copyRefused:
		return a.h, nil, a.err
	case b.kind == copyRefused:
		return b.h, nil, b.err
	case a.kind == copyNotReady && unfinished(b, page[copyB:]):
		return a.h, nil, a.err
	case b.kind == copyNotReady && unfinished(a, page[copyA:]):
		return b.h, nil, b.err
	}
	// Neither copy's error is wrapped: one may be ErrNotReady, which must
	// not lead Create to wipe the file.
	sentinel := ErrCorrupt
	if errors.Is(a.err, ErrChecksum) || errors.Is(b.err, ErrChecksum) {
		sentinel = ErrChecksum
	}
	return h, nil, fmt.Errorf("%w: no copy of the header is sound (copy A: %v; copy B: %v)", sentinel, a.err, b.err)
}

// unfinished reports whether r, decoded from the copy at c, is one a
// creator had not finished: it says so, or it is damaged (a write of the
// page torn by a power cut) and its state word still reads none or
// initializing. A ready copy's state word is 16 bits or more from either,
// so damage does not make a ready file look unfinished.
func unfinished(r copyResult, c []byte) bool {
	if r.kind == copyNotReady {
		return true
	}
	s := binary.LittleEndian.Uint32(c[hdrState:])
	return r.kind == copyDamaged && (s == stateNone || s == stateInitializing)
}

// decodeCopy checks one copy of a version-2 header, c being its
// headerCopySize bytes. The checks run in the order in which each one
// makes the next meaningful: magic (is it ours?), byte order, version (a
// newer format may redefine everything after it), state, checksum, then
// the fields.
func decodeCopy(c []byte) copyResult {
	le := binary.LittleEndian
	damaged := func(err error) copyResult { return copyResult{kind: copyDamaged, err: err} }
	if string(c[:len(magic)]) != magic {
		return damaged(fmt.Errorf("%w: magic %q, not %q", ErrCorrupt, c[:len(magic)], magic))
	}
	if m := le.Uint32(c[hdrEndian:]); m != endianMark {
		if m == swap32(endianMark) {
			return copyResult{kind: copyRefused, err: fmt.Errorf("%w: written on a big-endian machine; this format is little-endian", ErrEndianness)}
		}
		return damaged(fmt.Errorf("%w: byte-order marker %#08x, want %#08x", ErrEndianness, m, endianMark))
	}
	var h header
	h.version = le.Uint32(c[hdrVersion:])
	switch {
	case h.version > FormatVersion:
		return copyResult{h: h, kind: copyRefused, err: fmt.Errorf("%w: the file has format version %d, this build reads up to %d; use a newer sharedmap", ErrVersion, h.version, FormatVersion)}
	case h.version != FormatVersion:
		return damaged(fmt.Errorf("%w: format version %d in a version-%d copy", ErrCorrupt, h.version, FormatVersion))
	}
	h.state = le.Uint32(c[hdrState:])
	switch h.state {
	case stateReady:
	case stateNone, stateInitializing:
		return copyResult{h: h, kind: copyNotReady, err: fmt.Errorf("%w: state %#x: its creator did not finish initializing it", ErrNotReady, h.state)}
	default:
		return damaged(fmt.Errorf("%w: unknown state %#x", ErrCorrupt, h.state))
	}
	n := le.Uint32(c[hdrLayoutLen:])
	if n > MaxLayoutSize {
		return damaged(fmt.Errorf("%w: layout length %d exceeds %d", ErrCorrupt, n, MaxLayoutSize))
	}
	if want, got := copyChecksum(c, int(n)), le.Uint64(c[hdrChecksum:]); want != got {
		return damaged(fmt.Errorf("%w: checksum is %#016x, the copy hashes to %#016x", ErrChecksum, got, want))
	}
	if err := h.fields(c, n); err != nil {
		return damaged(err)
	}
	return copyResult{h: h, kind: copySound}
}

// decodeV1 checks a version-1 header page (one copy, the checksum over
// the whole page). Its kinds are those of a copy: a damaged page is
// copyDamaged.
func decodeV1(page []byte) copyResult {
	le := binary.LittleEndian
	damaged := func(err error) copyResult { return copyResult{kind: copyDamaged, err: err} }
	if m := le.Uint32(page[hdrEndian:]); m != endianMark {
		if m == swap32(endianMark) {
			return copyResult{kind: copyRefused, err: fmt.Errorf("%w: written on a big-endian machine; this format is little-endian", ErrEndianness)}
		}
		return copyResult{kind: copyRefused, err: fmt.Errorf("%w: byte-order marker %#08x, want %#08x", ErrEndianness, m, endianMark)}
	}
	h := header{version: 1, state: le.Uint32(page[hdrState:])}
	switch h.state {
	case stateReady:
	case stateNone, stateInitializing:
		return copyResult{h: h, kind: copyNotReady, err: fmt.Errorf("%w: state %#x: its creator did not finish initializing it", ErrNotReady, h.state)}
	default:
		return damaged(fmt.Errorf("%w: unknown state %#x", ErrCorrupt, h.state))
	}
	if want, got := headerChecksumV1(page), le.Uint64(page[hdrChecksum:]); want != got {
		return damaged(fmt.Errorf("%w: header checksum is %#016x, the header hashes to %#016x", ErrChecksum, got, want))
	}
	// The checksum matched, so what follows can only fail for a file built
	// by hand or by a buggy writer; still, no length is used unchecked.
	n := le.Uint32(page[hdrLayoutLen:])
	if n > maxLayoutSizeV1 {
		return damaged(fmt.Errorf("%w: layout length %d exceeds %d", ErrCorrupt, n, maxLayoutSizeV1))
	}
	if err := h.fields(page, n); err != nil {
		return damaged(err)
	}
	return copyResult{h: h, kind: copySound}
}

// decodeV1Upgrading checks a version-1 page whose second half, where the
// upgrade writes copy B first (see Upgrade), may hold part of a copy: it
// is decoded as version 1 with bytes 2048..4095 read as zero, which they
// were before the upgrade began (Upgrade refuses a page where they are
// not, and a layout record that reaches them). So an upgrade cut short
// while writing copy B leaves a file that opens as the version 1 it was.
func decodeV1Upgrading(page []byte) copyResult {
	p := bytes.Clone(page[:HeaderSize])
	clear(p[copyB:])
	r := decodeV1(p)
	if r.kind == copySound && hdrLayout+len(r.h.layout) > copyB {
		return copyResult{kind: copyDamaged, err: fmt.Errorf("%w: a version-1 layout record reaching the second half of the page", ErrCorrupt)}
	}
	return r
}

// fields fills in h's fields after magic, version and state from c, a
// copy (or a version-1 page) whose checksum matched and whose layout
// length n fits it, and checks them.
func (h *header) fields(c []byte, n uint32) error {
	le := binary.LittleEndian
	hs := le.Uint32(c[hdrHeaderSize:])
	h.fileSize = int64(le.Uint64(c[hdrFileSize:]))
	h.dataOffset = int64(le.Uint64(c[hdrDataOffset:]))
	h.created = int64(le.Uint64(c[hdrCreated:]))
	h.pid = le.Uint32(c[hdrPID:])
	switch {
	case hs != HeaderSize:
		return fmt.Errorf("%w: header size %d, want %d", ErrCorrupt, hs, HeaderSize)
	case h.dataOffset != HeaderSize:
		return fmt.Errorf("%w: data offset %d, want %d", ErrCorrupt, h.dataOffset, HeaderSize)
	case h.fileSize <= HeaderSize || h.fileSize > maxMapSize:
		return fmt.Errorf("%w: recorded file size %d is out of range (%d..%d)", ErrCorrupt, h.fileSize, HeaderSize+1, int64(maxMapSize))
	}
	h.layout = bytes.Clone(c[hdrLayout : hdrLayout+n])
	return nil
}

// appendPadding adds a fault if copy i of page, which verified as h, has
// bytes that are not zero where no field is.
func appendPadding(faults []headerFault, page []byte, i int, h *header) []headerFault {
	c := page[i*headerCopySize : (i+1)*headerCopySize]
	n := 0
	for _, p := range [][]byte{c[hdrReserved:hdrLayout], c[hdrLayout+len(h.layout):]} {
		for _, x := range p {
			if x != 0 {
				n++
			}
		}
	}
	if n == 0 {
		return faults
	}
	return append(faults, headerFault{copy: i, kind: faultPadding,
		err: fmt.Errorf("%d bytes of padding are not zero (ignored: no field is there; Repair zeroes them)", n)})
}

func swap32(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}

// mends reports whether faults name a copy that a writable Open rewrites:
// one damaged, or left initializing.
func mends(faults []headerFault) bool {
	for _, f := range faults {
		if f.kind == faultDamaged || f.kind == faultLagging {
			return true
		}
	}
	return false
}

// mendCopies rewrites in r, mapped writable, each copy of the header that
// faults name damaged or lagging, from h (decoded from the sound copy),
// then syncs the page, and says what it rewrote. It never writes the
// sound copy, so a crash at any point still leaves that copy to open the
// file with; two processes mending at once write the same bytes.
func mendCopies(r *Region, h *header, faults []headerFault) ([]string, error) {
	var done []string
	for _, f := range faults {
		if f.kind != faultDamaged && f.kind != faultLagging {
			continue
		}
		writeCopy(r, f.copy, h)
		done = append(done, fmt.Sprintf("file header copy %c rewritten from copy %c (%v)", 'A'+f.copy, 'B'-f.copy, f.err))
	}
	if len(done) == 0 {
		return nil, nil
	}
	if err := r.syncRange(0, HeaderSize); err != nil {
		return nil, err
	}
	return done, nil
}

// writeCopy writes copy i of the header in r from h, said ready, with the
// state word stored last: until then a copy that was damaged stays
// damaged, or one left initializing stays so, never half of each.
func writeCopy(r *Region, i int, h *header) {
	hh := *h
	hh.state = stateReady
	want := make([]byte, headerCopySize)
	encodeCopy(want, &hh)
	off := int64(i * headerCopySize)
	c := r.Bytes(off, headerCopySize)
	copy(c[:hdrState], want[:hdrState])
	copy(c[hdrState+4:], want[hdrState+4:])
	atomic.StoreUint32(r.Uint32(off+hdrState), stateReady)
}

// HeaderProblems lists what is wrong with the header page as it is now,
// in a file that opened: a copy that does not verify (a read-only Open
// cannot rewrite it), one left initializing beside a ready one, or
// padding that is not zero. None of them stops the file from opening;
// RepairHeader mends them all. A version-1 header has one copy and no
// padding to check; its one fault is an upgrade stopped while writing
// copy B, which Upgrade, not RepairHeader, finishes.
func (f *File) HeaderProblems() []error {
	if f.Region == nil || f.data == nil {
		return nil
	}
	h, faults, err := decodeHeader(f.Bytes(0, HeaderSize))
	if err != nil {
		return []error{fmt.Errorf("file header: %w", err)}
	}
	if !h.same(&f.hdr) {
		return []error{fmt.Errorf("%w: the file header no longer says what it said when the file was opened", ErrCorrupt)}
	}
	errs := make([]error, len(faults))
	for i, fl := range faults {
		errs[i] = fl
	}
	return errs
}

// RepairHeader puts the header page right and says what it changed: it
// rewrites each copy that does not verify, or says initializing, from the
// header this File opened with (which verified, and which nothing changes
// after creation), and zeroes padding that is not zero. It writes one
// copy at a time, syncing the page after each, and in a copy that
// verifies it writes only padding, so that at every moment a copy that
// verifies is on the disk if there was one. It does nothing to a
// version-1 header.
func (f *File) RepairHeader() ([]string, error) {
	fail := func(err error) ([]string, error) { return nil, &fileError{Path: f.path, Op: "repair header", Err: err} }
	switch {
	case f.Region == nil || f.data == nil:
		return fail(os.ErrClosed)
	case f.ReadOnly():
		return fail(errReadOnly)
	case f.hdr.version != FormatVersion:
		return nil, nil
	}
	var done []string
	for i := range 2 {
		off := int64(i * headerCopySize)
		c := f.Bytes(off, headerCopySize)
		r := decodeCopy(c)
		switch {
		case r.kind == copySound && !r.h.same(&f.hdr):
			// Not ours to choose between two headers that verify.
			return done, &fileError{Path: f.path, Op: "repair header", Err: fmt.Errorf(
				"%w: copy %c verifies but says something else than the header the file was opened with; left as it is", ErrCorrupt, 'A'+i)}
		case r.kind == copySound:
			n := zeroPadding(c, len(f.hdr.layout))
			if n == 0 {
				continue
			}
			done = append(done, fmt.Sprintf("file header copy %c: %d bytes of padding zeroed", 'A'+i, n))
		default:
			writeCopy(f.Region, i, &f.hdr)
			done = append(done, fmt.Sprintf("file header copy %c rewritten (%v)", 'A'+i, r.err))
		}
		if err := f.syncRange(0, HeaderSize); err != nil {
			return done, &fileError{Path: f.path, Op: "repair header", Err: err}
		}
	}
	return done, nil
}

// zeroPadding zeroes the bytes of copy c, whose layout record is n bytes,
// that no field uses, and returns how many were not zero. Only those are
// written: the copy's fields and checksum are not touched.
func zeroPadding(c []byte, n int) int {
	count := 0
	for _, p := range [][]byte{c[hdrReserved:hdrLayout], c[hdrLayout+n:]} {
		for i := range p {
			if p[i] != 0 {
				p[i] = 0
				count++
			}
		}
	}
	return count
}
