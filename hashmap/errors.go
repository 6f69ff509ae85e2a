package hashmap

import (
	"errors"
	"fmt"

	"github.com/sharedmap/sharedmap/internal/registry"
	"github.com/sharedmap/sharedmap/offheap"
	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
)

// BatchError is the error of a batch call that stopped at one of its keys
// (PutAll): Index is the key's index in the call's slices, and Err what
// the key's own store returned (match it with errors.Is, as a Put's).
type BatchError struct {
	Op    string // the call: "PutAll"
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("%s: key %d: %v", e.Op, e.Index, e.Err) }

func (e *BatchError) Unwrap() error { return e.Err }

// Errors returned by the map. Match them with errors.Is; they come wrapped
// with the operation and the segment or path concerned.
var (
	// ErrNotFound: Get found no entry for the key.
	ErrNotFound = errors.New("sharedmap: key not found")

	// ErrFull: the key's segment has no room and the overflow pool is used
	// up; the map reached its MaxBloatFactor. Nothing was written. Create the
	// map with more Entries or a larger MaxBloatFactor.
	ErrFull = segment.ErrFull

	// ErrTooLarge: the key and value together exceed what one tier holds.
	ErrTooLarge = segment.ErrTooLarge

	// ErrTimeout: a segment lock was not acquired in time (see
	// Options.LockTimeout). A dead holder is released on the way, so the
	// cause is a live one: a long Compute or Update function, or a stopped
	// process. Open returns it when recovery held the file's recovery lock
	// through its wait for a process slot.
	ErrTimeout = rwulock.ErrTimeout

	// ErrCorrupt: the file holds data no correct writer produces. Open
	// reports a damaged file header with it too, wrapped with an error that
	// says what is wrong: a checksum that fails, a file shorter than its
	// header records, or a size its header does not describe.
	ErrCorrupt = segment.ErrCorrupt

	// ErrClosed: the map was used after Close.
	ErrClosed = errors.New("sharedmap: map is closed")

	// ErrReadOnly: a write on a map opened with ReadOnly.
	ErrReadOnly = errors.New("sharedmap: map is opened read-only")

	// ErrIncompatible: the file exists with a layout other than the one the
	// options ask for (an existing map keeps the layout it was created
	// with), or one this build cannot read: a newer format version, a
	// layout with features this build lacks, or the other byte order. The
	// error's text says which.
	ErrIncompatible = errors.New("sharedmap: options conflict with the existing map")

	// ErrNeedsUpgrade: a writable Open of a file whose header is format
	// version 1 (one copy of the header, as builds before the two copies
	// wrote it). Such a file opens with Options.ReadOnly; Upgrade (mapctl
	// upgrade PATH) rewrites its header as the current version in place,
	// keeping every entry, and the error's text says so. It matches
	// ErrIncompatible too.
	ErrNeedsUpgrade = offheap.ErrNeedsUpgrade

	// ErrBadOptions: the options cannot make a map, or an argument is out
	// of range (a TTL that is not positive).
	ErrBadOptions = segment.ErrBadParams

	// ErrTooManyProcesses: Open found every process slot of the file
	// (Options.MaxProcesses, fixed at creation) taken by a live process's
	// open Map. Slots of dead processes are taken back on the way. The
	// count cannot grow in place: the error names the option and the
	// mapctl commands that copy the map into a new one with more.
	ErrTooManyProcesses = registry.ErrFull

	// ErrNotCache: PutWithTTL on a map created without Options.Cache, or
	// Open with Options.DefaultTTL of such a map.
	ErrNotCache = errors.New("sharedmap: the map was not created as a cache (Options.Cache)")

	// ErrLoadFailed: GetOrLoad waited for a load that failed in another
	// process (the error carries its text), or for one that panicked.
	ErrLoadFailed = errors.New("sharedmap: the load this call waited for failed")

	// ErrUnsupported: the platform lacks what a map shared between
	// processes needs (OFD locks, futexes, fallocate): every platform but
	// Linux. Open and Salvage return it there, before touching the file,
	// wrapped with an error whose text names what is missing.
	ErrUnsupported = errors.New("sharedmap: platform not supported")

	// ErrNotSharedMap: Open found a file at the path that is not a map
	// (it does not start as a map file does) and left it as it is.
	ErrNotSharedMap = offheap.ErrNotSharedMap

	// ErrNotReady: the file is empty, all zeros, or was left half-created
	// by a creator that died, and the Open may not create a map in it
	// (Options.NoCreate or ReadOnly).
	ErrNotReady = offheap.ErrNotReady

	// ErrNoSpace: the disk could not hold the blocks a map file needs, at
	// its creation, its growth, a process slot's first use, or a Resize's
	// new file (which is then removed, the old file untouched).
	ErrNoSpace = offheap.ErrNoSpace

	// ErrDanglingLink: the path is a symbolic link to a file that does not
	// exist. Open creates no map through a link: in a directory others may
	// write to, such a link would have it create one wherever it points.
	ErrDanglingLink = offheap.ErrDanglingLink
)

// alsoIs is err, unchanged in what it says, that also matches sentinel
// with errors.Is: an error from a lower layer that is one of this
// package's kinds.
type alsoIs struct{ err, sentinel error }

func (e alsoIs) Error() string   { return e.err.Error() }
func (e alsoIs) Unwrap() []error { return []error{e.err, e.sentinel} }

// classifyOpenError makes the errors of Open's lower layers match this
// package's sentinels as well as their own: file-header damage ErrCorrupt,
// a file this build cannot read, or cannot write until it is upgraded,
// ErrIncompatible, a recovery lock busy
// throughout the wait for a process slot ErrTimeout, a platform without
// what a map needs ErrUnsupported.
func classifyOpenError(err error) error {
	switch {
	case errors.Is(err, offheap.ErrUnsupported), errors.Is(err, registry.ErrUnsupported):
		return alsoIs{err, ErrUnsupported}
	case errors.Is(err, offheap.ErrChecksum), errors.Is(err, offheap.ErrCorrupt),
		errors.Is(err, offheap.ErrTruncated), errors.Is(err, offheap.ErrSize):
		return alsoIs{err, ErrCorrupt}
	case errors.Is(err, offheap.ErrVersion), errors.Is(err, offheap.ErrEndianness), errors.Is(err, segment.ErrBadLayout),
		errors.Is(err, offheap.ErrNeedsUpgrade):
		return alsoIs{err, ErrIncompatible}
	case errors.Is(err, registry.ErrRecoveryBusy):
		return alsoIs{err, ErrTimeout}
	}
	return err
}
