package offheap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// defaultInitTimeout is how long Open waits for another process to finish
// creating a file when OpenOptions.initTimeout is zero. Creation writes one
// page and whatever Init writes, normally milliseconds; ten seconds leaves
// room for a loaded machine and a slow disk without hanging a caller
// forever behind a creator that is stuck.
const defaultInitTimeout = 10 * time.Second

// OpenOptions say how to open, or create, a map file.
type OpenOptions struct {
	// Create makes the file if it is absent, and initializes it if it is
	// empty or was left half-initialized by a creator that died (its header
	// says so). An existing ready file is opened as it is; any other file
	// is refused (ErrNotSharedMap) and left untouched.
	Create bool
	// CreateNew, with Create, opens only a file it creates: one that is
	// absent or empty. A file with anything in it, a map another process
	// has just created included, is refused with ErrExists and left as it
	// is. It is checked under the creation lock, so of several processes
	// creating one path at once at most one succeeds (one, unless its
	// creation fails: its half-written file is then refused to the rest).
	CreateNew bool
	// ReadOnly maps the file PROT_READ, so a stray write faults instead of
	// corrupting the map. It never writes or creates the file, and cannot be
	// combined with Create.
	ReadOnly bool
	// Size is the whole size to reserve when creating, header included,
	// rounded up to a multiple of the page size. The file is sparse: only
	// pages that are written or allocated take disk blocks (see
	// File.Allocate). Ignored
	// when the file already exists: the header's size wins.
	Size int64
	// Layout is an opaque record, at most MaxLayoutSize bytes, stored in
	// the header when creating; every opener reads it back with
	// File.Layout. Ignored when the file already exists: the caller
	// compares File.Layout with what it wanted.
	Layout []byte
	// Init, if set, runs in the creating process with the whole writable
	// mapping (all zeros past the header), after the header is written as
	// initializing and before the file is marked ready. Other openers wait
	// until it returns. It must not write to the header page. If it returns
	// an error, Open fails and the file stays not ready until the next
	// Open with Create initializes it again.
	Init func(r *Region) error
	// Reserve names ranges of bytes whose disk blocks a creator allocates
	// before Init runs, as File.Allocate does: what every user of the file
	// writes, so that a full disk fails the creation rather than faulting
	// (SIGBUS) on some later write. If the disk cannot hold them, Open
	// fails with ErrNoSpace and the file is left empty (its partial
	// reservation given back), for the next Create to start over. Ignored
	// when the file already exists.
	Reserve []Extent
	// NoHugePages maps the file with the kernel's default pages only. By
	// default the mapping asks for transparent huge pages (MADV_HUGEPAGE).
	// A kernel and filesystem that cache files in 2 MiB folios (recent
	// ext4, or a tmpfs mounted huge=within_size) then map each folio with
	// one TLB entry, and a random lookup in a map of hundreds of MiB walks
	// no page tables. The cost is page-cache granularity: a page first
	// touched brings in its whole 2 MiB, and writeback writes dirty folios
	// whole. Elsewhere the advice is ignored.
	// The disk blocks reserved for the file (see File.Allocate) are whole
	// 2 MiB pages either way: the folios are the file's, made by whichever
	// process touches a range first.
	NoHugePages bool
	// GrowsTo, if set, says for a layout record (the one given to create
	// the file, or the one an existing file's header holds) the size up to
	// which the file may grow after creation (limit; 0 if its size is
	// fixed), and the lengths it may have on the way: its recorded size,
	// or base plus a whole number of steps. The bytes a file that may grow
	// grows into, from its recorded size to the limit, are mapped from the
	// start, apart (File.Growth): address space, not memory, whose pages
	// are touched only once File.Grow has lengthened the file over them.
	// So every process sees the file grow without mapping it again. Any
	// other length is refused (ErrSize, ErrTruncated).
	GrowsTo func(layout []byte) (limit, base, step int64)
	// Mode is the permission bits (0o777 at most) of a file Open creates,
	// set exactly, whatever the process's umask. Zero means 0o600: only the
	// creating user may open the map. Read permission lets a user read
	// every entry (and take byte-range read locks, which change nothing
	// for writers: see the registry package); write permission lets a user
	// change or destroy the map. Ignored when the file already exists.
	Mode fs.FileMode

	// initTimeout bounds the wait for another process to finish creating
	// the file. Zero means defaultInitTimeout.
	initTimeout time.Duration
}

