package offheap

import (
	"errors"
	"fmt"
	"io/fs"
)

// Open reports every problem as a *fileError naming the path and wrapping
// one of the sentinels below (or an OS error), so callers match with
// errors.Is and people read "open /path: <problem>: <detail>". A file that
// fails any check is never written to, not even by an Open with Create.

// Errors about the platform, found before anything else.
var (
	// ErrUnsupported reports a platform that lacks what a map file shared
	// between processes needs: every platform but Linux. Open,
	// OpenSalvage and MapRegion return it there, with the platform's
	// missing system calls named, before touching the file.
	ErrUnsupported = errors.New("platform not supported")
)

// Errors about the arguments, found before the file is touched.
var (
	// errBadOptions reports OpenOptions that cannot be used: a size too
	// small or too large, a layout too long, Create with ReadOnly, or
	// CreateNew without Create.
	errBadOptions = errors.New("invalid open options")
)

// Errors while waiting for or doing the creation of a file.
var (
	// ErrNotReady reports a file that is not initialized (empty, all zeros,
	// or left half-written by a creator that died) and an Open that may
	// not initialize it, because it lacks Create or is ReadOnly.
	ErrNotReady = errors.New("file is not initialized")
	// ErrExists reports a file that an Open with CreateNew found not
	// empty. It matches fs.ErrExist too.
	ErrExists error = existsError{}
	// ErrDanglingLink reports a symbolic link, at the path an Open with
	// Create was given, whose target does not exist: Open does not create
	// a file through a link (see Open).
	ErrDanglingLink = errors.New("a symbolic link to a file that does not exist")
	// ErrRewriting reports an OpenExclusive of a file that another
	// OpenExclusive has open: a rewrite of the map (a resize) is running,
	// for as long as it takes to copy the map, so the second one fails at
	// once instead of waiting for it. The error names the process.
	ErrRewriting = errors.New("another process has the map open to rewrite it")
	// errInitTimeout reports that another process held the file's creation
	// lock for longer than OpenOptions.initTimeout: it is still
	// initializing the file, or its Init hangs.
	errInitTimeout = errors.New("timed out waiting for another process to finish creating the file")
)

// existsError is ErrExists: a sentinel of its own that errors.Is also
// matches with fs.ErrExist, as the os package's errors for existing files.
type existsError struct{}

func (existsError) Error() string        { return "file already exists" }
func (existsError) Is(target error) bool { return target == fs.ErrExist }

// Errors from validating an existing file's header, in the order Open
// checks them.
var (
	// ErrNotSharedMap reports a file that does not start with the sharedmap
	// magic: some other program's file.
	ErrNotSharedMap = errors.New("not a sharedmap file")
	// ErrTruncated reports a file shorter than its header, or shorter than
	// the size its header records: someone truncated it, and mapping it
	// would fault with SIGBUS. The error names both sizes and the commands
	// that salvage the entries or grow the file back.
	ErrTruncated = errors.New("file is truncated")
	// ErrEndianness reports a file written on a machine of the other byte
	// order, or an Open on a big-endian host: the format is little-endian.
	ErrEndianness = errors.New("wrong byte order")
	// ErrVersion reports a file written in a newer format than this build
	// reads.
	ErrVersion = errors.New("unsupported format version")
	// ErrNeedsUpgrade reports a writable Open of a file whose header is
	// format version 1 (one copy of the header): this build reads it, and
	// opens it read-only, but writes only files whose header it can keep
	// two copies of. Upgrade rewrites the header as the current version.
	ErrNeedsUpgrade = errors.New("file header is format version 1, which this build opens only read-only")
	// ErrChecksum reports a header neither copy of which matches its
	// checksum: it was damaged after it was written. (One copy that
	// matches is enough to open the file.)
	ErrChecksum = errors.New("header checksum mismatch")
	// ErrCorrupt reports a header that holds impossible values (a size,
	// offset, length or state no writer produces) in every copy, or two
	// copies that both verify and differ: a file made by hand or by a
	// buggy writer, or damage the checksum does not cover.
	ErrCorrupt = errors.New("corrupt header")
	// ErrSize reports a file longer than the size its header records:
	// something other than sharedmap extended it. The error names both
	// sizes, says whether the bytes added are zeros, and gives the
	// truncate command that removes them.
	ErrSize = errors.New("file has the wrong size")
)

// Errors from using an open file.
var (
	// ErrNoSpace reports that the filesystem has no room for the blocks
	// File.Allocate reserves.
	ErrNoSpace = errors.New("no space left for the map file")
	// errReadOnly reports a change requested through a read-only File.
	errReadOnly = errors.New("file is open read-only")
)

// fileError is an error about one file: what was being done to which
// path, and why it failed (usually one of the sentinels above, wrapped
// with details).
type fileError struct {
	Path string // the path given to Open
	Op   string // "open", "create", "allocate", "sync" or "close"
	Err  error  // the cause
}

// Error reads "op path: cause", the form os.PathError uses.
func (e *fileError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }

// Unwrap returns the cause, so errors.Is sees the sentinel.
func (e *fileError) Unwrap() error { return e.Err }

// rangeError reports an access outside the mapping, usually an offset read
// from a corrupted file.
type rangeError struct {
	Off, Len, Size int64
}

// Error gives the range and the mapping size, enough to locate the bad offset.
func (e *rangeError) Error() string {
	return fmt.Sprintf("range [%d, %d+%d) is outside the %d-byte mapping", e.Off, e.Off, e.Len, e.Size)
}
