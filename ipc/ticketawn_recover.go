package ipc

// Recovery of ticket-awn: a dead waiter's ticket is found, its turn taken
// and passed on, and its node given back.

import (
	"sync/atomic"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// stepTicket is stepAdopted for a ticket-awn episode holding ticket t.
func (a *Arena) stepTicket(e entry, s uint64, index int, t, gen uint64) bool {
	l := openTicketAWN(a, index).(*ticketAWN)
	egress := l.egress()
	st := entryState(s)
	switch st.phase() {
	case jArriving:
		return a.ticketArriving(e, st, index, gen, egress)
	case jQueued:
		if pos(egress) != int64(t) {
			return pos(egress) > int64(t) // not its turn yet (or voided)
		}
		return a.ticketTurn(l, e, st, t, egress)
	case jReleasing:
		a.ticketFinishRelease(l, t, egress)
	}
	return true
}

// ticketArriving is stepTicket for an episode that died around drawing its
// ticket: once the ticket it drew is known, it is recorded and the episode
// is queued; it reports whether the episode is over.
func (a *Arena) ticketArriving(e entry, st entryState, index int, gen uint64, egress int64) bool {
	switch drew, v := a.ticketOf(index, gen, egress); v {
	case ownerOther:
		return false
	case ownerAmbiguous:
		a.reset(index, "ticket-awn")
		return true
	case ownerThis:
		atomic.StoreUint64(&e.w[1], drew)
		atomic.StoreUint64(&e.w[0], st.withPhase(jQueued))
		return false // queued now: the next look takes its turn
	}
	return true // it never drew a ticket
}

// ticketTurn is stepTicket for a queued episode whose turn (ticket t) has
// come: it releases the lock, and gives back the node the dead waiter
// published in the array when no releaser can still write to it. It
// reports whether the episode is over.
func (a *Arena) ticketTurn(l *ticketAWN, e entry, st entryState, t uint64, egress int64) bool {
	// A node it published goes back to the table once the release
	// below has withdrawn it from the array, provided no releaser can
	// still write its flag: egress positive means the releaser did not
	// choose the node; negative, that it did, and the flag then shows
	// whether its store landed. That store follows the releaser's
	// egress store at once, so wait for it a few looks (w[2], unused by
	// tickets, counts them), then let the node be, rather than hold
	// the queue for a releaser that may never make it.
	node := uint32(0)
	if l.waiters.n != 0 {
		if n := atomic.LoadUint32(l.waiters.at(int64(t))); a.isNode(uint64(n)) {
			node = n
		}
	}
	if node != 0 && egress < 0 && atomic.LoadUint32(a.awnNode(node).mine) == 0 {
		if looks := atomic.LoadUint64(&e.w[2]); looks < ticketFlagLooks {
			atomic.StoreUint64(&e.w[2], looks+1)
			return false
		}
		// Marked before the release below withdraws it from the
		// array, so that Recover's sweep never sees it unnamed and
		// unmarked.
		a.voidDeadNode(node)
		node = 0
	}
	owner := uint64(0)
	if node != 0 {
		// Safe to reuse once withdrawn: the sweep may give it back
		// should this surrogate die before giving it back below. Its
		// owner is read while the array names it: once withdrawn,
		// another process's sweep may give it back first and a
		// waiter take it, so the give-back below expects this value.
		owner = atomic.LoadUint64(a.awnNode(node).owner)
		a.markNodeInArray(node, false)
	}
	// Releasing, in the journal before the release, as Unlock does: a
	// surrogate killed between the release's egress store and its flag
	// store leaves an entry the next survivor finishes (the jReleasing
	// case sets the flag), not a queued one it would call done, past a
	// waiter that then waits for good. The holder word is cleared
	// first, so no releasing entry leaves it set.
	if hook := testHookTicketTurn.Load(); hook != nil {
		(*hook)()
	}
	atomic.StoreUint64(l.holder, 0)
	atomic.StoreUint64(&e.w[0], st.withPhase(jReleasing))
	l.release()
	if node != 0 {
		a.returnDeadNodeOf(node, owner)
	}
	return true
}

// ticketFinishRelease is stepTicket for an episode that died releasing
// ticket t: it redoes the egress store if that did not happen, sets the
// next waiter's node flag if a node handover was chosen and the flag may
// not have been set, and wakes the waiters on egress.
func (a *Arena) ticketFinishRelease(l *ticketAWN, t uint64, egress int64) {
	switch {
	case pos(egress) == int64(t):
		l.release() // it died before its egress store
	case egress == -(int64(t) + 1):
		// It chose a node handover and may have died before setting the
		// node. Read the node's flag, then the array: a node still named
		// there has not been handed the lock (its waiter withdraws it
		// when it is), so a flag seen clear was never set.
		if testHookTicketFlag != nil {
			testHookTicketFlag()
		}
		next := atomic.LoadUint32(l.waiters.at(int64(t) + 1))
		if !a.isNode(uint64(next)) {
			break
		}
		nd := a.awnNode(next)
		// Egress last: unchanged, the queue has not moved past ticket
		// t+1, so the array's slot is still that ticket's, not a later
		// arrival's that reuses it (n tickets on) after t+1 held and
		// released the lock.
		if atomic.LoadUint32(nd.mine) == 0 && atomic.LoadUint32(l.waiters.at(int64(t)+1)) == next && l.egress() == egress {
			atomic.StoreUint32(nd.mine, 1)
			wait.WakeAll(nd.mine)
		}
	}
	signal(l.dseq, l.dsleepers)
}

// testHookTicketTurn, set only by tests, runs in a surrogate's step for a
// dead ticket-awn episode whose turn has come, before it releases.
var testHookTicketTurn atomic.Pointer[func()] // atomic: surrogates of other tests' arenas may read it

// testHookTicketFlag, set only by tests, runs in a surrogate's step for a
// dead ticket-awn releaser that chose a node handover, after it read
// egress and before it reads the next ticket's array slot.
var testHookTicketFlag func()

// ticketFlagLooks bounds how many looks a surrogate waits for a releaser's
// store to a dead ticket-awn waiter's node flag (about 100 ms at
// surrogateLook) before it gives up on returning that node.
const ticketFlagLooks = 1000

// ticketOf settles a dead ticket-awn arrival whose ticket went
// unrecorded: it drew one if and only if a ticket between egress and
// ingress is named by no journal. With one such ticket and one such dead
// arrival, the ticket is its; a live arrival in the same state makes it
// wait for a later look; two dead ones are ambiguous, once the lock has
// come to an unnamed ticket (held by one of them, so by no live process).
func (a *Arena) ticketOf(index int, gen uint64, egress int64) (uint64, ownerVerdict) {
	lo, hi := uint64(pos(egress)), atomic.LoadUint64(&a.lockBody(index)[lArrive])
	if hi-lo > 1<<16 {
		return 0, ownerAmbiguous // more tickets out than any journal could hold
	}
	named := map[uint64]bool{}
	dead := 0
	for _, j := range a.journals.used() {
		for i := 0; i < len(j); i += journalEntryWords {
			v := stateAt(&j[i])
			if !v.on(kindTicket, index) || atomic.LoadUint64(&j[i+3]) != gen {
				continue
			}
			switch v.phase() {
			case jQueued, jReleasing:
				named[atomic.LoadUint64(&j[i+1])] = true
			case jArriving:
				if !v.adopted() {
					return 0, ownerOther // a live arrival may hold an unnamed ticket
				}
				dead++
			}
		}
	}
	var unnamed []uint64
	for t := lo; t < hi && len(unnamed) < 2; t++ {
		if !named[t] {
			unnamed = append(unnamed, t)
		}
	}
	if pos(int64(atomic.LoadUint64(&a.lockBody(index)[lDepart]))) != int64(lo) {
		return 0, ownerOther // the queue moved while we looked
	}
	switch {
	case len(unnamed) == 0:
		return 0, ownerNone
	case len(unnamed) == 1 && dead == 1:
		return unnamed[0], ownerThis
	case unnamed[0] != lo:
		// Which dead arrival drew which ticket cannot be told; wait until
		// the first such ticket holds the lock, so that the reset that
		// follows takes it from no live process.
		return 0, ownerOther
	}
	return 0, ownerAmbiguous
}
