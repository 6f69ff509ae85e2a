package offheap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// LockFilePath is the path of the companion lock file of the map file at
// path: an empty file on which the layers above take the byte-range locks
// that say which processes have the map open for writing (see the
// registry package). A user who may only read a map can take read locks
// on the map file itself, but cannot open its lock file, so no lock of
// such a user's can stop a writer.
func LockFilePath(path string) string { return path + "-lock" }

// LockFile returns the descriptor of the companion lock file
// (LockFilePath), opening it on the first call. A writable File opens it
// read-write and makes it if it is absent, readable and writable by
// exactly the classes of users that may write the map file, and by its
// owner (lockFilePerm), whatever the umask. A read-only File opens it
// read-only, and only if it exists and this user may read it. Either
// refuses a symbolic link (in a directory other users may write, one could
// point it at a file of the opener's) and anything but a regular file.
//
// The lock file is closed with the File, which drops every lock taken on
// it, as the death of the process does. It is never removed: see the
// registry package for what removing it, or renaming the map, while
// processes have the map open does.
func (f *File) LockFile() (uintptr, error) {
	f.lockMu.Lock()
	defer f.lockMu.Unlock()
	if f.lockFile != nil {
		return f.lockFile.Fd(), nil
	}
	if f.fd == nil {
		return 0, &fileError{Path: f.path, Op: "open lock file", Err: os.ErrClosed}
	}
	fd, err := openLockFile(f.fd, LockFilePath(f.path), !f.ReadOnly())
	if err != nil {
		return 0, &fileError{Path: LockFilePath(f.path), Op: "open lock file", Err: err}
	}
	f.lockFile = fd
	return fd.Fd(), nil
}

func openLockFile(mapFd *os.File, path string, writable bool) (*os.File, error) {
	flags := os.O_RDONLY
	if writable {
		flags = os.O_RDWR
	}
	var made bool
	var perm fs.FileMode
	var gid int
	fd, err := openNoFollow(path, flags, 0)
	if writable && errors.Is(err, fs.ErrNotExist) {
		st, serr := mapFd.Stat()
		if serr != nil {
			return nil, pathless(serr)
		}
		perm = lockFilePerm(st.Mode().Perm())
		gid = fileGroup(st)
		fd, err = openNoFollow(path, flags|os.O_CREATE|os.O_EXCL, perm)
		made = err == nil
		if errors.Is(err, fs.ErrExist) { // another opener made it first
			fd, err = openNoFollow(path, flags, 0)
		}
	}
	if errors.Is(err, errSymlink) {
		return nil, errors.New("a symbolic link, not a lock file (remove it: it is made again)")
	}
	if err != nil {
		return nil, pathless(err)
	}
	st, err := fd.Stat()
	if err != nil || !st.Mode().IsRegular() {
		fd.Close()
		return nil, fmt.Errorf("%w: not a regular file", ErrNotSharedMap)
	}
	if made {
		// Exactly these bits, whatever the umask, and the map's group,
		// where this user may give it (a writer of the map by its
		// group). Best effort: the lock file holds no data.
		_ = fd.Chmod(perm)
		_ = fd.Chown(-1, gid)
	}
	return fd, nil
}

// lockFilePerm is the permission of a new lock file for a map file of
// permission mapPerm: read and write for each class of user that may
// write the map, nothing for the others, and always its owner's.
func lockFilePerm(mapPerm fs.FileMode) fs.FileMode {
	perm := fs.FileMode(0o600)
	for _, class := range []fs.FileMode{0o070, 0o007} {
		if mapPerm&class&0o222 != 0 {
			perm |= class & 0o666
		}
	}
	return perm
}