// Extent is a range of bytes of the file: Len bytes from Off.
type Extent struct{ Off, Len int64 }

// defaultMode is the permission of a map file created with a zero
// OpenOptions.Mode: its creator's alone.
const defaultMode fs.FileMode = 0o600

// check validates the options and fills in defaults, without touching the
// file.
func (o *OpenOptions) check() error {
	page := int64(os.Getpagesize())
	switch {
	case o.Create && o.ReadOnly:
		return fmt.Errorf("%w: Create and ReadOnly together (a read-only open never writes the file)", errBadOptions)
	case o.CreateNew && !o.Create:
		return fmt.Errorf("%w: CreateNew without Create", errBadOptions)
	case o.initTimeout < 0:
		return fmt.Errorf("%w: negative initTimeout %v", errBadOptions, o.initTimeout)
	case o.Create && (o.Size < HeaderSize+page || o.Size > maxMapSize-page):
		return fmt.Errorf("%w: size %d must be at least %d (the header and one page of data) and at most %d",
			errBadOptions, o.Size, HeaderSize+page, int64(maxMapSize-page))
	case o.Mode&^fs.ModePerm != 0:
		return fmt.Errorf("%w: mode %#o has bits beyond the permission bits (0o777)", errBadOptions, uint32(o.Mode))
	case o.Create && len(o.Layout) > MaxLayoutSize:
		return fmt.Errorf("%w: layout of %d bytes exceeds the %d the header holds", errBadOptions, len(o.Layout), MaxLayoutSize)
	}
	if o.initTimeout == 0 {
		o.initTimeout = defaultInitTimeout
	}
	if o.Mode == 0 {
		o.Mode = defaultMode
	}
	if o.Create {
		o.Size = (o.Size + page - 1) / page * page
	}
	return nil
}

// Open opens the map file at path, creating it if opts allow.
//
// Creation is race-free across processes: whoever creates the file, or
// finds it not ready, holds flock(2) on it meanwhile (exclusive for an Open
// with Create, shared otherwise), so when several processes open a new
// path at once, exactly one initializes it and the others wait, up to
// initTimeout, then open what it wrote. The lock is dropped before Open
// returns. A creator that dies loses its lock with its descriptor and
// leaves the header "initializing"; the next Open with Create starts the
// creation over. A file whose header says ready is opened without the
// lock: a ready file is never initialized again, so there is nothing to
// wait for, and a user who may only read the file (and so may hold flock
// on it) cannot stall the opens of its writers.
//
// A symbolic link at path is followed to the file it points to, but Create
// never creates a file through one: a link whose target does not exist is
// refused with ErrDanglingLink (see openPath).
//
// Every error names the operation and the path and wraps the cause (see
// errors.go); a file that fails validation is never written to. On a
// platform other than Linux, Open touches nothing and returns an error
// wrapping ErrUnsupported that says what the platform lacks.
func Open(path string, opts OpenOptions) (f *File, err error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "open", Err: err} }
	if err := checkPlatform(); err != nil {
		return fail(err)
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return fail(fmt.Errorf("%w: this host is big-endian; the format is little-endian", ErrEndianness))
	}
	if err := opts.check(); err != nil {
		return fail(err)
	}
	flags := os.O_RDWR
	switch {
	case opts.ReadOnly:
		flags = os.O_RDONLY
	case opts.Create:
		flags |= os.O_CREATE
	}
	for range replaceRetries {
		f, err := openOnce(path, flags, &opts)
		if !errors.Is(err, errReplaced) {
			return f, err
		}
	}
	return fail(fmt.Errorf("%w, %d times in a row", errReplaced, replaceRetries))
}

