//go:build !linux

package offheap

import (
	"fmt"
	"os"
)

// LockHolder is one lock on a file. Only Linux lists them (/proc/locks).
type LockHolder struct {
	Kind       string
	Write      bool
	PID        int
	Start, End int64
}

// String says the lock as a person reads it.
func (l LockHolder) String() string { return fmt.Sprintf("%s lock by pid %d", l.Kind, l.PID) }

// LockHolders returns nil: this platform does not list file locks.
func LockHolders(uintptr) []LockHolder { return nil }

func lockHoldersText(*os.File, string) string { return "" }
