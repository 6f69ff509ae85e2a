package offheap

import (
	"bytes"
	"os"
	"sync"
	"time"
)

// File is an open map file: the whole file mapped once (the embedded
// Region, so f.Uint64(off) and friends work), its decoded header, and the
// descriptor, kept for fallocate and for byte-range locks.
//
// A File's methods are safe for concurrent use, except Close and Retire:
// Close must not run while anything else uses the File or memory obtained
// from it; Retire may run while lock-free readers still read that memory,
// but not while anything writes the file through it.
type File struct {
	*Region
	fd      *os.File
	path    string
	hdr     header
	created bool
	mended  []string // header copies Open rewrote (see HeaderMended)
	salvage Salvage  // how OpenSalvage read the file

	lockMu   sync.Mutex
	lockFile *os.File // the companion lock file, once LockFile opened it
}

// hugePageSize is the size of a PMD-mapped page on the platforms this
// package runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePageSize = 2 << 20

// newFile wraps a mapping whose header has been validated or just written.
func newFile(r *Region, fd *os.File, path string, h *header, o *OpenOptions, created bool) *File {
	return &File{Region: r, fd: fd, path: path, hdr: *h, created: created}
}

// adviseMapping passes the hints every map file gets. Random access: hash
// lookups jump around, and the kernel's default readahead would only fill
// the page cache with neighbours nobody asked for. Huge pages, unless
// opts.NoHugePages. Both cover the whole mapping, header included: a hint
// on part of it would split the mapping in two, and the 2 MiB around the
// seam could then not be mapped whole.
func adviseMapping(r *Region, opts *OpenOptions) {
	_ = r.advise(0, r.Len(), adviceRandom) // advisory
	if !opts.NoHugePages {
		_ = r.advise(0, r.Len(), adviceHugePage) // advisory
	}
}

// Layout returns a copy of the layout record stored in the header by the
// file's creator.
func (f *File) Layout() []byte { return bytes.Clone(f.hdr.layout) }

// DataOffset is the first byte after the header: the start of the area the
// layers above lay out.
func (f *File) DataOffset() int64 { return f.hdr.dataOffset }

// Size is the size of the file and of its mapping. It never changes.
func (f *File) Size() int64 { return f.hdr.fileSize }

// DataAt says where, at or after off, the file's next data begins
// (start) and where that data ends (end): the bytes from off to start are a
// hole, which reads as zeros (lseek SEEK_DATA and SEEK_HOLE). A file with
// no data from off on gives start = end = Size. A filesystem may report a
// hole as data, never data as a hole; ok is false where the platform or
// the filesystem cannot tell, and then every byte may be data. Pages
// written through the mapping count as data. A read through the mapping
// of a page in a hole gives it a page of the page cache (of zeros), which
// DataAt lets a reader of scattered words skip.
func (f *File) DataAt(off int64) (start, end int64, ok bool) {
	if f.fd == nil {
		return 0, 0, false
	}
	start, none, err := seekData(f.fd, off)
	switch {
	case none:
		return f.Size(), f.Size(), true
	case err != nil:
		return 0, 0, false
	}
	end, err = seekHole(f.fd, start)
	if err != nil {
		return 0, 0, false
	}
	return start, end, true
}

// Path is the path the file was opened with.
func (f *File) Path() string { return f.path }

// HeaderMended says what Open rewrote of the header page: a copy that did
// not verify, or that creation left initializing, rewritten from the
// other. Only a writable Open mends; nil if nothing was.
func (f *File) HeaderMended() []string { return f.mended }

// formatVersion is the header format of the file: FormatVersion, or 1
// for a file made by a build before the header had two copies.
func (f *File) formatVersion() int { return int(f.hdr.version) }

// Created reports whether this Open created (initialized) the file. Exactly
// one Open per creation reports true, even when several processes race.
func (f *File) Created() bool { return f.created }

// creatorPID is the pid of the process that created the file, as recorded
// in the header. It is for diagnostics: the process may be gone and the
// pid reused.
func (f *File) creatorPID() int { return int(f.hdr.pid) }

// createdAt is the creation time recorded in the header; together with
// creatorPID it tells two creations of one path apart.
func (f *File) createdAt() time.Time { return time.Unix(0, f.hdr.created) }

