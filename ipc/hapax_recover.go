package ipc

// Recovery of the locks whose queue is a pair of Arrive and Depart words:
// hapax, hapax-vw and tidex. An adopted episode waits for Depart to reach
// its predecessor, then releases as its process would have.

import (
	"iter"
	"sync/atomic"
)

// queueEntries lists the journal entries of every process for hapax,
// hapax-vw and tidex lock index in generation gen, each with its state.
func (a *Arena) queueEntries(index int, gen uint64) iter.Seq2[[]uint64, entryState] {
	return func(yield func([]uint64, entryState) bool) {
		for _, j := range a.journals.used() {
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

// stepQueue is stepAdopted for a hapax, hapax-vw or tidex episode: value,
// queued behind pred, on lock b.
func (a *Arena) stepQueue(e entry, st entryState, b body, value, pred, gen uint64) bool {
	phase, kind, index := st.phase(), st.kind(), b.index
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
