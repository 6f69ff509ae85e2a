package ipc

import (
	"sync/atomic"
	"time"
)

// A waiter of a FIFO lock that gives up (LockTimeout) cannot leave the
// queue: a substitute goroutine waits out its turn and hands the lock on,
// holding one of the process's journal entries until then. Waiters that
// keep timing out on a lock held for long (a caller retrying LockTimeout,
// the map's waits in turns) would each leave one more, until the journal
// is used up and no other lock of the process can be taken. So a later
// waiter of this process on the same lock first takes over such a turn,
// which is further ahead in the queue than a new arrival would be: when
// the turn comes, the substitute completes the grant for it instead of
// releasing. Turns are this process's only; another process's are its own.

// pendingTurn is one substitute's turn on a lock. Its fields are guarded by
// the arena's mu.
type pendingTurn struct {
	index   int
	gen     uint64        // the lock's generation the turn is in: a Reset voids it
	claimed bool          // a waiter is taking it over
	handed  chan struct{} // closed once the lock is the claimant's
	gone    chan struct{} // closed once the turn can no longer be handed (reset, Close)
	over    bool
}

// substituteTurn is substitute for a waiter of lock index that gave up:
// take gets the turn it waits out, to hand over (handOver) if a later
// waiter takes it over.
func (a *Arena) substituteTurn(index int, gen uint64, take func(w *waiter, t *pendingTurn)) {
	if !a.enter() {
		return
	}
	t := a.newTurn(index, gen)
	go func() {
		defer a.leave()
		defer a.dropTurn(t) // for a claimant, in every way take ends but a handover
		w := newWaiter(-1)
		w.stop = &a.closing
		take(&w, t)
	}()
}

// newTurn registers the turn a substitute is about to wait out on lock
// index.
func (a *Arena) newTurn(index int, gen uint64) *pendingTurn {
	t := &pendingTurn{index: index, gen: gen, handed: make(chan struct{}), gone: make(chan struct{})}
	a.mu.Lock()
	if a.turns == nil {
		a.turns = make(map[int][]*pendingTurn)
	}
	a.turns[index] = append(a.turns[index], t)
	a.pendingTurns.Add(1)
	a.mu.Unlock()
	return t
}

// endTurn unregisters t; caller holds mu.
func (a *Arena) endTurn(t *pendingTurn) {
	t.over = true
	a.pendingTurns.Add(-1)
	ts := a.turns[t.index]
	for i, u := range ts {
		if u == t {
			a.turns[t.index] = append(ts[:i:i], ts[i+1:]...)
			break
		}
	}
}

// handOver is the substitute's, once its turn came and it holds the lock:
// if a waiter has taken the turn over, grant runs (what the waiter's own
// LockTimeout would have done on being granted) and the lock is the
// waiter's; it reports whether so. Otherwise the substitute releases.
func (a *Arena) handOver(t *pendingTurn, grant func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.over {
		return false
	}
	a.endTurn(t)
	if !t.claimed {
		close(t.gone)
		return false
	}
	grant()
	close(t.handed)
	return true
}

// dropTurn is the substitute's when its turn will not come (a reset, or
// Close stopped it): a waiter that took it over goes back to arriving.
func (a *Arena) dropTurn(t *pendingTurn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !t.over {
		a.endTurn(t)
		close(t.gone)
	}
}

// dropTurns is Reset's: the turns on lock index are void, and their
// claimants arrive anew at once rather than wait for their substitutes,
// asleep, to notice the Reset.
func (a *Arena) dropTurns(index int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.turns[index] {
		t.over = true
		a.pendingTurns.Add(-1)
		close(t.gone)
	}
	delete(a.turns, index)
}

// lockByTurn is where a LockTimeout begins: if a turn this process's
// substitutes wait out on lock index is free to take over, it waits for
// it as w allows and reports took, with nil once the lock is the caller's
// or ErrTimeout if w's deadline came first. It reports !took if there was
// no turn to take or it was dropped, for the caller to arrive as usual;
// with no turn pending anywhere in the arena, the common case, it looks at
// one atomic word and nothing else.
func (a *Arena) lockByTurn(index int, w *waiter) (took bool, err error) {
	if a.pendingTurns.Load() == 0 {
		return false, nil
	}
	switch o, ok := a.takeOverTurn(index, w); {
	case !ok:
		return false, nil
	case o == granted:
		return true, nil
	}
	return true, ErrTimeout
}

// takeOverTurn is lockByTurn's wait: it reports (granted, true) once the
// lock is the caller's, (timedOut, true) if w's deadline came first, and
// (_, false) if there was no turn to take or it was dropped.
func (a *Arena) takeOverTurn(index int, w *waiter) (outcome, bool) {
	a.mu.Lock()
	var t *pendingTurn
	gen := atomic.LoadUint64(&a.lockBody(index)[lGen]) // a turn of an earlier one is void
	for _, u := range a.turns[index] {
		if !u.claimed && u.gen == gen {
			t = u
			break
		}
	}
	if t == nil {
		a.mu.Unlock()
		return 0, false
	}
	t.claimed = true
	a.mu.Unlock()
	var expired <-chan time.Time
	if !w.deadline.IsZero() {
		timer := time.NewTimer(time.Until(w.deadline))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-t.handed:
		return granted, true
	case <-t.gone:
		return 0, false
	case <-expired:
	case <-w.done: // a context's (LockContext): ends as the deadline would
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-t.handed:
		return granted, true // handed over just as the deadline came
	default:
	}
	t.claimed = false // for a later waiter to take over
	return timedOut, true
}
