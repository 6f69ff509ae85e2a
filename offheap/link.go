package offheap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// openPath opens path as os.OpenFile(path, flags, perm) does, but with
// os.O_CREATE among flags it creates a file only where nothing is at path.
// A symbolic link is followed to a file that exists, as without O_CREATE;
// one whose target does not exist is refused with ErrDanglingLink rather
// than followed to create its target. open(2) with O_CREAT would create it
// wherever the link points, and in a directory others may write to, a link
// planted where a map is about to be created would have the creator make
// (and size, and reserve disk for) a file of the planter's choosing. The
// creation itself uses O_EXCL, which does not follow a link at all, so a
// link put in place between the look and the creation is refused too.
func openPath(path string, flags int, perm fs.FileMode) (*os.File, error) {
	if flags&os.O_CREATE == 0 {
		return os.OpenFile(path, flags, perm)
	}
	var err error
	// Each round ends in an open file, or in an error, unless another
	// process creates and removes the file between its two opens.
	for range 8 {
		var fd *os.File
		if fd, err = os.OpenFile(path, flags&^os.O_CREATE, perm); !errors.Is(err, fs.ErrNotExist) {
			return fd, err
		}
		if fd, err = os.OpenFile(path, flags|os.O_EXCL, perm); !errors.Is(err, fs.ErrExist) {
			return fd, err
		}
		// Something is at path, and opening it found no file: a link to
		// nothing, unless the file came and went between the two opens.
		target, lerr := os.Readlink(path)
		if lerr != nil {
			continue
		}
		if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: it points to %s, which does not exist, and Open creates a map only where nothing is: create the map at the target's path, or remove the link", ErrDanglingLink, target)
		}
	}
	return nil, err
}