// Fd is the file descriptor, for byte-range locks (F_OFD_SETLK) on the
// file. It stays valid until Close.
func (f *File) Fd() uintptr { return f.fd.Fd() }

// Allocate reserves disk blocks for [off, off+n) with fallocate(2), so a
// full disk is reported now, as an error wrapping ErrNoSpace, instead of
// killing a process with SIGBUS when it first writes one of those pages.
// On a filesystem without fallocate it does nothing and returns nil: the
// file stays sparse there, as before.
//
// The range is widened to whole 2 MiB pages: where any process maps the
// file with huge pages (the default; see OpenOptions.NoHugePages) the
// page cache may hold it in 2 MiB folios, and the first write into one
// needs blocks for all of it, so a reserved page beside unreserved holes
// would still fault with SIGBUS on a full disk. That holds whatever this
// process asked for: the folios are the file's, made by whichever process
// first touched the range, so a map created with NoHugePages and opened by
// a process with the default would otherwise fault on its first Put on a
// full disk.
func (f *File) Allocate(off, n int64) error {
	fail := func(err error) error { return &fileError{Path: f.path, Op: "allocate", Err: err} }
	switch {
	case f.ReadOnly():
		return fail(errReadOnly)
	case !f.inBounds(off, n):
		return fail(&rangeError{Off: off, Len: n, Size: f.Len()})
	case n == 0:
		return nil // fallocate rejects an empty range with EINVAL
	}
	if err := reserve(f.fd, off, n, f.Len()); err != nil {
		return fail(err)
	}
	return nil
}

// reserve allocates the disk blocks of n bytes at off of a file of size
// bytes, widened to whole huge pages (see Allocate).
func reserve(fd *os.File, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return &rangeError{Off: off, Len: n, Size: size}
	}
	end := min((off+n+hugePageSize-1)&^(hugePageSize-1), size)
	off &^= hugePageSize - 1
	return fallocate(fd, off, end-off)
}

// Sync writes every modified page of the file, whoever modified it, to
// the disk and waits (msync MS_SYNC; on a read-only mapping, fdatasync,
// since the kernel makes a shared mapping of a read-only descriptor
// private and msync there reaches no file). Other processes see writes
// without it; it is for durability across a machine crash.
func (f *File) Sync() error {
	if f.Region == nil || f.data == nil {
		return &fileError{Path: f.path, Op: "sync", Err: os.ErrClosed}
	}
	if f.ReadOnly() {
		if err := fdatasync(f.fd); err != nil {
			return &fileError{Path: f.path, Op: "sync", Err: err}
		}
		return nil
	}
	if err := f.syncRange(0, f.Len()); err != nil {
		return &fileError{Path: f.path, Op: "sync", Err: err}
	}
	return nil
}

// Retire is Close for a file that lock-free readers may still be reading:
// instead of unmapping the file, it maps private zero-filled memory over
// it in one step (MAP_FIXED), so that a slice or word obtained from the
// file reads zeros from then on, and writes to it reach nothing, instead
// of faulting. Those addresses stay reserved for the life of the process,
// using memory only for pages written to afterwards. Should the kernel
// refuse, the file stays mapped until the process ends (as safe for
// late readers, but it keeps the file's disk space should it be deleted),
// and the error says so. Calling Close or Retire again does nothing.
func (f *File) Retire() error {
	return f.closeWith(func() error { return f.Region.retire(f.fd) })
}

// Close unmaps the file and closes its descriptor. It does not sync: the
// pages stay in the page cache and reach the file as the kernel writes
// them back. Calling Close again does nothing and returns nil.
func (f *File) Close() error { return f.closeWith(f.Unmap) }

// closeWith lets the mapping go by letGo, then closes the descriptor,
// once.
func (f *File) closeWith(letGo func() error) error {
	if f.fd == nil {
		return nil
	}
	err := letGo()
	if cerr := f.fd.Close(); err == nil {
		err = cerr
	}
	f.lockMu.Lock()
	if f.lockFile != nil {
		f.lockFile.Close() // drops this process's locks on it
		f.lockFile = nil
	}
	f.fd = nil
	f.lockMu.Unlock()
	if err != nil {
		return &fileError{Path: f.path, Op: "close", Err: err}
	}
	return nil
}
