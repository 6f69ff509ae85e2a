//go:build linux

package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
	"golang.org/x/sys/unix"
)

// The locks that decide liveness and exclude recoveries are OFD write locks
// on the companion lock file, PATH-lock, which only users who may write the
// map can open (offheap.File.LockFile). A write lock on the map file itself
// would do as well, were it not that any user who may read the map can
// take a read lock over all of it, even beyond its end, and so keep every
// writer from claiming a slot or recovering. On the map file a writer
// holds only read locks, which no reader can block: one on its slot's
// first byte while it has the map open (how a process of a version that
// locked the map file itself sees it alive, and how an opener that reaches
// another lock file sees it at all), and one on the area's byte 8 while it
// holds the recovery lock (which excludes the recoveries of those versions,
// which write-lock that byte).
const (
	lockFileRecovery = 0 // the recovery lock's byte in the lock file
	lockFileSlot0    = 1 // slot i's byte in the lock file is lockFileSlot0 + i
)

// lock sets (F_OFD_SETLK) an OFD lock of type typ on one byte of fd's file,
// without waiting: false if another open file description holds a
// conflicting one. OFD locks belong to the open file description: they
// conflict with every other description, in this process or another, and
// vanish when the description's last descriptor closes, which process
// exit does.
func lock(fd uintptr, typ int16, off int64) (bool, error) {
	lk := unix.Flock_t{Type: typ, Start: off, Len: 1}
	err := unix.FcntlFlock(fd, unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}

// conflicts asks (F_OFD_GETLK) whether another open file description holds
// a lock on fd's byte off that a lock of type typ would conflict with: a
// write lock, for typ F_RDLCK; any lock, for F_WRLCK.
func conflicts(fd uintptr, typ int16, off int64) (bool, error) {
	lk := unix.Flock_t{Type: typ, Start: off, Len: 1}
	if err := unix.FcntlFlock(fd, unix.F_OFD_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != unix.F_UNLCK, nil
}

// mapFile is the descriptor of the map file, which the offheap.File owns.
func (r *Registry) mapFile() uintptr { return r.file.Fd() }

// useLockFile opens the lock file (offheap.File.LockFile) for a registry
// of a writable file. A registry that only reads uses it only if it is
// the one the map's writers use; else it reads liveness from the map file
// alone.
func (r *Registry) useLockFile() error {
	if r.lockFd != 0 {
		return nil
	}
	fd, err := r.file.LockFile()
	if errors.Is(err, fs.ErrPermission) && !r.file.ReadOnly() {
		return fmt.Errorf("%w: %v (a writer of the map must be able to open it read-write, or to make it in the map's directory: make it once, as the map's owner, with the map's group and mode for its writers, e.g. touch and chmod 0660)", ErrLockFile, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLockFile, err)
	}
	if r.file.ReadOnly() {
		if id, err := fileID(fd); err != nil || id != r.recordedLockFile() {
			return fmt.Errorf("%w: not the one the map's writers use", ErrLockFile)
		}
	}
	r.lockFd = fd
	return nil
}

// lockFileID identifies a lock file: the device and inode number of the
// file, as recorded in the area header.
type lockFileID struct{ dev, ino uint64 }

func fileID(fd uintptr) (lockFileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return lockFileID{}, err
	}
	return lockFileID{uint64(st.Dev), st.Ino}, nil
}

func (r *Registry) recordedLockFile() lockFileID {
	return lockFileID{atomic.LoadUint64(r.file.Uint64(r.layout.Off + hLockDev)), atomic.LoadUint64(r.file.Uint64(r.layout.Off + hLockIno))}
}

// adoptLockFile records this process's lock file in the area header if
// another is recorded (or none), after making sure that no process has the
// map open through another lock file: a slot whose byte in the map file
// carries a read lock though no writer holds the slot here. It runs under
// the recovery lock.
func (r *Registry) adoptLockFile() error {
	mine, err := fileID(r.lockFd)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLockFile, err)
	}
	if r.recordedLockFile() == mine {
		return nil
	}
	var unseen []string
	for i := range r.InUse() {
		off := r.layout.slotOff(i)
		here, err := conflicts(r.lockFd, unix.F_RDLCK, lockFileSlot0+int64(i))
		if err != nil {
			return err
		}
		writeLocked, err := conflicts(r.mapFile(), unix.F_RDLCK, off)
		if err != nil {
			return err
		}
		locked, err := conflicts(r.mapFile(), unix.F_WRLCK, off)
		if err != nil {
			return err
		}
		if locked && !here && !writeLocked {
			unseen = append(unseen, fmt.Sprintf("slot %d (pid %d)", i, atomic.LoadUint64(r.file.Uint64(off+sPID))))
		}
	}
	if len(unseen) > 0 {
		var holders []string
		for _, l := range offheap.LockHolders(r.mapFile()) {
			holders = append(holders, l.String())
		}
		return fmt.Errorf("%w: %s is not the lock file of the processes holding %s: the map was renamed, or its lock file removed, while they had it open (open it by the path they use, or stop them), or a process that opened the map read-only holds a read lock over their bytes (locks on the map file: %s)",
			ErrLockFile, offheap.LockFilePath(r.file.Path()), strings.Join(unseen, ", "), strings.Join(holders, "; "))
	}
	atomic.StoreUint64(r.file.Uint64(r.layout.Off+hLockDev), mine.dev)
	atomic.StoreUint64(r.file.Uint64(r.layout.Off+hLockIno), mine.ino)
	return nil
}

