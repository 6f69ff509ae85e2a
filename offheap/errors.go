package offheap

import (
	"errors"
	"fmt"
)

// Errors about the file itself. Open returns them wrapped in a *FileError
// naming the path; match them with errors.Is. A file that fails any of
// these checks is never written to.
var (
	// ErrNotSharedMap: the file is not a sharedmap file (no magic).
	ErrNotSharedMap = errors.New("not a sharedmap file")
	// ErrTruncated: the file is shorter than its header says it must be.
	ErrTruncated = errors.New("file is truncated")
	// ErrSize: the file is longer than its header says; something else
	// wrote to it.
	ErrSize = errors.New("file has the wrong size")
	// ErrVersion: the file was written by a newer format version.
	ErrVersion = errors.New("unsupported format version")
	// ErrEndianness: the file was written on a machine of the other byte
	// order, or this host is big-endian.
	ErrEndianness = errors.New("wrong byte order")
	// ErrChecksum: the header does not match its checksum.
	ErrChecksum = errors.New("header checksum mismatch")
	// ErrNotReady: the file is being created (or its creator died) and the
	// caller may not finish the creation (read-only, or without Create).
	ErrNotReady = errors.New("file is not initialized")
	// ErrInitTimeout: another process kept the file locked for creation
	// longer than OpenOptions.InitTimeout.
	ErrInitTimeout = errors.New("timed out waiting for another process to create the file")
	// ErrNoSpace: the disk has no room for the blocks being reserved.
	ErrNoSpace = errors.New("no space left for the map file")
	// ErrBadOptions: the OpenOptions cannot be used.
	ErrBadOptions = errors.New("invalid open options")
)

// FileError is an error about one file, wrapping a sentinel above.
type FileError struct {
	Path string
	Op   string // "open", "create", "allocate", ...
	Err  error
}

func (e *FileError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// RangeError reports an access outside the mapping, usually an offset read
// from a corrupted file.
type RangeError struct {
	Off, Len, Size int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("range [%d, %d+%d) is outside the %d-byte mapping", e.Off, e.Off, e.Len, e.Size)
}
