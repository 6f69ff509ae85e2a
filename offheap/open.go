package offheap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// OpenOptions say how to open or create a file.
type OpenOptions struct {
	// Create makes the file if it is absent, empty, or was left
	// half-initialized by a creator that died.
	Create bool
	// ReadOnly maps the file PROT_READ: it is never written, never created.
	ReadOnly bool
	// Size is the whole size to reserve when creating, header included. The
	// file is sparse: only pages written take disk. Ignored when opening.
	Size int64
	// Layout is an opaque record stored in the header when creating (at most
	// MaxLayoutSize bytes); openers read it back with File.Layout.
	Layout []byte
	// Init, if set, runs in the creating process with the whole writable
	// mapping, after the header is written and before the file is marked
	// ready. Other openers wait until it returns.
	Init func(r *Region) error
	// InitTimeout bounds the wait for another process's creation. Default 10s.
	InitTimeout time.Duration
}

// File is an open map file: its mapping (embedded Region), header and
// descriptor.
type File struct {
	*Region
	f       *os.File
	path    string
	layout  []byte
	created bool
	size    int64
}

// Open opens path, creating it if allowed. When several processes create
// the same path at once, exactly one initializes it while the others wait
// (bounded by InitTimeout) and then open what it wrote. Creation holds an
// exclusive flock(2) on the file; a creator that dies releases it, and the
// next opener with Create starts the creation again.
func Open(path string, o OpenOptions) (*File, error) {
	fail := func(op string, err error) (*File, error) { return nil, &FileError{Path: path, Op: op, Err: err} }
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return fail("open", fmt.Errorf("%w: this host is big-endian; the format is little-endian", ErrEndianness))
	}
	if o.InitTimeout <= 0 {
		o.InitTimeout = 10 * time.Second
	}
	page := int64(os.Getpagesize())
	if o.Create {
		switch {
		case o.ReadOnly:
			return fail("open", fmt.Errorf("%w: Create and ReadOnly together", ErrBadOptions))
		case o.Size < HeaderSize+page || o.Size > maxMapSize:
			return fail("open", fmt.Errorf("%w: size %d must be in %d..%d", ErrBadOptions, o.Size, HeaderSize+page, int64(maxMapSize)))
		case len(o.Layout) > MaxLayoutSize:
			return fail("open", fmt.Errorf("%w: layout of %d bytes exceeds %d", ErrBadOptions, len(o.Layout), MaxLayoutSize))
		}
		o.Size = (o.Size + page - 1) / page * page
	}
	flags := os.O_RDWR
	if o.ReadOnly {
		flags = os.O_RDONLY
	} else if o.Create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	mf, err := openLocked(f, path, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	return mf, nil
}

