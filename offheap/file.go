package offheap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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
	// Growth maps the bytes a file that may grow (OpenOptions.GrowsTo)
	// grows into: from Size to the most it may hold, at addresses of its
	// own. Nil for a file that does not grow. Only the bytes below Length
	// may be touched.
	Growth  *Region
	fd      *os.File
	path    string
	hdr     header
	created bool
	mended  []string     // header copies Open rewrote (see HeaderMended)
	salvage Salvage      // how OpenSalvage read the file
	length  atomic.Int64 // the file's length as this process last saw it: at least Size, at most Len

	growMu sync.Mutex // serializes this process's Grow calls

	lockMu   sync.Mutex
	lockFile *os.File // the companion lock file, once LockFile opened it
}

// hugePageSize is the size of a PMD-mapped page on the platforms this
// package runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePageSize = 2 << 20

// newFile wraps a mapping whose header has been validated or just written.
func newFile(r *Region, fd *os.File, path string, h *header, o *OpenOptions, created bool) *File {
	f := &File{Region: r, fd: fd, path: path, hdr: *h, created: created}
	f.length.Store(min(h.fileSize, r.Len()))
	return f
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

// Size is the size the file was created with, as its header records it.
// A file that may grow (OpenOptions.GrowsTo) is at least that long and
// at most Len; Length says how long it was last seen.
func (f *File) Size() int64 { return f.hdr.fileSize }

// mapGrowth maps, for a file that may grow to limit bytes, the bytes past
// Size (Growth).
func (f *File) mapGrowth(limit int64, o *OpenOptions) error {
	if limit <= f.hdr.fileSize {
		return nil
	}
	g, err := mapGrowth(f.fd, f.hdr.fileSize, limit, !o.ReadOnly)
	if err != nil {
		return err
	}
	adviseMapping(g, o)
	f.Growth = g
	return nil
}

// maxLength is the most bytes the file may hold: Size, or more for a file
// that may grow.
func (f *File) maxLength() int64 {
	if f.Growth == nil {
		return f.Len()
	}
	return f.Len() + f.Growth.Len()
}

// Length is the file's length as this process last saw it (at Open, Grow
// or Refresh): every byte below it is the file's and may be touched. It
// only grows.
func (f *File) Length() int64 { return f.length.Load() }

// Refresh reads the file's length again (fstat), for a process that
// meets an offset past Length that another process may have grown the
// file over, and returns the new Length. A file shortened under its
// mappers (which only damage does) leaves Length as it was.
func (f *File) Refresh() (int64, error) {
	st, err := f.fd.Stat()
	if err != nil {
		return f.Length(), &fileError{Path: f.path, Op: "stat", Err: err}
	}
	return f.raiseLength(st.Size()), nil
}

// raiseLength raises Length to n, bounded by the mapping, and returns it.
func (f *File) raiseLength(n int64) int64 {
	n = min(n, f.maxLength())
	for {
		cur := f.length.Load()
		if n <= cur || f.length.CompareAndSwap(cur, n) {
			return max(n, cur)
		}
	}
}

// errGrowLimit reports a Grow past the size the file may grow to
// (maxLength).
var errGrowLimit = errors.New("the file may not grow that far")

// Grow lengthens the file to n bytes (ftruncate), unless it is already
// that long, so that every process mapping it may touch the pages up to
// n. The new bytes are a hole, reading as zeros; Allocate reserves their
// disk blocks. Growing is one system call: a process killed around it
// leaves the file at its old length or its new one, both of which open.
// Callers serialize growth between processes themselves (a lock in the
// file); Grow never shortens the file.
func (f *File) Grow(n int64) error {
	fail := func(err error) error { return &fileError{Path: f.path, Op: "grow", Err: err} }
	switch {
	case f.ReadOnly():
		return fail(errReadOnly)
	case n > f.maxLength():
		return fail(fmt.Errorf("%w: %d bytes asked, %d at most", errGrowLimit, n, f.maxLength()))
	}
	f.growMu.Lock()
	defer f.growMu.Unlock()
	cur, err := f.Refresh()
	if err != nil || cur >= n {
		return err
	}
	if err := f.fd.Truncate(n); err != nil {
		return fail(pathless(err))
	}
	f.raiseLength(n)
	return nil
}

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
		return f.Length(), f.Length(), true
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
	case n == 0:
		return nil // fallocate rejects an empty range with EINVAL
	}
	length := f.Length()
	if off < 0 || n < 0 || off > length || n > length-off {
		// Another process may have grown the file since this one looked.
		length, _ = f.Refresh()
	}
	if off < 0 || n < 0 || off > length || n > length-off {
		return fail(&rangeError{Off: off, Len: n, Size: length})
	}
	// Up to the file's length only: fallocate past the end would lengthen
	// the file, which only Grow does.
	if err := reserve(f.fd, off, n, length); err != nil {
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
	// The growth up to the length last seen: what another process wrote
	// past it, after growing the file, is for that process's Sync.
	if grown := f.Length() - f.Len(); f.Growth != nil && grown > 0 {
		if err := f.Growth.syncRange(0, grown); err != nil {
			return &fileError{Path: f.path, Op: "sync", Err: err}
		}
	}
	return nil
}

// Retire is Close for a file that lock-free readers may still be reading:
// instead of unmapping the file, it maps private zero-filled memory over
// it in one step (MAP_FIXED), so that a slice or word obtained from the
// file reads zeros from then on, and writes to it reach nothing, instead
// of faulting. Those addresses stay reserved, using memory only for pages
// written to afterwards, until this process maps the same map file again
// (see reserve.go): Open maps it over them. Should the kernel
// refuse, the file stays mapped until the process ends (as safe for
// late readers, but it keeps the file's disk space should it be deleted),
// and the error says so. Calling Close or Retire again does nothing.
func (f *File) Retire() error {
	// The growth mapping goes whole: only the calls Close waits for touch
	// it (lock-free readers read the first Size bytes alone).
	return f.closeWith(func() error { return errors.Join(f.Region.retire(f.fd), f.unmapGrowth()) })
}

// Close unmaps the file and closes its descriptor. It does not sync: the
// pages stay in the page cache and reach the file as the kernel writes
// them back. Calling Close again does nothing and returns nil.
func (f *File) Close() error {
	return f.closeWith(func() error { return errors.Join(f.Region.release(f.fd), f.unmapGrowth()) })
}

// unmapGrowth lets the growth mapping go.
func (f *File) unmapGrowth() error {
	if f.Growth == nil {
		return nil
	}
	return f.Growth.Unmap()
}

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
