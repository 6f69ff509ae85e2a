//go:build linux

package registry

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ofd sets or tests an OFD lock on one byte of the file. OFD locks belong
// to the open file description: they conflict with every other
// description, in this process or another, and vanish when the
// description's last descriptor closes, which process exit does.
func (r *Registry) ofd(cmd int, typ int16, off int64) (unix.Flock_t, error) {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	err := unix.FcntlFlock(r.file.Fd(), cmd, &lk)
	return lk, err
}

func (r *Registry) tryLockSlot(i int) (bool, error) {
	_, err := r.ofd(unix.F_OFD_SETLK, unix.F_WRLCK, r.layout.slotOff(i))
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registry: lock slot %d: %w", i, err)
	}
	return true, nil
}

func (r *Registry) unlockSlot(i int) error {
	_, err := r.ofd(unix.F_OFD_SETLK, unix.F_UNLCK, r.layout.slotOff(i))
	return err
}

// slotHeld asks whether another open file description holds slot i's lock.
func (r *Registry) slotHeld(i int) (bool, error) {
	lk, err := r.ofd(unix.F_OFD_GETLK, unix.F_WRLCK, r.layout.slotOff(i))
	if err != nil {
		return false, fmt.Errorf("registry: test slot %d: %w", i, err)
	}
	return lk.Type != unix.F_UNLCK, nil
}

// LockRecovery takes the file-wide recovery lock, polling until timeout,
// and returns the function that releases it.
func (r *Registry) LockRecovery(timeout time.Duration) (func(), error) {
	off := r.layout.Off + hSlots
	deadline := time.Now().Add(timeout)
	if !r.lockLocal(deadline) {
		return nil, fmt.Errorf("%w: held in this process for %v", ErrRecoveryBusy, timeout)
	}
	nap := 50 * time.Microsecond
	for {
		_, err := r.ofd(unix.F_OFD_SETLK, unix.F_WRLCK, off)
		if err == nil {
			return func() {
				_, _ = r.ofd(unix.F_OFD_SETLK, unix.F_UNLCK, off)
				r.recovering.Unlock()
			}, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
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
