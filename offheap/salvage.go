package offheap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// Salvage says how OpenSalvage read a file.
type Salvage struct {
	// HeaderLost says why no copy of the header could be used (nil: the
	// header was read from a copy that verifies). The File's Layout is
	// then nil and its Size the file's length: the layers above must find
	// the layout from the data areas.
	HeaderLost error
	// Length is the file's length.
	Length int64
	// Missing is how many bytes the header records past the file's end:
	// the mapping reads them as zeros.
	Missing int64
	// Extra is how many bytes the file has past the most it may hold (the
	// size its header records, for a file that may not grow): left out of
	// the mapping.
	Extra int64
}

// OpenSalvage opens the map file at path read-only to get out what it
// holds when Open refuses it: a file whose header no copy of which
// verifies, or whose length is not the one its header records. It never
// writes the file and takes no lock.
//
// A header copy that verifies gives the layout and the size, as for Open;
// a file shorter than that size is mapped at it all the same, the missing
// end reading as zeros (private memory, not the file). growsTo, if not
// nil, says as OpenOptions.GrowsTo does how far a file of that layout may
// grow: the bytes from the recorded size up to that limit are mapped
// apart (File.Growth), the file's where it has them and zeros past its
// end, so that a file that grew is read whole, and one cut short in the
// middle of a growth step reads that step's missing end as zeros. Bytes
// past the limit (past the recorded size, for a file that may not grow)
// are left out. Without a copy that verifies, the whole file is mapped,
// File.Layout is nil, and Salvage().HeaderLost says why. A file that is
// not initialized, of a newer format or of the other byte order is
// refused as Open refuses it, and so is a file too short to hold anything
// after the header. Where Open refuses to run, OpenSalvage does too, with
// an error wrapping ErrUnsupported.
//
// Every byte of the File's mappings may be read, whatever its Length:
// past the file's end they read as zeros, never fault.
func OpenSalvage(path string, growsTo func(layout []byte) (limit, base, step int64)) (f *File, err error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "salvage", Err: err} }
	if err := checkPlatform(); err != nil {
		return fail(err)
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return fail(fmt.Errorf("%w: this host is big-endian; the format is little-endian", ErrEndianness))
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fail(notRegular(st.Mode()))
	}
	fd, err := os.Open(path)
	if err != nil {
		return fail(pathless(err))
	}
	defer func() {
		if f == nil {
			fd.Close()
		}
	}()
	st, err := fd.Stat()
	if err != nil {
		return fail(pathless(err))
	}
	if !st.Mode().IsRegular() {
		return fail(notRegular(st.Mode()))
	}
	if st.Size() <= HeaderSize {
		return fail(fmt.Errorf("%w: %d bytes, nothing past the %d-byte header to salvage", ErrTruncated, st.Size(), HeaderSize))
	}
	page := make([]byte, HeaderSize)
	if _, err := fd.ReadAt(page, 0); err != nil && !errors.Is(err, io.EOF) {
		return fail(pathless(err))
	}
	h, _, err := decodeHeader(page)
	s := Salvage{Length: st.Size()}
	limit := int64(0) // the most the file may hold, if more than its recorded size
	switch {
	case errors.Is(err, ErrNotReady), errors.Is(err, ErrVersion), errors.Is(err, ErrEndianness):
		return fail(err)
	case err != nil:
		s.HeaderLost = err
		h = header{fileSize: st.Size(), dataOffset: HeaderSize}
	default:
		limit = (&OpenOptions{GrowsTo: growsTo}).growsTo(h.layout, h.fileSize)
		switch {
		case st.Size() < h.fileSize:
			s.Missing = h.fileSize - st.Size()
		case st.Size() > limit:
			s.Extra = st.Size() - limit
		}
	}
	r, err := mapZeroFilled(fd, 0, h.fileSize, st.Size())
	if err != nil {
		return fail(err)
	}
	_ = r.advise(0, r.Len(), adviceRandom) // advisory
	file := newFile(r, fd, path, &h, &OpenOptions{ReadOnly: true}, false)
	if limit > h.fileSize {
		if file.Growth, err = mapZeroFilled(fd, h.fileSize, limit-h.fileSize, st.Size()); err != nil {
			_ = r.Unmap()
			return fail(err)
		}
		_ = file.Growth.advise(0, file.Growth.Len(), adviceRandom) // advisory
		file.length.Store(min(max(st.Size(), h.fileSize), limit))
	}
	file.salvage = s
	return file, nil
}

// Salvage says how OpenSalvage read the file; the zero Salvage for a File
// that Open opened.
func (f *File) Salvage() Salvage { return f.salvage }

// mapZeroFilled maps size bytes of fd from byte from on, read-only: the
// file's bytes where it has them (it is fileSize bytes long) and private
// zeros past them, so that a file cut short reads as zeros where it ends,
// where a mapping of the file alone would fault (SIGBUS). from must be a
// multiple of the page size.
func mapZeroFilled(fd *os.File, from, size, fileSize int64) (*Region, error) {
	if size <= 0 || size > maxMapSize {
		return nil, fmt.Errorf("size %d out of range (1..%d)", size, int64(maxMapSize))
	}
	if from == 0 && fileSize >= size {
		return mapFile(fd, size, false)
	}
	data, err := mapZeros(size)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	// The file's pages over the start; the page holding its last byte
	// reads zeros past it, as any mapping of a file does.
	page := int64(os.Getpagesize())
	if n := min((fileSize-from+page-1)/page*page, size); n > 0 {
		if err := mapFileOver(fd, from, unsafe.Pointer(&data[0]), uintptr(n), true); err != nil {
			_ = munmap(data)
			return nil, fmt.Errorf("mmap: %w", err)
		}
	}
	return &Region{data: mmap.MMap(data), readOnly: true}, nil
}
