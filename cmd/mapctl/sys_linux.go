package main

// What mapctl asks of the operating system, as Linux has it. sys_other.go
// gives every name here the same signature for the other platforms, where
// no map opens (hashmap.ErrUnsupported) and mapctl says so at run time.

import (
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is an *os.File open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// diskBytes is how much disk space the file fi describes takes (its
// allocated blocks), and whether fi says.
func diskBytes(fi fs.FileInfo) (int64, bool) {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512, true
	}
	return 0, false
}

// flockMutex is flock(2) on its own open file description, so that two
// goroutines of one process exclude each other.
type flockMutex struct{ f *os.File }

func newFlockMutex(path string) (*flockMutex, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &flockMutex{f: f}, nil
}

func (l *flockMutex) Lock() {
	for unix.Flock(int(l.f.Fd()), unix.LOCK_EX) == unix.EINTR {
	}
}

func (l *flockMutex) LockTimeout(time.Duration) error { l.Lock(); return nil }

func (l *flockMutex) TryLock() bool {
	return unix.Flock(int(l.f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

func (l *flockMutex) Unlock() error { return unix.Flock(int(l.f.Fd()), unix.LOCK_UN) }

// Close closes the lock's file, which drops the lock if held.
func (l *flockMutex) Close() error { return l.f.Close() }
