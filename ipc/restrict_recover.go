package ipc

// Recovery of hapax-cr's restriction: seats dead processes held go back,
// and passive tickets they drew are served and passed on.

import (
	"sync/atomic"
	"time"
)

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
		for k, j := range a.journals.used() {
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
	for _, j := range a.journals.used() {
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