// openOnce is one try of Open with flags: errReplaced, unwrapped, if the
// path names another file once the creation lock is taken.
func openOnce(path string, flags int, opts *OpenOptions) (f *File, err error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "open", Err: err} }
	// Something other than a regular file is refused before it is opened:
	// opening a named pipe waits for a writer (or reader) for good, and
	// opening a device may do something (a tape rewinds). O_NONBLOCK would
	// spare the wait but also change a regular file's open: one that
	// conflicts with a lease (Samba's oplocks, NFS delegations) would fail
	// with EAGAIN instead of waiting for the lease to break. The fstat
	// after opening catches a path replaced in between.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fail(notRegular(st.Mode()))
	}
	// Created with the owner's bits only; create sets opts.Mode exactly
	// once the file is ours to initialize, so no other user can open a
	// file half made.
	fd, err := openPath(path, flags, 0o600)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // fileError names the path already
		}
		return fail(err)
	}
	// Close the descriptor on every failure, panics in Init included: it
	// carries the creation lock.
	defer func() {
		if f == nil {
			fd.Close()
		}
	}()
	if st, err := fd.Stat(); err != nil {
		return fail(pathless(err))
	} else if !st.Mode().IsRegular() {
		return fail(notRegular(st.Mode()))
	}
	return openLocked(fd, path, opts)
}

// notRegular is Open's error for a path whose file, of mode m, is not a
// regular one, naming what it is.
func notRegular(m fs.FileMode) error {
	kind := "special file"
	switch {
	case m&fs.ModeDir != 0:
		kind = "directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "named pipe"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeDevice != 0:
		kind = "device"
	}
	return fmt.Errorf("%w: a %s, not a regular file", ErrNotSharedMap, kind)
}

// openLocked takes the creation lock on fd and opens or creates the file
// under it. The lock is released on return; the caller closes fd on error.
func openLocked(fd *os.File, path string, o *OpenOptions) (*File, error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "open", Err: err} }
	if !o.CreateNew {
		if f, err := openReady(fd, path, o); f != nil || err != nil {
			return f, err
		}
	}
	// Shared is enough for an opener that will not create: it only has to
	// wait out a creator, which holds the lock exclusively, and readers
	// need not queue behind each other.
	if err := flockTimeout(fd, o.Create, o.initTimeout); err != nil {
		return fail(err)
	}
	defer unflock(fd) //nolint:errcheck // closing fd drops it too
	// The holder may have put another file in the path's place (a
	// resize renames its rewrite over the old file while it holds the
	// lock): that one is the map now, and the old one no process should
	// begin to use.
	if replaced, err := replacedSince(fd, path); err != nil {
		return fail(err)
	} else if replaced {
		return nil, errReplaced
	}

	st, err := fd.Stat()
	if err != nil {
		return fail(pathless(err))
	}
	page := make([]byte, min(st.Size(), HeaderSize))
	if _, err := fd.ReadAt(page, 0); err != nil && !errors.Is(err, io.EOF) {
		return fail(pathless(err))
	}
	if len(page) == 0 {
		// Empty: just made by open(O_CREAT), or by a creator that died
		// before its first write. Nothing in it to keep.
		if !o.Create {
			return fail(fmt.Errorf("%w: the file is empty (a creator has not started, or died before writing)", ErrNotReady))
		}
		return create(fd, path, o)
	}
	if o.CreateNew {
		return fail(fmt.Errorf("%w: %d bytes in it, and CreateNew opens only an absent or empty file", ErrExists, st.Size()))
	}
	if allZero(page) {
		// A creator writes the header before anything else (see create),
		// so this was never ours: a disk image, a preallocated file. Its
		// contents are not ours to wipe.
		return fail(fmt.Errorf("%w: %d bytes, the first %d of them zero (a map begins with its header; an all-zero file was not made by sharedmap, or by a version before 2026-11-25 that died creating it: remove it)",
			ErrNotSharedMap, st.Size(), len(page)))
	}
	h, faults, err := decodeHeader(page)
	if err == nil {
		return mapReady(fd, path, st.Size(), &h, faults, o)
	}
	if errors.Is(err, ErrNotReady) && o.Create {
		// Our magic and a state short of ready, and we hold the lock a live
		// creator would hold: the creator died. Start over.
		return create(fd, path, o)
	}
	if errors.Is(err, ErrNotReady) {
		return fail(fmt.Errorf("%w (open with Create to initialize it again)", err))
	}
	return fail(err)
}

// openReady opens fd's file without the creation lock if its header says
// it is ready (see Open). It returns nil and no error when the file is
// anything else (empty, being created, damaged, not ours), for openLocked
// to look again under the lock and name what it finds.
func openReady(fd *os.File, path string, o *OpenOptions) (*File, error) {
	st, err := fd.Stat()
	if err != nil || st.Size() < HeaderSize {
		return nil, nil
	}
	page := make([]byte, HeaderSize)
	if _, err := fd.ReadAt(page, 0); err != nil {
		return nil, nil
	}
	h, faults, err := decodeHeader(page)
	if err != nil {
		return nil, nil
	}
	return mapReady(fd, path, st.Size(), &h, faults, o)
}