func (r *Registry) tryLockSlot(i int) (bool, error) {
	ok, err := lock(r.lockFd, unix.F_WRLCK, lockFileSlot0+int64(i))
	if !ok || err != nil {
		return false, wrapSlotErr("lock", i, err)
	}
	// A process of a version that locked the map file itself holds a write
	// lock here while it lives.
	ok, err = lock(r.mapFile(), unix.F_RDLCK, r.layout.slotOff(i))
	if !ok || err != nil {
		_, _ = lock(r.lockFd, unix.F_UNLCK, lockFileSlot0+int64(i))
		return false, wrapSlotErr("lock", i, err)
	}
	return true, nil
}

func wrapSlotErr(op string, i int, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("registry: %s slot %d: %w", op, i, err)
}

func (r *Registry) unlockSlot(i int) error {
	_, err := lock(r.mapFile(), unix.F_UNLCK, r.layout.slotOff(i))
	if r.lockFd != 0 {
		if _, err2 := lock(r.lockFd, unix.F_UNLCK, lockFileSlot0+int64(i)); err == nil {
			err = err2
		}
	}
	return err
}

// slotHeld asks whether another open file description holds slot i: a
// write lock on its byte in the lock file, or (a process of a version that
// locked the map file itself) on its byte in the map file. Neither is a
// lock a user who may only read the map can take. A registry with no lock
// file to read (a read-only open by a user who may not read it) falls back
// to any lock on the slot's byte in the map file, where a reader's read
// lock reads as a live process: good enough for reports, which is all a
// read-only open makes of liveness.
func (r *Registry) slotHeld(i int) (bool, error) {
	off := r.layout.slotOff(i)
	if r.lockFd == 0 {
		held, err := conflicts(r.mapFile(), unix.F_WRLCK, off)
		return held, wrapSlotErr("test", i, err)
	}
	held, err := conflicts(r.lockFd, unix.F_RDLCK, lockFileSlot0+int64(i))
	if held || err != nil {
		return held, wrapSlotErr("test", i, err)
	}
	held, err = conflicts(r.mapFile(), unix.F_RDLCK, off)
	return held, wrapSlotErr("test", i, err)
}

// LockRecovery takes the file-wide recovery lock, polling until timeout,
// and returns the function that releases it. It is an OFD write lock on
// the lock file (made if absent), and a read lock on the map file's byte
// that processes of a version that locked the map file itself write-lock
// for the same purpose. A user who may only read the map can delay it by
// no lock of theirs.
func (r *Registry) LockRecovery(timeout time.Duration) (func(), error) {
	deadline := time.Now().Add(timeout)
	if !r.lockLocal(deadline) {
		return nil, fmt.Errorf("%w: held in this process for %v", ErrRecoveryBusy, timeout)
	}
	if err := r.useLockFile(); err != nil {
		r.recovering.Unlock()
		return nil, err
	}
	legacy := r.layout.Off + hSlots
	nap := 50 * time.Microsecond
	for {
		ok, err := lock(r.lockFd, unix.F_WRLCK, lockFileRecovery)
		if ok {
			if ok, err = lock(r.mapFile(), unix.F_RDLCK, legacy); !ok {
				_, _ = lock(r.lockFd, unix.F_UNLCK, lockFileRecovery)
			}
		}
		if ok {
			return func() {
				_, _ = lock(r.mapFile(), unix.F_UNLCK, legacy)
				_, _ = lock(r.lockFd, unix.F_UNLCK, lockFileRecovery)
				r.recovering.Unlock()
			}, nil
		}
		if err != nil {
			r.recovering.Unlock()
			return nil, fmt.Errorf("registry: recovery lock: %w", err)
		}
		if !time.Now().Before(deadline) {
			r.recovering.Unlock()
			return nil, fmt.Errorf("%w: held by another process for %v", ErrRecoveryBusy, timeout)
		}
		time.Sleep(nap)
		nap = min(2*nap, 5*time.Millisecond)
	}
}
