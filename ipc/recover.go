package ipc

// What the recovery of every lock shares: the Recover pass that adopts
// the episodes of dead processes, the surrogate goroutine that takes their
// turns, and the node table's give-back. Each algorithm's own step sits
// beside the lock, in <lock>_recover.go.

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Recovery says what one Recover pass did.
type Recovery struct {
	// Adopted counts queue episodes of dead processes this process took
	// over: a goroutine of this process takes their turns and hands the
	// lock on (surrogate completion).
	Adopted int
	// Seats counts hapax-cr seats that dead processes held, given back.
	Seats int
	// Owners counts TTAS locks whose dead holder was released.
	Owners int
	// Cleared counts dead entries that needed nothing: finished, never
	// queued, voided by a reset, or free but damaged (bits no state has).
	Cleared int
	// Resets counts locks reset by generation because their queue could not
	// be read (two dead processes died in the same few instructions).
	Resets int
	// Pending counts entries left for a later pass: this process's journal
	// was full, or a live process was in the middle of a step.
	Pending int
	// Nodes counts ticket-awn and alock nodes of dead waiters given back to
	// the node table: alock nodes once their episodes were over and
	// nothing named them any more, and nodes their waiters died holding
	// before making them findable; ticket-awn nodes that the surrogate
	// gives back as it takes their turns are not counted.
	Nodes int
}

// Recover finishes the lock episodes of processes that are gone. live
// reports whether the process of a journal slot is alive; this process's
// own slot must be live. algorithm is the one every process uses on these
// locks. Episodes of the dead are adopted into this process's journal and a
// goroutine of this process takes their turns: a dead waiter's predecessor
// still hands it the lock, and the goroutine passes it on, exactly as the
// dead process would have; a dead holder's lock is released on its behalf.
// Nothing a live process holds or waits for is touched. A lock is reset by
// generation only when its queue cannot be read, and then only when no live
// process can be its holder.
//
// Callers serialize Recover across processes (the map does it under the
// registry's recovery lock); it returns once the dead journals are taken
// over, not once the adopted turns are taken.
func (a *Arena) Recover(algorithm string, live func(slot int) bool) (Recovery, error) {
	var r Recovery
	js := a.journals
	if js == nil {
		return r, ErrNoJournal
	}
	if algorithm == "ttas" {
		a.recoverTTAS(live, &r)
	}
	if alg, err := Lookup(algorithm); err == nil {
		a.dropForeignEntries(alg.kinds, live)
	}
	// Seat entries adopted with this process's slot (SetJournals) count as
	// dead ones.
	own := js.all[js.self]
	for i := 0; i < len(own); i += journalEntryWords {
		if v := stateAt(&own[i]); v.adopted() && v.seat() {
			a.recoverSeats(v.lock(), live, &r)
		}
	}
	for d := range js.used() {
		if d == js.self || live(d) {
			continue
		}
		j := js.all[d]
		for i := 0; i < len(j); i += journalEntryWords {
			a.recoverEntry(j[i:i+journalEntryWords:i+journalEntryWords], live, &r)
		}
	}
	a.returnRetiredNodes(&r)
	a.returnUnfindableNodes(&r)
	a.startSurrogate()
	return r, nil
}

// isNode reports whether n names a node of the table (nodes are 1-based).
func (a *Arena) isNode(n uint64) bool { return n != 0 && n <= uint64(a.cfg.AWNNodes) }

// inUseByGone reports whether a node's owner word says it is in use (not
// pooled idle, not given back, not voided) by a process that is gone.
func inUseByGone(owner uint64) bool {
	return owner != returnedNode && owner&(idleNode|voidedNode) == 0 && processGone(owner)
}

// voidDeadNode marks node, if a process that is gone has it in use, as one
// that is never to be given back (see voidedNode).
func (a *Arena) voidDeadNode(node uint32) {
	owner := a.awnNode(node).owner
	if o := atomic.LoadUint64(owner); inUseByGone(o) {
		atomic.CompareAndSwapUint64(owner, o, o|voidedNode)
	}
}

