package offheap

// The system calls this package makes, as Linux has them. sys_other.go
// gives every name here the same signature for the platforms where Open
// refuses to run; change the two together.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// checkPlatform returns nil: Linux has everything a map file needs.
func checkPlatform() error { return nil }

// mapNoReserve keeps Retire's reservation out of the kernel's overcommit
// accounting: it is as large as the map file, and nearly all of it is
// never written.
const mapNoReserve = unix.MAP_NORESERVE

// The madvise(2) advice this package passes to Region.advise.
const (
	adviceRandom        = unix.MADV_RANDOM         // no readahead: lookups jump around
	adviceHugePage      = unix.MADV_HUGEPAGE       // map 2 MiB folios with one TLB entry
	advicePopulateRead  = unix.MADV_POPULATE_READ  // fault pages in now (Linux 5.14)
	advicePopulateWrite = unix.MADV_POPULATE_WRITE // fault pages in writable now (Linux 5.14)
)

// madvise passes advice for the pages of b.
func madvise(b []byte, advice int) error { return unix.Madvise(b, advice) }

// unknownAdvice reports whether err is madvise's refusal of an advice the
// kernel does not know (EINVAL), as kernels before 5.14 refuse
// MADV_POPULATE_*.
func unknownAdvice(err error) bool { return errors.Is(err, unix.EINVAL) }

// msync writes the pages of b to the file and waits (MS_SYNC).
func msync(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }

// fdatasync writes fd's data to the disk and waits.
func fdatasync(fd *os.File) error {
	for {
		err := unix.Fdatasync(int(fd.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// fallocate reserves the disk blocks of [off, off+n) of fd with
// fallocate(2), as this package's errors (see fallocateError).
func fallocate(fd *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(fd.Fd()), 0, off, n)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fallocateError(err, off, n)
	}
}

// fallocateError maps what fallocate(2) returned onto this package's
// errors.
func fallocateError(err error, off, n int64) error {
	switch {
	case err == nil, errors.Is(err, unix.EOPNOTSUPP):
		return nil // no fallocate here: the range stays sparse, as before
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%w: reserving %d bytes at offset %d", ErrNoSpace, n, off)
	}
	return fmt.Errorf("fallocate: %w", err)
}

// tryFlock takes flock(2) on fd, exclusive or shared, without blocking:
// false and no error if another open file description holds it (or a
// signal interrupted the call), for the caller to try again.
func tryFlock(fd *os.File, exclusive bool) (bool, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	err := unix.Flock(int(fd.Fd()), how|unix.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EINTR):
		return false, nil
	}
	return false, fmt.Errorf("flock: %w", err)
}

// unflock drops the flock(2) tryFlock took on fd.
func unflock(fd *os.File) error { return unix.Flock(int(fd.Fd()), unix.LOCK_UN) }

// mmapReservation is the mmap mapZerosOver makes its reservation with;
// tests make it fail to reach Retire's fallback.
var mmapReservation = unix.MmapPtr

// mapZerosOver maps private zero-filled memory over the n bytes at addr
// in one step (MAP_FIXED), readable and writable, reserved without
// counting against the overcommit limit.
func mapZerosOver(addr unsafe.Pointer, n uintptr) error {
	_, err := mmapReservation(-1, 0, addr, n,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|mapNoReserve)
	return err
}

// mapFileOver maps n bytes of fd from byte off (a multiple of the page
// size) MAP_SHARED at addr, replacing what was mapped there (MAP_FIXED),
// read-only or readable and writable.
func mapFileOver(fd *os.File, off int64, addr unsafe.Pointer, n uintptr, readOnly bool) error {
	prot := unix.PROT_READ | unix.PROT_WRITE
	if readOnly {
		prot = unix.PROT_READ
	}
	_, err := unix.MmapPtr(int(fd.Fd()), off, addr, n, prot, unix.MAP_SHARED|unix.MAP_FIXED)
	return err
}

// mapZeros maps n bytes of private zero-filled memory, read-only,
// reserved without counting against the overcommit limit.
func mapZeros(n int64) ([]byte, error) {
	return unix.Mmap(-1, 0, int(n), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|mapNoReserve)
}

// munmap unmaps what mapZeros mapped.
func munmap(b []byte) error { return unix.Munmap(b) }

// mapSharedNoReserve maps n bytes of fd from off, MAP_SHARED, without
// reserving swap or commit for them (MAP_NORESERVE): address space for a
// file to grow into, most of it past the file's end. Without the flag an
// emulator (qemu-user) refuses a mapping that large. The slice is one
// unix.Munmap (and so mmap.MMap.Unmap) lets go.
func mapSharedNoReserve(fd *os.File, off, n int64, writable bool) ([]byte, error) {
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	return unix.Mmap(int(fd.Fd()), off, int(n), prot, unix.MAP_SHARED|unix.MAP_NORESERVE)
}

// seekData returns the offset of the first byte of data at or after from
// in fd (lseek SEEK_DATA), skipping holes; none is true if there is only
// a hole from there to the end. An error means the filesystem cannot
// tell: the caller reads it all.
func seekData(fd *os.File, from int64) (off int64, none bool, err error) {
	off, err = unix.Seek(int(fd.Fd()), from, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, true, nil
	}
	return off, false, err
}

// seekHole returns the offset of the first byte of a hole at or after
// from in fd (lseek SEEK_HOLE); the end of the file counts as one.
func seekHole(fd *os.File, from int64) (int64, error) {
	return unix.Seek(int(fd.Fd()), from, unix.SEEK_HOLE)
}

// errSymlink is openNoFollow's error for a symbolic link at the path.
var errSymlink = errors.New("a symbolic link")

// openNoFollow is os.OpenFile that refuses a symbolic link as the last
// element of path (O_NOFOLLOW), with an error wrapping errSymlink.
func openNoFollow(path string, flags int, perm fs.FileMode) (*os.File, error) {
	fd, err := os.OpenFile(path, flags|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: %w", errSymlink, err)
	}
	return fd, err
}

// fileGroup is the group ID that owns the file st describes, or -1 if
// st does not say.
func fileGroup(st fs.FileInfo) int {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Gid)
	}
	return -1
}

// fileID is fd's device and inode numbers.
func fileID(fd *os.File) (dev, ino uint64, ok bool) {
	var st unix.Stat_t
	if err := unix.Fstat(int(fd.Fd()), &st); err != nil {
		return 0, 0, false
	}
	return uint64(st.Dev), st.Ino, true
}
