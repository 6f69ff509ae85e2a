package ipc

import (
	"fmt"
	"iter"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
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
	for d := range js.all {
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

// returnRetiredNodes gives back to the table the nodes of dead alock
// episodes that are over (jRetired), once no other entry names the node.
// An entry that names it as its predecessor may be a dead successor whose
// surrogate still links behind it, or a live one that still reads it, and
// the tail may name it still; any of them keeps it. It runs in Recover,
// which callers serialize, because Recover is what moves entries between
// journals: outside it, a scan could miss an entry in the middle of a move.
// An entry in another process's journal is marked done for that process to
// free (as an Unlock from another process does).
func (a *Arena) returnRetiredNodes(r *Recovery) {
	js := a.journals
	for k, j := range js.all {
		for i := 0; i < len(j); i += journalEntryWords {
			e := entry{j[i : i+journalEntryWords : i+journalEntryWords]}
			s := e.state()
			if s.phase() != jRetired || s.kind() != kindALock {
				continue
			}
			index, node := s.lock(), atomic.LoadUint64(&e.w[1])
			if index >= a.cfg.Locks || !a.isNode(node) {
				continue
			}
			if a.alockNodeNamed(index, node, e) {
				continue
			}
			if a.returnDeadNode(uint32(node)) {
				r.Nodes++
			}
			if k == js.self {
				a.free(e)
			} else {
				atomic.CompareAndSwapUint64(&e.w[0], uint64(s), s.withPhase(jDone))
			}
		}
	}
}

// alockNodeNamed reports whether node is still named on alock lock index
// by its tail or by an entry other than retired: as an episode's own node
// or as its predecessor, in any phase but over.
func (a *Arena) alockNodeNamed(index int, node uint64, retired entry) bool {
	if tailName(atomic.LoadUint64(&a.lockBody(index)[lWord])) == node {
		return true
	}
	for w, s := range a.alockEntries(index) {
		if &w[0] == &retired.w[0] || s.phase() == jDone || s.phase() == jRetired {
			continue
		}
		if atomic.LoadUint64(&w[1]) == node || atomic.LoadUint64(&w[2]) == node {
			return true
		}
	}
	return false
}

// alockEntries yields every journal entry, of any process, of an alock
// episode on lock index, with the state it was read in.
func (a *Arena) alockEntries(index int) iter.Seq2[[]uint64, entryState] {
	return func(yield func([]uint64, entryState) bool) {
		for _, j := range a.journals.all {
			for i := 0; i < len(j); i += journalEntryWords {
				s := stateAt(&j[i])
				if !s.on(kindALock, index) {
					continue
				}
				if !yield(j[i:i+journalEntryWords:i+journalEntryWords], s) {
					return
				}
			}
		}
	}
}

// queueEntries lists the journal entries of every process for hapax,
// hapax-vw and tidex lock index in generation gen, each with its state.
func (a *Arena) queueEntries(index int, gen uint64) iter.Seq2[[]uint64, entryState] {
	return func(yield func([]uint64, entryState) bool) {
		for _, j := range a.journals.all {
			for i := 0; i < len(j); i += journalEntryWords {
				s := stateAt(&j[i])
				if kind := s.kind(); kind < kindHapax || kind > kindTidex || s.lock() != index || atomic.LoadUint64(&j[i+3]) != gen {
					continue
				}
				if !yield(j[i:i+journalEntryWords:i+journalEntryWords], s) {
					return
				}
			}
		}
	}
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
	for _, j := range a.journals.all {
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
// lock's words, under the feet of its live users (found by
// FuzzRecoverJournal: a damaged ticket-awn entry on a tidex lock made a
// live TryLock's Unlock fail).
func (a *Arena) dropForeignEntries(kinds uint8, live func(int) bool) {
	js := a.journals
	for d, j := range js.all {
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

// recoverTTAS releases TTAS locks whose holder's slot is dead: the owner id
// in the word says who holds.
func (a *Arena) recoverTTAS(live func(int) bool, r *Recovery) {
	for i := range a.cfg.Locks {
		word, _ := wait.Halves(&a.lockBody(i)[lWord])
		v := atomic.LoadUint32(word)
		owner := v >> 1
		if v == 0 || owner == ttasOwnerMask || int(owner)-1 >= len(a.journals.all) || live(int(owner)-1) {
			continue
		}
		if atomic.CompareAndSwapUint32(word, v, 0) {
			wait.WakeAll(word)
			r.Owners++
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

// recoverSeats gives back the seats of hapax-cr lock index that dead
// processes hold. Seats are a count, so it compares the count with the
// seats live processes say they hold: the excess, up to the number of dead
// seat entries, is orphaned. A live process in the middle of taking a seat
// makes the comparison wait for a later pass.
func (a *Arena) recoverSeats(index int, live func(int) bool, r *Recovery) {
	state := &a.lockBody(index)[lRestrict]
	gen := atomic.LoadUint64(&a.lockBody(index)[lGen])
	for try := 0; try < 100; try++ {
		s := atomic.LoadUint64(state)
		var liveSeats, deadSeats uint64
		var dead [][]uint64
		var ours []bool // dead[i] is in this process's journal (an entry it adopted)
		busy := false
		for k, j := range a.journals.all {
			alive := k == a.journals.self || live(k)
			for i := 0; i < len(j); i += journalEntryWords {
				v := stateAt(&j[i])
				if !v.on(kindCR, index) || atomic.LoadUint64(&j[i+3]) != gen {
					continue
				}
				if !v.seat() {
					continue
				}
				switch {
				case !alive || v.adopted():
					deadSeats++
					dead = append(dead, j[i:i+journalEntryWords])
					ours = append(ours, k == a.journals.self)
				case v.phase() == jSeatAsk:
					busy = true
				default:
					liveSeats++
				}
			}
		}
		if busy {
			time.Sleep(10 * time.Microsecond)
			continue
		}
		seated := crState(s).seated()
		give := min(deadSeats, seated-min(seated, liveSeats))
		if !atomic.CompareAndSwapUint64(state, s, s-give) {
			continue
		}
		for i, w := range dead {
			// A dead seat entry that asked for a served ticket's seat and
			// did not get it still has the ticket: it goes on as a ticket.
			v := stateAt(&w[0])
			if t := atomic.LoadUint64(&w[1]); v.phase() == jSeatAsk && t != 0 &&
				crState(atomic.LoadUint64(state)).serving() == t-1 {
				atomic.StoreUint64(&w[1], t-1)
				atomic.StoreUint64(&w[0], v.withPhase(jTicket))
				if !ours[i] {
					a.recoverEntry(w, live, r)
				}
				continue
			}
			if ours[i] {
				// Adopted from a process that died in this slot: this
				// process's entry now, counted free again. (A dead
				// journal's entries carry the adopted bit too when that
				// process had adopted them; they are its, not ours.)
				a.free(entry{w})
			} else {
				atomic.StoreUint64(&w[0], jFree)
			}
		}
		r.Seats += int(give)
		return
	}
	r.Pending++
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
	depart, arrive := atomic.LoadUint64(b.depart), atomic.LoadUint64(b.arrive)
	switch phase {
	case jQueued:
		// A visible waiter that registered in its predecessor's slot is
		// handed the lock there; with journals the releaser stored Depart
		// first, but Depart was read above, before the slot.
		handed := st.registered() && atomic.LoadUint64(a.toSlot(index, pred).value) != pred
		if depart != pred && !handed {
			return false // not its turn yet
		}
		// Releasing, in the journal before the Depart store: a surrogate
		// killed after that store leaves an entry the next survivor
		// finishes (Depart has moved past pred; releaseFor always moves
		// it), not a queued one whose turn never seems to come.
		atomic.StoreUint64(&e.w[0], st.withPhase(jReleasing))
	case jReleasing:
		if depart != pred {
			// The dead process stored Depart: finish the slot's part.
			a.finishRelease(b, kind, value)
			return true
		}
		// Depart still at pred: the release did not happen, or it did and
		// Depart came back to pred since (a Tidex identity reused by
		// pred's process).
		switch a.releasedSince(index, value, depart, arrive, gen, e) {
		case ownerOther:
			return true
		case ownerAmbiguous:
			return false // look again
		}
	case jArriving:
		if depart == arrive {
			return true // the lock is free: the episode is not in the queue
		}
		switch a.ownerOf(index, depart, arrive, gen, e) {
		case ownerOther:
			return false
		case ownerAmbiguous:
			a.reset(index, "")
			return true
		}
		// It holds the lock, after Depart: releasing, as above.
		atomic.StoreUint64(&e.w[2], depart)
		atomic.StoreUint64(&e.w[0], st.withPhase(jReleasing))
	default:
		return true
	}
	a.releaseFor(b, kind, value)
	return true
}

// releaseFor releases lock b on behalf of the episode value, which holds it.
func (a *Arena) releaseFor(b body, kind uint8, value uint64) {
	switch kind {
	case kindHapax, kindHapaxVW:
		// With journals (recovery has them) hapax-vw's release stores
		// Depart before it hands over through the slot, so Depart tells a
		// later look whether this release happened.
		atomic.StoreUint64(b.waited, 1) // a visible successor may have registered
		l := hapax{body: b, visible: kind == kindHapaxVW}
		atomic.CompareAndSwapUint64(b.holder, value, 0)
		l.release(value)
	case kindTidex:
		atomic.CompareAndSwapUint64(b.holder, value, 0)
		atomic.StoreUint64(b.depart, value)
		signal(b.dseq, b.dsleepers)
	}
}

// releasedSince decides, for the releasing episode e (value) of hapax,
// hapax-vw or tidex lock index, whose predecessor is Depart again, whether
// its release happened after all: ownerOther if so (the lock is free, its
// holder word names another episode, or another entry has Depart as its
// predecessor: that one's turn came), ownerAmbiguous while a live arrival
// that has not recorded its place may be the one after Depart, ownerThis if
// e still holds the lock.
func (a *Arena) releasedSince(index int, value, depart, arrive, gen uint64, e entry) ownerVerdict {
	if arrive == depart {
		return ownerOther
	}
	if h := atomic.LoadUint64(&a.lockBody(index)[lHolder]); h != 0 && h != value {
		return ownerOther
	}
	verdict := ownerThis
	for w, v := range a.queueEntries(index, gen) {
		if &w[0] == &e.w[0] {
			continue
		}
		switch v.phase() {
		case jQueued, jReleasing:
			if atomic.LoadUint64(&w[2]) == depart {
				return ownerOther
			}
		case jArriving:
			// A live arrival records its place at once; a dead one is
			// left out: it waits for this episode's release in its own
			// steps (ownerOf), and waiting for it here would deadlock
			// the two.
			if !v.adopted() {
				verdict = ownerAmbiguous
			}
		}
	}
	if atomic.LoadUint64(&a.lockBody(index)[lDepart]) != depart {
		return ownerOther
	}
	return verdict
}

// finishRelease redoes the part of a release that follows the Depart store.
// Repeating it is harmless: a waiter that sees a slot change it does not
// own looks at Depart again.
func (a *Arena) finishRelease(b body, kind uint8, value uint64) {
	s := a.toSlot(b.index, value)
	switch kind {
	case kindHapax:
		atomic.StoreUint64(s.value, value)
		signal(s.seq, s.sleepers)
	case kindHapaxVW:
		if atomic.CompareAndSwapUint64(s.value, value, 0) {
			signal(s.seq, s.sleepers)
		}
	}
	signal(b.dseq, b.dsleepers)
}

// passTicket takes the passive turn of an adopted hapax-cr ticket: when it
// is served, the queue moves on without taking a seat.
func (a *Arena) passTicket(index int, t uint64, phase uint8) bool {
	b := a.lockBody(index)
	state := &b[lRestrict]
	s := atomic.LoadUint64(state)
	serving, arrival := crState(s).serving(), crState(s).arrival()
	if phase == jTicketAsk && arrival == t {
		return true // the ticket CAS never happened
	}
	if phase == jTicketAsk && a.ticketClaimed(index, t) {
		return true // a live process or another entry has that ticket
	}
	if serving != t {
		// Served already (tickets are served in order), or not yet.
		return (t-serving)&crTicketMask >= crTicketMask/2
	}
	if !atomic.CompareAndSwapUint64(state, s, s+crServeOne) {
		return false
	}
	if crState(s + crServeOne).passive() {
		next := a.toSlot(MaxLocks+index, (t+1)&crTicketMask)
		signal(next.seq, next.sleepers)
	}
	return true
}

// ticketClaimed reports whether an entry other than an adopted one holds
// passive ticket t of lock index.
func (a *Arena) ticketClaimed(index int, t uint64) bool {
	for _, j := range a.journals.all {
		for i := 0; i < len(j); i += journalEntryWords {
			v := stateAt(&j[i])
			if !v.adopted() && v.on(kindCR, index) &&
				(v.phase() == jTicket || v.phase() == jTicketAsk) && atomic.LoadUint64(&j[i+1]) == t {
				return true
			}
		}
	}
	return false
}

// stepTicket is stepAdopted for a ticket-awn episode holding ticket t.
func (a *Arena) stepTicket(e entry, s uint64, index int, t, gen uint64) bool {
	l := openTicketAWN(a, index).(*ticketAWN)
	egress := l.egress()
	st := entryState(s)
	switch st.phase() {
	case jArriving:
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
	case jQueued:
		if pos(egress) != int64(t) {
			return pos(egress) > int64(t) // not its turn yet (or voided)
		}
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
	case jReleasing:
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
	return true
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

// alockSurrogate is an alock view for taking a dead process's turns: of the
// other cohort (a dead episode's descriptor is a node of the table), and
// never claiming the lock's home.
func (a *Arena) alockSurrogate(index int) *alock {
	b := a.lockBody(index)
	aseq, asleepers := wait.Halves(&b[lDepartQ])
	return &alock{a: a, index: index, home: &b[lArrive], holder: &b[lHolder], gen: &b[lGen],
		tailR: &b[lWord], tailL: &b[lRestrict], victim: &b[lWaited], aseq: aseq, asleepers: asleepers,
		budgetOther: DefaultALockBudgetRemote}
}

// stepALock is stepAdopted for an alock episode: name (a node, or a home
// descriptor with alockHomeEpisode set) and the tail it expected to follow.
func (a *Arena) stepALock(e entry, s uint64, index int, name, pred, gen uint64) bool {
	l := a.alockSurrogate(index)
	if name&alockHomeEpisode != 0 {
		// The home died, and its whole cohort with it (its descriptors
		// were in its memory): lower the home's flag and end what it held.
		if h := atomic.LoadUint64(l.holder); h&alockHomeEpisode != 0 {
			atomic.CompareAndSwapUint64(l.holder, h, 0)
		}
		atomic.StoreUint64(l.tailL, 0)
		signal(l.aseq, l.asleepers)
		return true
	}
	if !a.isNode(name) || pred > uint64(a.cfg.AWNNodes) {
		return true // names no node: damaged
	}
	q := l.nodeQueued(name)
	st := entryState(s)
	switch st.phase() {
	case jArriving:
		// Did its CAS into the tail happen? Then the tail still names it,
		// or a successor took the tail from it, and such a successor wrote
		// this name as the tail it expected before its CAS, and waits (it
		// cannot be handed the lock past a dead predecessor). Tail first,
		// journals second, so a successor's CAS in between is seen.
		switch a.alockEntered(index, gen, name, nil) {
		case alockNo:
			return retire(e, st) // it never entered the queue
		case alockWait:
			return false
		}
		atomic.StoreUint64(&e.w[0], st.withPhase(jQueued))
		return false
	case jQueued:
		if pred == 0 {
			// Head of an empty queue: it arbitrates (it may have died
			// before saying so).
			atomic.CompareAndSwapUint32(q.budget, budgetWaiting, 0)
		} else {
			// Link it behind its predecessor if it died before doing so: the
			// predecessor's release waits for that link. Read the link, then
			// the budget. Seen unlinked and still waiting, the predecessor
			// cannot have released (nobody else links to it), so its node
			// is not reused before the CAS. A predecessor that released to
			// it and whose node was reused since has a fresh link word
			// (zero), but then the budget read after it shows the
			// handover, and a link there would corrupt the new episode's.
			link := l.nodeQueued(pred).next
			if atomic.LoadUint64(link) == 0 && atomic.LoadUint32(q.budget) == budgetWaiting {
				atomic.CompareAndSwapUint64(link, 0, name)
			}
		}
		switch b := atomic.LoadUint32(q.budget); b {
		case budgetWaiting:
			return false // not its turn
		case 0:
			atomic.StoreUint64(l.victim, alockVictimRemote)
			signal(l.aseq, l.asleepers)
			atomic.StoreUint64(&e.w[0], st.withPhase(jArbitrate))
			return false
		}
		return a.alockReleaseFor(l, q, gen) && retire(e, st)
	case jArbitrate:
		if wanting(atomic.LoadUint64(l.tailL), atomic.LoadUint64(l.gen)) && atomic.LoadUint64(l.victim) == alockVictimRemote {
			return false // the home cohort goes first
		}
		atomic.StoreUint32(q.budget, uint32(l.budgetOther))
		atomic.StoreUint64(&e.w[0], st.withPhase(jQueued))
		return a.alockReleaseFor(l, q, gen) && retire(e, st)
	case jReleasing:
		return a.alockReleaseFor(l, q, gen) && retire(e, st)
	case jRetired:
		return false // Recover gives the node back
	}
	return true
}

// retire marks a dead alock episode over: its entry stays, naming the
// node, until Recover finds nothing else naming it and gives it back to the
// table (returnRetiredNodes). It reports false: the entry is not to be
// freed yet.
func retire(e entry, s entryState) bool {
	atomic.StoreUint64(&e.w[0], s.withPhase(jRetired))
	return false
}

// alockReleaseFor ends the dead episode q, which holds alock l or died
// releasing it: it empties the queue, or hands q's successor the budget,
// unless that was done. It reports false while the successor has not yet
// linked (it may be dead too, and linked by its own surrogate).
func (a *Arena) alockReleaseFor(l *alock, q queued, gen uint64) bool {
	atomic.CompareAndSwapUint64(l.holder, q.name, 0)
	if atomic.CompareAndSwapUint64(l.tailR, tailWord(gen, q.name), tailWord(gen, 0)) {
		signal(l.aseq, l.asleepers)
		return true
	}
	next := atomic.LoadUint64(q.next)
	if !a.isNode(next) {
		// No successor linked, and the tail names another: one took the
		// tail from q and has yet to link (it expected q in its journal
		// before its CAS), or q's own release emptied the queue before
		// its process, or an earlier surrogate, died. Without the second
		// case's answer the episode would never end. A scan can miss an
		// entry that a Recover elsewhere moves between journals while it
		// reads them (copy first, then free: a scan that reads the copy's
		// place before the copy and the original's after the free), but
		// not in two scans in a row unless the entry moves twice.
		gen := atomic.LoadUint64(l.gen)
		for scan := range 2 {
			if scan == 1 && testHookBetweenScans != nil {
				testHookBetweenScans()
			}
			if a.alockFollowers(l.index, gen, q.name, nil) != alockNo || atomic.LoadUint64(q.next) != 0 {
				return false
			}
		}
		return true
	}
	succ := l.nodeQueued(next)
	// Handed over already? A successor still waiting, whose journal still
	// names q as its predecessor, was not: q's node belonged to the dead
	// process, so no later episode reuses it. Budget first, journal second.
	if atomic.LoadUint32(succ.budget) == budgetWaiting {
		switch a.alockFollowers(l.index, atomic.LoadUint64(l.gen), q.name, nil) {
		case alockWait:
			return false
		case alockNo:
			return true
		}
		budget := atomic.LoadUint32(q.budget)
		if budget == budgetWaiting || budget == 0 {
			budget = 1 // hand over for arbitration
		}
		l.handOver(succ, budget-1)
	}
	return true
}

// testHookBetweenScans, set only by tests, runs between the two scans for
// followers of a dead alock episode whose release may have emptied the
// queue.
var testHookBetweenScans func()

type alockVerdict int

const (
	alockNo   alockVerdict = iota
	alockYes               // it did
	alockWait              // a live process is in the step that would tell
)

// alockEntered decides whether the other cohort's episode name, whose
// arrival may have died around its CAS into the tail, entered the queue:
// the tail still names it, or a successor took the tail from it. Tail
// first, journals second, so that a successor's CAS in between is seen.
func (a *Arena) alockEntered(index int, gen, name uint64, seen map[uint64]bool) alockVerdict {
	if atomic.LoadUint64(&a.lockBody(index)[lWord]) == tailWord(gen, name) {
		return alockYes
	}
	return a.alockFollowers(index, gen, name, seen)
}

// alockFollowers looks for an episode on lock index that entered the queue
// behind name: one still waiting whose journal expected name as the tail
// (it cannot have been handed the lock past a dead predecessor, and name,
// a dead process's node, is not reused meanwhile). A live arrival that
// expects name may or may not have entered: look again later. A dead one
// entered if its own successor says so. seen (nil at the top) holds the
// episodes this question has already asked about: each is asked once, so
// damaged journals whose entries expect each other (or themselves) end the
// search instead of making it exponential.
func (a *Arena) alockFollowers(index int, gen, name uint64, seen map[uint64]bool) alockVerdict {
	if seen == nil {
		seen = map[uint64]bool{}
	}
	seen[name] = true
	verdict := alockNo
	for w, v := range a.alockEntries(index) {
		own := atomic.LoadUint64(&w[1])
		if atomic.LoadUint64(&w[3]) != gen || atomic.LoadUint64(&w[2]) != name || !a.isNode(own) {
			continue
		}
		switch v.phase() {
		case jArriving:
			if !v.adopted() {
				verdict = alockWait
				continue
			}
			if seen[own] {
				continue // asked already, and it did not say yes
			}
			if a.alockEntered(index, gen, own, seen) == alockYes {
				return alockYes
			}
		case jQueued:
			if atomic.LoadUint32(a.alockSurrogate(index).nodeQueued(own).budget) == budgetWaiting {
				return alockYes
			}
		}
	}
	return verdict
}

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
	for _, j := range a.journals.all {
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

type ownerVerdict int

const (
	ownerOther     ownerVerdict = iota // someone else holds, or it cannot be told yet
	ownerThis                          // the entry asked about holds the lock
	ownerAmbiguous                     // only dead episodes can hold it, and which cannot be told
	ownerNone                          // the entry asked about never joined the queue
)

// ownerOf decides whether the arriving episode e (its predecessor unknown)
// holds lock index, whose Depart is depart and Arrive arrive (not equal).
// The holder is the episode whose predecessor is Depart. If no journal
// names Depart as a predecessor, the holder is one whose swap went
// unrecorded: an arriving entry that did swap, shown by being Arrive or by
// some entry naming it as predecessor. A live process still arriving may be
// that holder, so then nothing can be told yet.
func (a *Arena) ownerOf(index int, depart, arrive, gen uint64, e entry) ownerVerdict {
	type cand struct {
		value uint64
		live  bool
		this  bool
	}
	var arriving []cand
	preds := map[uint64]bool{}
	for w, v := range a.queueEntries(index, gen) {
		switch v.phase() {
		case jQueued, jReleasing:
			p := atomic.LoadUint64(&w[2])
			if p == depart {
				return ownerOther
			}
			preds[p] = true
		case jArriving:
			// Entries nobody drives (adopted ones) are the dead
			// candidates; any other may be a live process's.
			arriving = append(arriving, cand{value: atomic.LoadUint64(&w[1]),
				live: !v.adopted(), this: &w[0] == &e.w[0]})
		}
	}
	var swapped []cand
	for _, c := range arriving {
		if c.live && !c.this {
			return ownerOther // a live arrival may be the holder: look again later
		}
		if c.value == arrive || preds[c.value] {
			swapped = append(swapped, c)
		}
	}
	if atomic.LoadUint64(&a.lockBody(index)[lDepart]) != depart {
		return ownerOther
	}
	switch {
	case len(swapped) == 1 && swapped[0].this:
		return ownerThis
	case len(swapped) > 1:
		return ownerAmbiguous
	}
	return ownerOther
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