// returnUnfindableNodes gives back to the table the nodes that processes
// now gone drew and never made findable: killed after taking the node and
// before publishing it in the lock's array (ticket-awn) or naming it in
// their journal entry (alock), no recovery step ever meets them. A node
// qualifies if, in this order:
//
//   - its owner is gone (read first: a dead owner names its node nowhere
//     new, so what the scans below miss stays unnamed);
//   - it is stamped (stampNode) with a lock whose generation is still the
//     stamp's, before and after the scans: a reset leaves releasers of the
//     old queue that may still write to a node they saw there, so nodes of
//     voided queues are kept, as are unstamped ones (drawn by a binary from
//     before stamps, or killed before stamping);
//   - it is not marked nodeInArray: a ticket-awn node withdrawn from the
//     array by anyone but its granted waiter or a surrogate that saw the
//     flag store land (a Reset's clear, a surrogate that gave up waiting)
//     may still get a releaser's late flag store;
//   - no array entry, alock tail or alock journal entry (in any phase, of
//     any process) names it: a named node is the other recovery steps'
//     (returnRetiredNodes, the surrogate's stepTicket), which know when
//     its last writer is done.
//
// A node voided (voidDeadNode) is never given back. Recover runs it, as
// callers serialize Recover: entries move between journals only there, so
// the journal scan misses none.
func (a *Arena) returnUnfindableNodes(r *Recovery) {
	type candidate struct {
		node  uint32
		owner uint64
		index int
		gen   uint64
	}
	var found []candidate
	gone := map[uint64]bool{}
	drawn := min(atomic.LoadUint64(&a.w[hAWNCursor]), uint64(a.cfg.AWNNodes))
	for node := uint32(1); uint64(node) <= drawn; node++ {
		o := atomic.LoadUint64(a.awnNode(node).owner)
		if o == returnedNode || o&(idleNode|voidedNode) != 0 || o == 0 {
			continue
		}
		dead, asked := gone[o]
		if !asked {
			dead = processGone(o)
			gone[o] = dead
		}
		if !dead {
			continue
		}
		off := a.nodeOffset(node)
		lock1, gen := atomic.LoadUint64(&a.w[off+nodeLock]), atomic.LoadUint64(&a.w[off+nodeGen])
		if lock1&nodeInArray != 0 || lock1 == 0 || lock1 > uint64(a.cfg.Locks) {
			continue // perhaps still reachable from a releaser that read the array
		}
		index := int(lock1 - 1)
		if atomic.LoadUint64(&a.lockBody(index)[lGen]) != gen {
			continue
		}
		found = append(found, candidate{node, o, index, gen})
	}
	if len(found) == 0 {
		return
	}
	named := a.namedNodes()
	for _, c := range found {
		if named[c.node] || atomic.LoadUint64(&a.lockBody(c.index)[lGen]) != c.gen {
			continue
		}
		if atomic.CompareAndSwapUint64(a.awnNode(c.node).owner, c.owner, returnedNode) {
			r.Nodes++
		}
	}
}

// namedNodes is the set of nodes that some ticket-awn array entry, alock
// tail or alock journal entry names, whatever its lock, generation or
// phase.
func (a *Arena) namedNodes() map[uint32]bool {
	named := map[uint32]bool{}
	name := func(n uint64) {
		if a.isNode(n) {
			named[uint32(n)] = true
		}
	}
	for i := range a.cfg.Locks {
		b := a.lockBody(i)
		name(tailName(atomic.LoadUint64(&b[lWord])))
		name(tailName(atomic.LoadUint64(&b[lRestrict])))
		w := a.awnArray(i)
		for k := range w.n {
			name(uint64(atomic.LoadUint32(w.at(k))))
		}
	}
	for _, j := range a.journals.used() {
		for i := 0; i < len(j); i += journalEntryWords {
			if s := stateAt(&j[i]); s != jFree && s.kind() == kindALock {
				name(atomic.LoadUint64(&j[i+1]))
				name(atomic.LoadUint64(&j[i+2]))
			}
		}
	}
	return named
}