// mapReady maps a file of size bytes whose header h says it is ready, and,
// when it is opened for writing, rewrites a header copy that faults says is
// damaged or unfinished from the sound one. Openers may do so at once,
// with or without the creation lock: each writes the same bytes, from the
// one copy that verifies, into the other, which nobody reads while it
// fails to verify.
func mapReady(fd *os.File, path string, size int64, h *header, faults []headerFault, o *OpenOptions) (*File, error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "open", Err: err} }
	if !o.ReadOnly && h.version != FormatVersion {
		return fail(fmt.Errorf("%w: open it read-only, or upgrade it (Upgrade)", ErrNeedsUpgrade))
	}
	limit := o.growsTo(h.layout, h.fileSize)
	if want := o.lengthFor(h.layout, h.fileSize, size); size != want {
		return fail(wrongSize(fd, path, size, want, limit > h.fileSize))
	}
	r, err := mapMapFile(fd, h, h.fileSize, !o.ReadOnly)
	if err != nil {
		return fail(err)
	}
	adviseMapping(r, o)
	f := newFile(r, fd, path, h, o, false)
	if err := f.mapGrowth(limit, o); err != nil {
		_ = r.release(fd)
		return fail(err)
	}
	f.length.Store(size)
	if !o.ReadOnly && mends(faults) {
		// One copy verified; rewrite the other from it.
		if f.mended, err = mendCopies(r, h, faults); err != nil {
			_ = r.release(fd)
			return fail(err)
		}
	}
	return f, nil
}

// create initializes the file: empty it, write the header as
// initializing (and sync it), size the file as a hole, run Init, and flip
// the state to ready. The caller holds the exclusive creation lock.
func create(fd *os.File, path string, o *OpenOptions) (f *File, err error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "create", Err: err} }
	h, written, err := writeInitializing(fd, o)
	if err != nil {
		return fail(err)
	}
	if err := fd.Truncate(o.Size); err != nil {
		return fail(pathless(err))
	}
	testCreateStep("sized")
	// New addresses: no reservation is of a map created now.
	r, err := mapNewMapFile(fd, &h, o.Size, true)
	if err != nil {
		return fail(err)
	}
	adviseMapping(r, o) // before Init, whose writes are the first touches
	defer func() {
		if f == nil {
			_ = r.Unmap() // also when Init panics
		}
	}()
	if err := initialize(fd, r, o, written); err != nil {
		return fail(err)
	}
	if err := markReady(r, o.Size); err != nil {
		return fail(err)
	}
	h.state = stateReady
	f = newFile(r, fd, path, &h, o, true)
	if err := f.mapGrowth(o.growsTo(o.Layout, o.Size), o); err != nil {
		f = nil
		return fail(err)
	}
	return f, nil
}

// writeInitializing empties the file and writes the header, saying
// "initializing", into it, synced; it returns the header and its bytes.
//
// Truncating to zero first drops whatever a dead creator wrote, so Init
// always starts from zeros. The header goes in next, by write(2) before
// the file is sized: so a creator that dies at any point leaves an empty
// file or one that says it is ours, and openLocked can refuse every other
// file rather than wipe it.
func writeInitializing(fd *os.File, o *OpenOptions) (h header, written []byte, err error) {
	if err := fd.Truncate(0); err != nil {
		return h, nil, pathless(err)
	}
	// EPERM: a file another user made (an empty one, or one whose creator
	// died) keeps the mode its owner gave it.
	if err := fd.Chmod(o.Mode); err != nil && !errors.Is(err, fs.ErrPermission) {
		return h, nil, pathless(err)
	}
	testCreateStep("emptied")
	h = header{
		version:    FormatVersion,
		state:      stateInitializing,
		fileSize:   o.Size,
		dataOffset: HeaderSize,
		created:    time.Now().UnixNano(),
		pid:        uint32(os.Getpid()),
		layout:     bytes.Clone(o.Layout),
	}
	written = make([]byte, HeaderSize)
	encodeHeader(written, &h)
	if _, err := fd.WriteAt(written, 0); err != nil {
		return h, nil, noSpaceFor("the file header", pathless(err))
	}
	// On disk before the size: after a power cut, a sized file of zeros
	// (the size reached the disk, the page did not) would be refused.
	if err := fd.Sync(); err != nil {
		return h, nil, noSpaceFor("the file header", pathless(err))
	}
	testCreateStep("header written")
	return h, written, nil
}

