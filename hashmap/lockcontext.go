package hashmap

import (
	"context"
	"fmt"
)

// LockContext is Lock bounded by ctx: it returns nil once lock i is held,
// or, if ctx is done first, an error matching ctx.Err()
// (context.Canceled, context.DeadlineExceeded) with nothing held. A ctx
// already done fails at once, even on a free lock. A cancellation ends
// the wait within about a millisecond, whatever the lock algorithm and
// however long the waiter has slept; a deadline ends it at the deadline.
//
// Giving up leaves the lock as a LockTimeout that ran out does, in every
// process: a FIFO lock's queue stays whole, the turn the caller gave up
// is taken and passed on by this process (see ipc.Mutex.LockTimeout), so
// the waiters behind it, in any process, still get the lock in their
// order. The happens-before contract is Lock's: an Unlock in any process
// happens before the LockContext that then returns nil.
//
// Like Lock it recovers a holder or waiter that died: before it waits, a
// lock found taken is looked at for a dead party as TryLock does (at most
// once per quarter of LockTimeout for the lock, in this process), and the
// lock table is recovered at each LockTimeout of the wait. A ctx shorter
// than LockTimeout gets only the first of those. If the map is closed
// meanwhile, LockContext gives up at the end of that turn (ErrClosed), or
// with ctx. A ctx that can never end (context.Background) makes it Lock.
//
// The map's own waits take no context: a write waiting for a segment's
// lock (Put, Compute, Update, Clear, DeleteFunc) waits for one operation
// on one segment, microseconds, or for a Compute, Update or DeleteFunc
// function, which must be short. A wait longer than that is a holder that
// died or was stopped, which Options.LockTimeout bounds (ErrTimeout after
// at most twice it) and recovery ends, for every waiter at once; a context
// would let one caller leave sooner but free nobody, and the segment
// lock's wait (rwulock), which every write goes through, would have to
// watch it. A caller with a tighter deadline than LockTimeout opens the
// map with a smaller one.
func (t *LockTable) LockContext(ctx context.Context, i int) error {
	if ctx.Done() == nil {
		return t.Lock(i)
	}
	l, c, err := t.lock(i)
	if err != nil {
		return err
	}
	defer c.Leave()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lock %d: %w", i, err)
	}
	if l.TryLock() || t.lookForDeadHolder(i) && l.TryLock() {
		return nil
	}
	if err := t.m.waitInTurnsContext(ctx, l, i+1, -1, true, true); err != nil {
		return fmt.Errorf("lock %d: %w", i, err)
	}
	return nil
}