// returnDeadNode gives node back to the table if it is in use by a process
// that is gone. A node pooled idle, given back, or owned by a live process
// (a damaged entry naming someone else's node) is left alone.
func (a *Arena) returnDeadNode(node uint32) bool {
	return a.returnDeadNodeOf(node, atomic.LoadUint64(a.awnNode(node).owner))
}

// returnDeadNodeOf is returnDeadNode for a caller that read the node's
// owner word, o, earlier: it gives the node back only if the word still
// says o, so a node given back and taken by another waiter since is left
// to that waiter.
func (a *Arena) returnDeadNodeOf(node uint32, o uint64) bool {
	return inUseByGone(o) && atomic.CompareAndSwapUint64(a.awnNode(node).owner, o, returnedNode)
}

// dropForeignEntries frees the entries of this process's adopted ones and
// of dead processes' journals that name a kind of episode the algorithm
// in use never writes (kinds, a mask of kinds): damage. Taken as what
// they say, a surrogate would step another algorithm's procedure on the
// lock's words, under the feet of its live users: a damaged ticket-awn
// entry on a tidex lock would make a live TryLock's Unlock fail
// (FuzzRecoverJournal holds this).
func (a *Arena) dropForeignEntries(kinds uint8, live func(int) bool) {
	js := a.journals
	for d, j := range js.used() {
		if d != js.self && live(d) {
			continue
		}
		for i := 0; i < len(j); i += journalEntryWords {
			s := stateAt(&j[i])
			if !a.namesLock(s) || kinds&(1<<s.kind()) != 0 || (d == js.self && !s.adopted()) {
				continue
			}
			if atomic.CompareAndSwapUint64(&j[i], uint64(s), jFree) && d == js.self {
				a.unreserve(1) // as driveAdopted frees what it finished
			}
		}
	}
}

// recoverEntry handles one entry of a dead process's journal.
func (a *Arena) recoverEntry(e []uint64, live func(int) bool, r *Recovery) {
	s := stateAt(&e[0])
	phase, index := s.phase(), s.lock()
	if phase == jFree {
		if !s.bare() { // damage (CheckJournal reports it): a free entry holds nothing
			atomic.StoreUint64(&e[0], jFree)
			r.Cleared++
		}
		return
	}
	if !a.namesLock(s) || atomic.LoadUint64(&e[3]) != atomic.LoadUint64(&a.lockBody(index)[lGen]) {
		atomic.StoreUint64(&e[0], jFree)
		r.Cleared++
		return
	}
	if s.seat() {
		a.recoverSeats(index, live, r)
		return
	}
	// A queue episode: adopt it; the surrogate decides, as the queue moves,
	// when it is its turn, or that it never was in the queue.
	if !a.reserve(1, time.Time{}) {
		r.Pending++
		return
	}
	own := a.claim()
	if !own.ok() {
		r.Pending++
		return
	}
	own.set(phase|adopted, s.kind(), index, atomic.LoadUint64(&e[1]), atomic.LoadUint64(&e[2]), atomic.LoadUint64(&e[3]))
	if s.registered() {
		own.markRegistered() // its turn may show in its slot before the Depart this step read
	}
	atomic.StoreUint64(&e[0], jFree)
	r.Adopted++
}

