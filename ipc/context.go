package ipc

import (
	"context"
	"errors"
	"time"
)

// waitLocker is a Mutex of this package whose wait for the lock can be
// handed its bounds: a deadline, and a context that ends it early. Every
// algorithm's LockTimeout is lockWaiting with a deadline alone, so a wait
// a context ends leaves the lock as a LockTimeout that ran out does: a
// FIFO lock's turn taken and passed on by a substitute (or taken over by
// a later waiter of this process), a restricted lock's ticket passed on,
// a cohort's local lock taken and released by its helper.
type waitLocker interface {
	lockWaiting(w waiter) error
}

// LockContext locks m, giving up when ctx is done: it returns nil once m
// is held, or ctx.Err() (context.Canceled, context.DeadlineExceeded) if
// ctx is done first, holding nothing then. A ctx already done fails at
// once, even on a free lock. A deadline of ctx bounds the wait as
// LockTimeout's duration does; a cancellation ends it within about a
// millisecond (cancelNap), however long the waiter has slept, for every
// algorithm of this package. What the wait leaves behind is what a
// LockTimeout that ran out leaves: the lock's queue stays whole, and the
// turn the caller gave up is taken and passed on (see Mutex.LockTimeout),
// so the waiters behind it still get the lock.
//
// A Mutex from outside this package is waited for in slices of a
// millisecond of LockTimeout, each of which, for a FIFO lock, may leave a
// turn behind.
func LockContext(ctx context.Context, m Mutex) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline, bounded := ctx.Deadline()
	if !bounded {
		deadline = forever
	}
	done := ctx.Done()
	var err error
	switch wl, ok := m.(waitLocker); {
	case ok:
		err = wl.lockWaiting(waiter{deadline: deadline, done: done})
	case done == nil:
		m.Lock()
		return nil
	default:
		err = lockInSlices(m, deadline, done)
	}
	if errors.Is(err, ErrTimeout) {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if bounded && !time.Now().Before(deadline) {
			return context.DeadlineExceeded // ctx's own timer has yet to fire
		}
	}
	return err
}

// lockInSlices is LockContext for a Mutex from outside this package.
func lockInSlices(m Mutex, deadline time.Time, done <-chan struct{}) error {
	for {
		select {
		case <-done:
			return ErrTimeout
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ErrTimeout
		}
		if m.LockTimeout(min(left, cancelNap)) == nil {
			return nil
		}
	}
}
