package hashmap

import (
	"context"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
)

// waitInTurns waits for ipc lock l, lock index of the arena, up to d (d <
// 0: without end), in turns of the map's LockTimeout. Between turns it
// gives up, without the lock, with ErrClosed if closable and the map is
// closed, or with ErrTimeout once d has passed; and, if recovering, it
// recovers what dead processes left in the lock table before waiting
// again, so that a lock whose holder died is released for its survivors
// while a live holder is waited for as long as it takes. A FIFO waiter
// loses its place in the queue at each turn.
//
// When d has passed, recovering, and a process that died is a party to
// the lock (deadParty), it recovers the lock table and waits once more, up
// to d or LockTimeout, whichever is shorter, before it gives up: so a d
// too short for a turn between recoveries (any d up to LockTimeout) still
// gets a dead holder's lock, and ErrTimeout says a live process holds the
// lock, or one whose lock the pass could not release yet. In all, it
// returns within d, a recovery pass and that last wait.
func (m *Map) waitInTurns(l ipc.Mutex, index int, d time.Duration, closable, recovering bool) error {
	return m.waitInTurnsContext(context.Background(), l, index, d, closable, recovering)
}

// waitInTurnsContext is waitInTurns that also gives up, without the lock,
// with ctx.Err() once ctx is done: each turn's wait is bounded by ctx too
// (ipc.LockContext), so that it ends within about a millisecond of ctx.
func (m *Map) waitInTurnsContext(ctx context.Context, l ipc.Mutex, index int, d time.Duration, closable, recovering bool) error {
	recovering = recovering && m.reg != nil && m.reg.Self() >= 0
	if d < 0 && !closable && !recovering && ctx.Done() == nil {
		l.Lock()
		return nil
	}
	deadline := time.Now().Add(d)
	lastWait := false
	for {
		turn := m.opts.LockTimeout
		if d >= 0 {
			turn = max(0, min(turn, time.Until(deadline)))
		}
		if lockTurn(ctx, l, turn) == nil {
			return nil
		}
		switch err := contextEnded(ctx); {
		case err != nil:
			return err
		case closable && m.gate.Closed():
			return ErrClosed
		case d >= 0 && !time.Now().Before(deadline):
			if !recovering || lastWait || !m.deadParty(index) {
				return ErrTimeout
			}
			m.recoverLocks()
			lastWait = true
			deadline = time.Now().Add(min(d, m.opts.LockTimeout))
			continue
		}
		if recovering {
			_, _ = m.recoverSegments([]int{})
			m.recoveries.Add(1)
		}
	}
}

// contextEnded is ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed and its timer has yet to say so.
func contextEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// lockTurn is one turn of waitInTurnsContext: l.LockTimeout(turn), bounded
// by ctx too when ctx can end.
func lockTurn(ctx context.Context, l ipc.Mutex, turn time.Duration) error {
	if ctx.Done() == nil {
		return l.LockTimeout(turn)
	}
	tctx, cancel := context.WithTimeout(ctx, turn)
	defer cancel()
	return ipc.LockContext(tctx, l)
}

// adminLock is the map's admin lock as the segment table takes it, inside
// calls that Close waits for. It holds adminLocal too, for LockTable.Reset.
type adminLock struct{ m *Map }

func (a adminLock) Lock() {
	a.m.adminLocal.Lock()
	_ = a.m.waitInTurns(a.m.admin, 0, -1, false, true)
}

func (a adminLock) Unlock() error {
	defer a.m.adminLocal.Unlock()
	return a.m.admin.Unlock()
}