// initialize reserves the disk blocks o asks for and runs o.Init on the
// sized, mapped file r, whose header page must still hold written after.
func initialize(fd *os.File, r *Region, o *OpenOptions, written []byte) error {
	for _, e := range o.Reserve {
		if e.Len <= 0 {
			continue
		}
		if err := reserve(fd, e.Off, e.Len, o.Size); err != nil {
			// Give back the blocks a partial fallocate kept: a full disk
			// stays usable, and the empty file is one Create starts over.
			_ = fd.Truncate(0)
			return err
		}
	}
	testCreateStep("reserved")
	if o.Init == nil {
		return nil
	}
	if err := o.Init(r); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if hp := r.Bytes(0, HeaderSize); !bytes.Equal(hp, written) {
		copy(hp, written) // leave a header the next Create recognises as ours
		return errors.New("initialize: Init wrote into the header page")
	}
	return nil
}

// markReady syncs the size bytes of r, then flips both header copies to
// ready and syncs the header.
func markReady(r *Region, size int64) error {
	// Everything Init wrote must be on disk before the state that vouches
	// for it, or a power cut could leave a ready file with missing data.
	if err := r.syncRange(0, size); err != nil {
		return err
	}
	// The commit point is copy A's flip; B's follows. A crash between the
	// two leaves A ready and B initializing, which opens as ready (and a
	// writable open marks B ready too).
	atomic.StoreUint32(r.Uint32(copyA+hdrState), stateReady)
	testCreateStep("copy A ready")
	atomic.StoreUint32(r.Uint32(copyB+hdrState), stateReady)
	return r.syncRange(0, HeaderSize)
}

// growsTo is the size a file of the given layout and recorded size may
// grow to: recorded itself unless GrowsTo says more.
func (o *OpenOptions) growsTo(layout []byte, recorded int64) int64 {
	if o.GrowsTo == nil {
		return recorded
	}
	limit, _, _ := o.GrowsTo(layout)
	return max(recorded, min(limit, maxMapSize))
}

// lengthFor is the length a file of the given layout and recorded size
// should have, found size bytes long: size itself if that is one it may
// have, else the nearest one it may have below it (or the recorded size).
func (o *OpenOptions) lengthFor(layout []byte, recorded, size int64) int64 {
	limit := o.growsTo(layout, recorded)
	if limit == recorded || size <= recorded {
		return recorded
	}
	_, base, step := o.GrowsTo(layout)
	size = min(size, limit)
	if step <= 0 || size < base {
		return recorded
	}
	return max(recorded, base+(size-base)/step*step)
}

// testCreateStep marks the steps of create, for tests that kill a creator
// after each.
var testCreateStep = func(string) {}

// flockTimeout takes flock(2) without blocking: a blocking flock cannot be
// bounded, and the holder is a creator that may hang in Init. It polls with
// a backoff from 100µs, since an uncontended creation is short, to 10ms, so
// that a waiter notices the release promptly without taking a core from
// the creator it waits for.
func flockTimeout(fd *os.File, exclusive bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	nap := 100 * time.Microsecond
	for {
		if ok, err := tryFlock(fd, exclusive); ok || err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: its creation lock (flock) was still held after %v%s; the creator is still initializing it, or hangs, or another process holds flock on the file",
				errInitTimeout, timeout, lockHoldersText(fd, "FLOCK"))
		}
		time.Sleep(min(nap, left))
		nap = min(2*nap, 10*time.Millisecond)
	}
}

// pathless drops the path from an *fs.PathError, keeping the operation and
// the errno, because the fileError around it names the path already.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// noSpaceFor makes err, from writing what, match ErrNoSpace as well when
// the filesystem had no room for it: a disk already full fails the
// creation at its first write, before any reservation could.
func noSpaceFor(what string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: writing %s: %w", ErrNoSpace, what, err)
	}
	return err
}
