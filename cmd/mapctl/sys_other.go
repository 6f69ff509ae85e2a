//go:build !linux

package main

import (
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
)

// isTerminal reports false: progress lines are drawn only on Linux.
func isTerminal(io.Writer) bool { return false }

// diskBytes does not know the disk space a file takes here.
func diskBytes(fs.FileInfo) (int64, bool) { return 0, false }

// flockMutex is lockbench's flock(2) baseline, which runs on Linux only:
// newFlockMutex refuses, so no flockMutex exists to lock here.
type flockMutex struct{}

func newFlockMutex(string) (*flockMutex, error) {
	return nil, fmt.Errorf("the flock baseline on %s: %w", runtime.GOOS, offheap.ErrUnsupported)
}

func (*flockMutex) Lock()                           {}
func (*flockMutex) LockTimeout(time.Duration) error { return offheap.ErrUnsupported }
func (*flockMutex) TryLock() bool                   { return false }
func (*flockMutex) Unlock() error                   { return offheap.ErrUnsupported }
func (*flockMutex) Close() error                    { return nil }
