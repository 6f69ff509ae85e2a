package hashmap

import (
	"errors"

	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
)

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
	// usual cause is a live one: a very long Compute or Range body, or a
	// process stopped (SIGSTOP, a debugger) while it held the lock.
	ErrTimeout = rwulock.ErrTimeout

	// ErrCorrupt: the file holds data no correct writer produces.
	ErrCorrupt = segment.ErrCorrupt

	// ErrClosed: the map was used after Close.
	ErrClosed = errors.New("sharedmap: map is closed")

	// ErrReadOnly: a write on a map opened with ReadOnly.
	ErrReadOnly = errors.New("sharedmap: map is opened read-only")

	// ErrIncompatible: the file exists with a layout other than the one the
	// options ask for. An existing map keeps the layout it was created with.
	ErrIncompatible = errors.New("sharedmap: options conflict with the existing map")

	// ErrBadOptions: the options cannot make a map, or an argument is out
	// of range (a TTL that is not positive).
	ErrBadOptions = segment.ErrBadParams

	// ErrNotCache: PutWithTTL on a map created without Options.Cache.
	ErrNotCache = errors.New("sharedmap: the map was not created as a cache (Options.Cache)")
)
