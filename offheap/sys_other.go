//go:build !linux

package offheap

// The names of sys_linux.go, for the platforms where Open, OpenSalvage
// and MapRegion refuse to run (checkPlatform says why). Nothing here is
// reached through them; each call returns the same refusal rather than a
// half-working imitation of the Linux call.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"unsafe"
)

// checkPlatform returns an error wrapping ErrUnsupported that names what
// this platform lacks of what a map shared between processes needs.
func checkPlatform() error {
	return fmt.Errorf("%w: sharedmap runs on Linux only: %s", ErrUnsupported, lacking(runtime.GOOS))
}

// lacking says what the platform goos lacks.
func lacking(goos string) string {
	const (
		ofd       = "OFD locks (F_OFD_SETLK), which tell which processes have a map open"
		futex     = "futex(2), on which a process waits for a lock another one holds"
		fallocate = "fallocate(2), which reserves a map's disk blocks so that a full disk is an error rather than a SIGBUS"
	)
	switch goos {
	case "darwin":
		return "macOS has no " + ofd + ", no " + futex + ", and no " + fallocate
	case "freebsd":
		return "FreeBSD has no " + ofd + ", no " + futex + " (sharedmap does not use _umtx_op), and no " +
			fallocate + " (sharedmap does not use posix_fallocate(2))"
	case "windows":
		return "Windows has none of the POSIX calls sharedmap is built on: " + ofd + "; " + futex + "; " +
			fallocate + "; and flock(2), which serializes a map's creation"
	}
	return goos + " is not Linux, whose " + ofd + ", " + futex + " and " + fallocate + " sharedmap is built on"
}

// The advice constants exist only to compile: madvise refuses them all.
const (
	adviceRandom = iota
	adviceHugePage
	advicePopulateRead
	advicePopulateWrite
)

func madvise([]byte, int) error                  { return checkPlatform() }
func unknownAdvice(error) bool                   { return false }
func msync([]byte) error                         { return checkPlatform() }
func fdatasync(*os.File) error                   { return checkPlatform() }
func fallocate(*os.File, int64, int64) error     { return checkPlatform() }
func tryFlock(*os.File, bool) (bool, error)      { return false, checkPlatform() }
func unflock(*os.File) error                     { return checkPlatform() }
func mapZerosOver(unsafe.Pointer, uintptr) error { return checkPlatform() }
func mapZeros(int64) ([]byte, error)             { return nil, checkPlatform() }
func munmap([]byte) error                        { return checkPlatform() }

func mapSharedNoReserve(*os.File, int64, int64, bool) ([]byte, error) { return nil, checkPlatform() }

func mapFileOver(*os.File, int64, unsafe.Pointer, uintptr, bool) error { return checkPlatform() }

// seekData cannot skip holes here: the caller reads it all.
func seekData(*os.File, int64) (int64, bool, error) { return 0, false, checkPlatform() }

// seekHole cannot find holes here.
func seekHole(*os.File, int64) (int64, error) { return 0, checkPlatform() }

var errSymlink = errors.New("a symbolic link")

func openNoFollow(string, int, fs.FileMode) (*os.File, error) { return nil, checkPlatform() }

func fileGroup(fs.FileInfo) int                  { return -1 }
func fileID(*os.File) (dev, ino uint64, ok bool) { return 0, 0, false }
