package offheap

import (
	"errors"
	"fmt"
)

// Errors about the file itself. Opening returns them wrapped in a
// *FileError naming the path; match them with errors.Is.
var (
	// ErrTruncated: the file is shorter than its header says it must be.
	ErrTruncated = errors.New("file is truncated")
)

// RangeError reports an access outside the mapping, usually an offset read
// from a corrupted file.
type RangeError struct {
	Off, Len, Size int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("range [%d, %d+%d) is outside the %d-byte mapping", e.Off, e.Off, e.Len, e.Size)
}
