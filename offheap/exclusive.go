package offheap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// replaceRetries bounds how often Open and OpenExclusive open a path again
// after finding, under the creation lock, that it names another file than
// the one they opened: each time, a process that held the lock put a new
// file in its place (a resize). One such rewrite takes the lock for as
// long as it copies the map, so several in a row at one path while an
// Open waits mean a loop gone wrong, not a busy map.
const replaceRetries = 8

// errReplaced is openLocked's answer when the path no longer names the
// file it was handed: Open closes it and opens the path again.
var errReplaced = errors.New("the path was given another file while Open waited for its creation lock")

// OpenExclusive opens the ready map file at path for a caller that must
// have it to itself while it reads the map and puts another file in its
// place (a rewrite laid out anew): it takes the file's creation lock
// (flock, exclusive, waiting up to the time Open waits for a creator) and
// keeps it until Close, so that no creation, no Upgrade and no other
// OpenExclusive of the file runs meanwhile, and an Open that finds the
// file being created waits. It holds the lock on the file the path names
// once it has it: a path given another file while it waited is opened
// again (see Open).
//
// Before it waits for the creation lock it takes flock on the companion
// lock file (LockFilePath), without waiting, and keeps that too until
// Close: an OpenExclusive of a file that another has open, whose rewrite
// may take as long as copying the map, fails at once with ErrRewriting
// naming the process, rather than after the creation lock's wait. The
// kernel drops both locks when the process dies, so a rewrite killed
// midway blocks nothing. (The map's own locks in that file are byte-range
// OFD locks, which flock does not touch.)
//
// The file is mapped writable, as the layers above need it to take the
// locks they keep in its companion lock file (LockFile); OpenExclusive
// itself writes nothing, and does not mend a header copy that fails to
// verify. A file of an older format version is opened too: its data is
// read, not changed. growsTo is OpenOptions.GrowsTo, so that the bytes a
// grown file holds past its recorded size are mapped (Growth).
func OpenExclusive(path string, growsTo func(layout []byte) (limit, base, step int64)) (*File, error) {
	fail := func(err error) (*File, error) { return nil, &fileError{Path: path, Op: "open exclusively", Err: err} }
	if err := checkPlatform(); err != nil {
		return fail(err)
	}
	for range replaceRetries {
		f, err := openExclusiveOnce(path, growsTo)
		if !errors.Is(err, errReplaced) {
			if err != nil {
				return fail(err)
			}
			return f, nil
		}
	}
	return fail(fmt.Errorf("%w, %d times in a row", errReplaced, replaceRetries))
}

// openExclusiveOnce is one try of OpenExclusive: errReplaced if the path
// names another file once the lock is taken.
func openExclusiveOnce(path string, growsTo func([]byte) (int64, int64, int64)) (*File, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, notRegular(st.Mode())
	}
	fd, err := openPath(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, pathless(err)
	}
	var f *File
	var lockFd *os.File
	defer func() {
		if f == nil {
			fd.Close() // drops the lock too
			if lockFd != nil {
				lockFd.Close()
			}
		}
	}()
	lockFd, err = openLockFile(fd, LockFilePath(path), true)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", LockFilePath(path), err)
	}
	if ok, err := tryFlock(lockFd, true); err != nil {
		return nil, err
	} else if !ok {
		return nil, rewriting(lockFd)
	}
	if err := flockTimeout(fd, true, defaultInitTimeout); err != nil {
		return nil, err
	}
	if replaced, err := replacedSince(fd, path); err != nil {
		return nil, err
	} else if replaced {
		return nil, errReplaced
	}
	page, size, err := readHeaderPage(fd)
	if err != nil {
		return nil, err
	}
	if len(page) == 0 {
		return nil, fmt.Errorf("%w: the file is empty (a creator has not started, or died before writing)", ErrNotReady)
	}
	h, _, err := decodeHeader(page)
	if err != nil {
		return nil, err
	}
	o := &OpenOptions{GrowsTo: growsTo}
	limit := o.growsTo(h.layout, h.fileSize)
	if want := o.lengthFor(h.layout, h.fileSize, size); size != want {
		return nil, wrongSize(fd, path, size, want, limit > h.fileSize)
	}
	r, err := mapFile(fd, h.fileSize, true)
	if err != nil {
		return nil, err
	}
	adviseMapping(r, o)
	nf := newFile(r, fd, path, &h, o, false)
	if err := nf.mapGrowth(limit, o); err != nil {
		_ = r.Unmap()
		return nil, err
	}
	nf.length.Store(size)
	nf.lockFile = lockFd
	f = nf
	return f, nil
}

// rewriting is ErrRewriting for the lock file lockFd, whose flock another
// OpenExclusive holds, naming the processes that hold it.
func rewriting(lockFd *os.File) error {
	var pids []string
	for _, l := range LockHolders(lockFd.Fd()) {
		if l.Kind == "FLOCK" && l.PID > 0 {
			pids = append(pids, strconv.Itoa(l.PID))
		}
	}
	if len(pids) == 0 {
		return ErrRewriting
	}
	return fmt.Errorf("%w (pid %s)", ErrRewriting, strings.Join(pids, ", "))
}

// Replaced reports whether the file's path names another file now (or
// none): the file was renamed, removed, or replaced by a rename over it,
// as a resize does. A process that opened the path before that has the
// old file, which the path no longer leads to.
func (f *File) Replaced() (bool, error) {
	if f.fd == nil {
		return false, &fileError{Path: f.path, Op: "stat", Err: os.ErrClosed}
	}
	replaced, err := replacedSince(f.fd, f.path)
	if err != nil {
		return false, &fileError{Path: f.path, Op: "stat", Err: err}
	}
	return replaced, nil
}

// replacedSince reports whether path names a file other than fd's now
// (none counts as other).
func replacedSince(fd *os.File, path string) (bool, error) {
	mine, err := fd.Stat()
	if err != nil {
		return false, pathless(err)
	}
	now, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, pathless(err)
	}
	return !os.SameFile(mine, now), nil
}
