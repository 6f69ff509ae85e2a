package hashmap

import (
	"context"
	"fmt"
)

// LockContext is Lock bounded by ctx: it returns nil once lock i is held,
// or, if ctx is done first, an error matching ctx.Err() with nothing held. A
// ctx already done fails at once, even on a free lock. A cancellation ends
// the wait within about a millisecond; a deadline ends it at the deadline.
//
// Giving up leaves the lock as a LockTimeout that ran out does, in every
// process: a FIFO lock's queue stays whole and the waiters behind the
// caller's turn still get the lock in their order. An Unlock in any process
// happens before the LockContext that then returns nil.
//
// Like Lock it recovers a holder or waiter that died: a lock found taken is
// first looked at for a dead party as TryLock does, and the lock table is
// recovered at each LockTimeout of the wait (a ctx shorter than LockTimeout
// gets only the first). If the map is closed meanwhile, it gives up at the
// end of that turn (ErrClosed), or with ctx. A ctx that can never end makes
// it Lock. The map's own lock waits take no context: Options.LockTimeout
// bounds them.
func (t *LockTable) LockContext(ctx context.Context, i int) error {
	// The map's own waits take no context: a write waiting for a segment's
	// lock (Put, Compute, Update, Clear, DeleteFunc) waits for one
	// operation on one segment, microseconds, or for a Compute, Update or
	// DeleteFunc function, which must be short. A wait longer than that is
	// a holder that died or was stopped, which Options.LockTimeout bounds
	// (ErrTimeout after at most twice it) and recovery ends, for every
	// waiter at once; a context would let one caller leave sooner but free
	// nobody, and the segment lock's wait (rwulock), which every write
	// goes through, would have to watch it. A caller with a tighter
	// deadline than LockTimeout opens the map with a smaller one.
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
