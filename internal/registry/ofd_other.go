//go:build !linux

package registry

import "time"

func (r *Registry) tryLockSlot(int) (bool, error) { return false, ErrUnsupported }
func (r *Registry) unlockSlot(int) error          { return ErrUnsupported }
func (r *Registry) slotHeld(int) (bool, error)    { return false, ErrUnsupported }
func (r *Registry) adoptLockFile() error          { return ErrUnsupported }
func (r *Registry) useLockFile() error            { return ErrUnsupported }

// LockRecovery is unavailable without OFD locks.
func (r *Registry) LockRecovery(time.Duration) (func(), error) { return nil, ErrUnsupported }
