package ipc

// Recovery of alock: a surrogate takes a dead episode's place in the
// other cohort's queue, and its node goes back once nothing names it.

import (
	"iter"
	"sync/atomic"

	"github.com/sharedmap/sharedmap/internal/wait"
)

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
	for k, j := range js.used() {
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
		for _, j := range a.journals.used() {
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