// openLocked does the work of Open under the creation lock.
func openLocked(f *os.File, path string, o OpenOptions) (*File, error) {
	fail := func(op string, err error) (*File, error) { return nil, &FileError{Path: path, Op: op, Err: err} }
	how := unix.LOCK_EX
	if o.ReadOnly {
		how = unix.LOCK_SH // enough to wait out a creator
	}
	if err := flockTimeout(f, how, o.InitTimeout); err != nil {
		return fail("open", err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // closing the file drops it too

	st, err := f.Stat()
	if err != nil {
		return fail("open", err)
	}
	if st.Size() == 0 {
		if !o.Create {
			return fail("open", fmt.Errorf("%w: the file is empty", ErrNotReady))
		}
		return create(f, path, o)
	}
	pg := make([]byte, HeaderSize)
	n, err := f.ReadAt(pg, 0)
	if n < HeaderSize {
		if err != nil && !errors.Is(err, io.EOF) {
			return fail("open", err)
		}
		return fail("open", fmt.Errorf("%w: %d bytes, the header alone is %d", ErrTruncated, st.Size(), HeaderSize))
	}
	h, err := decodeHeader(pg)
	if err != nil {
		if o.Create && errors.Is(err, ErrNotSharedMap) && allZero(pg) {
			return create(f, path, o) // a creator died between sizing the file and writing the header
		}
		return fail("open", err)
	}
	if h.state != stateReady {
		if !o.Create || h.state != stateInit {
			return fail("open", fmt.Errorf("%w: state %d (created by pid %d, which is not finishing it)", ErrNotReady, h.state, h.pid))
		}
		// We hold the creation lock, so the creator is gone: start over.
		return create(f, path, o)
	}
	switch {
	case st.Size() < h.fileSize:
		return fail("open", fmt.Errorf("%w: %d bytes, the header says %d", ErrTruncated, st.Size(), h.fileSize))
	case st.Size() > h.fileSize:
		return fail("open", fmt.Errorf("%w: %d bytes, the header says %d", ErrSize, st.Size(), h.fileSize))
	}
	r, err := MapRegion(f, h.fileSize, !o.ReadOnly)
	if err != nil {
		return nil, err
	}
	return &File{Region: r, f: f, path: path, layout: h.layout, size: h.fileSize}, nil
}

// create initializes the file: size it (sparse), write the header as
// initializing, run Init, and flip the state to ready. Caller holds the
// exclusive creation lock.
func create(f *os.File, path string, o OpenOptions) (*File, error) {
	fail := func(err error) (*File, error) { return nil, &FileError{Path: path, Op: "create", Err: err} }
	// Drop whatever a dead creator left, then reserve the size as a hole.
	if err := f.Truncate(0); err != nil {
		return fail(err)
	}
	if err := f.Truncate(o.Size); err != nil {
		return fail(err)
	}
	r, err := MapRegion(f, o.Size, true)
	if err != nil {
		return nil, err
	}
	h := header{version: FormatVersion, state: stateInit, fileSize: o.Size, dataOffset: HeaderSize,
		created: time.Now().UnixNano(), pid: uint32(os.Getpid()), layout: append([]byte(nil), o.Layout...)}
	encodeHeader(r.Bytes(0, HeaderSize), &h)
	if o.Init != nil {
		if err := o.Init(r); err != nil {
			_ = r.Unmap()
			return fail(fmt.Errorf("initialize: %w", err))
		}
	}
	if err := r.data.Flush(); err != nil {
		_ = r.Unmap()
		return fail(fmt.Errorf("msync: %w", err))
	}
	atomic.StoreUint32(r.Uint32(hdrState), stateReady) // the commit point
	return &File{Region: r, f: f, path: path, layout: h.layout, size: o.Size, created: true}, nil
}

// flockTimeout takes a flock without blocking forever: the creator holds
// the lock only while it initializes, so a long wait means it hangs.
func flockTimeout(f *os.File, how int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	nap := 100 * time.Microsecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("flock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%v)", ErrInitTimeout, timeout)
		}
		time.Sleep(nap)
		if nap < 20*time.Millisecond {
			nap *= 2
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Layout returns a copy of the layout record stored in the header.
func (f *File) Layout() []byte { return append([]byte(nil), f.layout...) }

// DataOffset is the first byte after the header.
func (f *File) DataOffset() int64 { return HeaderSize }

// Size is the whole size of the file and of the mapping.
func (f *File) Size() int64 { return f.size }

// Path is the path the file was opened with.
func (f *File) Path() string { return f.path }

// Created reports whether this Open created (initialized) the file.
func (f *File) Created() bool { return f.created }

// Fd is the file descriptor, for byte-range locks on the file.
func (f *File) Fd() uintptr { return f.f.Fd() }

// Allocate reserves disk blocks for [off, off+n) (fallocate(2)), so that a
// full disk is reported now instead of as a SIGBUS when the pages are first
// written. Filesystems without fallocate are accepted as they are.
func (f *File) Allocate(off, n int64) error {
	if f.ReadOnly() {
		return nil
	}
	if !f.inBounds(off, n) {
		return &FileError{Path: f.path, Op: "allocate", Err: &RangeError{Off: off, Len: n, Size: f.size}}
	}
	err := unix.Fallocate(int(f.f.Fd()), 0, off, n)
	switch {
	case err == nil, errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
		return nil
	case errors.Is(err, unix.ENOSPC):
		return &FileError{Path: f.path, Op: "allocate", Err: fmt.Errorf("%w: %d bytes at %d", ErrNoSpace, n, off)}
	}
	return &FileError{Path: f.path, Op: "allocate", Err: err}
}

// Sync writes the mapping's dirty pages to the file (msync).
func (f *File) Sync() error {
	if f.Region == nil || f.data == nil {
		return nil
	}
	if err := f.data.Flush(); err != nil {
		return &FileError{Path: f.path, Op: "sync", Err: err}
	}
	return nil
}

// Close unmaps the file and closes it. It is idempotent.
func (f *File) Close() error {
	if f.f == nil {
		return nil
	}
	err := f.Unmap()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	f.f = nil
	return err
}