// startSurrogate starts the goroutine that drives this process's adopted
// entries, unless it runs already.
func (a *Arena) startSurrogate() {
	a.mu.Lock()
	a.surrogateKicks++
	if a.surrogates {
		a.mu.Unlock()
		return
	}
	a.surrogates = true
	a.mu.Unlock()
	a.spawn(func() {
		stopped := false // the flag already cleared, under mu with the decision
		defer func() {
			if !stopped {
				a.mu.Lock()
				a.surrogates = false
				a.mu.Unlock()
			}
		}()
		for !a.closing.Load() {
			a.mu.Lock()
			kicks := a.surrogateKicks
			a.mu.Unlock()
			if a.driveAdopted() == 0 {
				if hook := testHookSurrogateIdle.Load(); hook != nil {
					(*hook)()
				}
				// Done, unless a Recover adopted more since our look and,
				// seeing us running, left them to us.
				a.mu.Lock()
				if a.surrogateKicks == kicks {
					a.surrogates = false
					stopped = true
					a.mu.Unlock()
					return
				}
				a.mu.Unlock()
				continue
			}
			time.Sleep(surrogateLook)
		}
	})
}

// testHookSurrogateIdle, set only by tests, runs when the surrogate has
// found nothing left to drive, before it decides to stop.
var testHookSurrogateIdle atomic.Pointer[func()]

// surrogateLook is how often the surrogate looks at the queues it waits in.
const surrogateLook = 100 * time.Microsecond

// driveAdopted makes one step on every adopted entry of this process's
// journal and returns how many remain.
func (a *Arena) driveAdopted() int {
	own := a.journals.all[a.journals.self]
	left := 0
	for i := 0; i < len(own); i += journalEntryWords {
		e := entry{own[i : i+journalEntryWords : i+journalEntryWords]}
		s := e.state()
		switch {
		case !s.adopted() || s.seat() || s.phase() == jRetired:
			continue // seats and retired nodes are given back by Recover, not by turns
		case s.phase() == jDone:
			// Another process's Recover gave its node back: sweepDone frees
			// it. Freeing it here too could count it free twice.
			continue
		}
		a.steps.Lock() // see Arena.steps
		over := a.stepAdopted(e, uint64(s))
		a.steps.Unlock()
		if over {
			a.free(e)
		} else {
			left++
		}
	}
	return left
}

// stepAdopted takes the turn of an adopted episode if it has come, and
// reports whether the episode is over.
func (a *Arena) stepAdopted(e entry, s uint64) bool {
	st := entryState(s)
	phase, kind, index := st.phase(), st.kind(), st.lock()
	value, pred, gen := atomic.LoadUint64(&e.w[1]), atomic.LoadUint64(&e.w[2]), atomic.LoadUint64(&e.w[3])
	b := newBody(a, index)
	if atomic.LoadUint64(b.gen) != gen {
		return true // reset: the episode is void
	}
	switch kind {
	case kindCR:
		return a.passTicket(index, value, phase)
	case kindTicket:
		return a.stepTicket(e, s, index, value, gen)
	case kindALock:
		return a.stepALock(e, s, index, value, pred, gen)
	}
	return a.stepQueue(e, st, b, value, pred, gen)
}

// CheckJournal returns a problem for each entry of journal j (one
// process's, from its registry slot) that no lock episode of this arena
// could have written: bits no state has, a phase, kind or lock that does
// not exist, or a generation its lock has not reached. It only reads; such
// entries are dropped by Recover when their process is dead. Finished
// entries of a live process are not problems.
func (a *Arena) CheckJournal(j []uint64) []error {
	var out []error
	for i := 0; i+journalEntryWords <= len(j); i += journalEntryWords {
		s := stateAt(&j[i])
		phase := s.phase()
		if phase == jFree || phase == jClaimed || phase == jDone {
			if !s.bare() && phase == jFree {
				out = append(out, fmt.Errorf("journal entry %d: free, with bits %#x set", i/journalEntryWords, s))
			}
			continue
		}
		if s.stray() || !a.namesLock(s) {
			out = append(out, fmt.Errorf("journal entry %d: state %#x names no lock episode", i/journalEntryWords, s))
			continue
		}
		index := s.lock()
		if g, now := atomic.LoadUint64(&j[i+3]), atomic.LoadUint64(&a.lockBody(index)[lGen]); g > now {
			out = append(out, fmt.Errorf("journal entry %d: lock %d generation %d, but the lock is at %d", i/journalEntryWords, index, g, now))
		}
	}
	return out
}
