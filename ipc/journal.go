package ipc

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/internal/wait"
)

// A journal is one process's record, in the shared file, of the lock
// episodes it is in: for each, the lock, the episode's own value and its
// predecessor's, and how far it got. A process that dies leaves its journal
// behind, and a survivor uses it to finish the dead process's episodes
// (Arena.Recover): a FIFO queue cannot skip a member, so a dead waiter must
// still take its turn and hand the lock on, and a dead holder must release.
//
// Every step is written before it is taken, so a dead process's entry says
// at most one thing it may or may not have done. The one the journal cannot
// settle by itself is the swap into Arrive, whose result (the predecessor)
// arrives with it: an entry that died there says "arriving", and recovery
// decides from the other entries whether it is in the queue (see ownerOf).
//
// Entry layout, journalEntryWords words: the state word (entryState), own
// value (hapax, Tidex identity, passive ticket), predecessor value, the
// lock's generation when the episode began.
const (
	journalEntryWords = 4

	// Phases.
	jFree      = 0
	jClaimed   = 1  // taken by its process; nothing done yet
	jArriving  = 2  // value and generation written; the swap may have happened
	jQueued    = 3  // predecessor known: waiting, or holding once Depart == pred
	jReleasing = 4  // unlock begun: Depart store (and the slot store) may have happened
	jDone      = 5  // released by another process's Unlock; the owner frees it
	jSeatAsk   = 6  // hapax-cr: the seat CAS may have happened
	jSeated    = 7  // hapax-cr: holds a seat
	jTicketAsk = 8  // hapax-cr: the passive ticket CAS (for value) may have happened
	jTicket    = 9  // hapax-cr: holds passive ticket value
	jSeatHold  = 10 // hapax-cr: holds a seat and the lock (one such entry per lock)
	jArbitrate = 11 // alock, adopted: the surrogate has raised its claim (victim) and arbitrates
	jRetired   = 12 // alock, adopted: the episode is over; its node goes back once no entry names it (Recover)

	// Kinds.
	kindHapax   = 1
	kindHapaxVW = 2
	kindTidex   = 3
	kindCR      = 4
	kindTicket  = 5 // ticket-awn: value is the ticket; the predecessor is implied
	kindALock   = 6 // alock: value is the episode (the holder word's form), pred the expected tail
	kindLast    = kindALock
)

// The state word's fields (docs/FORMAT.md, "Journal entry"):
//
//	bits 0..6    phase
//	bit  7       adopted
//	bits 8..15   kind
//	bits 16..39  lock index in the arena
//	bit  40      registered
//
// packState encodes a state word and entryState decodes one.
const (
	phaseMask = 0x7f // bits 0..6: the phase

	// adopted marks an entry a survivor took over from a dead process's
	// journal: its own process does not drive it, its surrogate does.
	adopted = 0x80

	kindShift = 8  // bits 8..15: the kind
	lockShift = 16 // bits 16..39: the lock index
	lockMask  = 1<<24 - 1

	// registered marks a Hapax-VW waiter that registered in its
	// predecessor's waiting slot.
	registered = 1 << 40
	stateBits  = 41 // no state sets a bit from here up
)

// packState encodes an entry's state word: phase (its low 7 bits, and
// adopted), kind and lock.
func packState(phase, kind uint8, lock int) uint64 {
	return uint64(phase) | uint64(kind)<<kindShift | uint64(lock)<<lockShift
}

// An entryState is an entry's state word, decoded by its methods.
type entryState uint64

// stateAt loads the state word at p.
func stateAt(p *uint64) entryState { return entryState(atomic.LoadUint64(p)) }

// phase is the entry's phase, without the adopted bit.
func (s entryState) phase() uint8 { return uint8(s & phaseMask) }

// adopted reports whether a survivor took the entry over from a dead
// process's journal.
func (s entryState) adopted() bool { return s&adopted != 0 }

// kind is the kind of lock the episode is on.
func (s entryState) kind() uint8 { return uint8(s >> kindShift) }

// lock is the arena index of the lock the episode is on.
func (s entryState) lock() int { return int(s >> lockShift & lockMask) }

// registered reports whether a Hapax-VW waiter registered in its
// predecessor's slot.
func (s entryState) registered() bool { return s&registered != 0 }

// on reports whether the episode is of kind on lock index.
func (s entryState) on(kind uint8, index int) bool { return s.kind() == kind && s.lock() == index }

// bare reports whether s holds nothing but a phase and the adopted bit,
// as a free entry's state must.
func (s entryState) bare() bool { return s&^(phaseMask|adopted) == 0 }

// stray reports whether s sets a bit that no state sets.
func (s entryState) stray() bool { return s>>stateBits != 0 }

// withPhase is the state word s moved to phase, keeping every other field
// and the adopted bit.
func (s entryState) withPhase(phase uint8) uint64 { return uint64(s)&^phaseMask | uint64(phase) }

// seat reports whether s holds (or may hold) a hapax-cr seat.
func (s entryState) seat() bool {
	p := s.phase()
	return s.kind() == kindCR && (p == jSeatAsk || p == jSeated || p == jSeatHold)
}

// used is the journals that may hold anything (see inUse), this
// process's own among them, indexed as all.
func (js *journals) used() [][]uint64 {
	if js.inUse == nil {
		return js.all
	}
	return js.all[:min(max(js.inUse(), js.self+1), len(js.all))]
}

// JournalWords is the size of a journal with room for n episodes at once.
func JournalWords(n int) int { return n * journalEntryWords }

// ErrNoJournal: Recover was called on an arena without journals.
var ErrNoJournal = errors.New("ipc: no lock journals: recovery needs SetJournals")

// journals is every process's journal, as the file holds them, and this
// process's own.
type journals struct {
	all  [][]uint64
	self int
	// inUse, if set, is how many journals, from the first, may hold
	// anything (the registry's high-water mark): the scans read only
	// those. It may grow while the arena is in use, never shrink.
	inUse func() int

	// Entries of this process's journal it may still claim, as a count, so
	// that an episode that needs two (hapax-cr's seat and its inner lock's
	// turn) reserves both at once and goroutines waiting for entries never
	// hold some while they wait for more.
	free    atomic.Int64 // entries neither reserved nor in use
	mu      sync.Mutex   // cond waits on it
	cond    sync.Cond
	waiting atomic.Int32 // goroutines in reserve's slow path: only then do frees signal

	adopted int // entries SetJournals found left in this process's slot
}

// SetJournals gives the arena every process's journal (all, indexed by
// process slot; each JournalWords(n) long) and says which is this
// process's. From then on every episode of this process on a journaled
// algorithm (the Hapax locks, hapax-cr, the cohort locks over them, Tidex;
// TTAS keeps its owner in the lock word) is written to its journal, and
// Recover can finish the episodes of processes that died. Every process
// using the locks must do the same, or recovery could mistake whose turn it
// is. Call it before the first lock is used.
func (a *Arena) SetJournals(all [][]uint64, self int) error {
	return a.SetJournalsInUse(all, self, nil)
}

// SetJournalsInUse is SetJournals for journals of which only the first
// inUse() may hold anything: those of processes that ever used the locks
// (a registry's slots up to its high-water mark), the rest being zero.
// Scans of the journals (an Unlock's search for another process's episode,
// Parties, Recover) read only those, so that room for many processes
// costs nothing until they come. inUse() may grow, never shrink, and
// exceeds self.
func (a *Arena) SetJournalsInUse(all [][]uint64, self int, inUse func() int) error {
	if self < 0 || self >= len(all) {
		return fmt.Errorf("%w: journal %d of %d", ErrBadConfig, self, len(all))
	}
	if self+1 > ttasOwnerMask {
		return fmt.Errorf("%w: %d journals; at most %d", ErrBadConfig, len(all), ttasOwnerMask)
	}
	for i, j := range all {
		if len(j) < journalEntryWords || len(j)%journalEntryWords != 0 {
			return fmt.Errorf("%w: journal %d has %d words", ErrBadConfig, i, len(j))
		}
	}
	js := &journals{all: all, self: self, inUse: inUse}
	js.cond.L = &js.mu
	// Entries already there were left by a process that died in this slot
	// (a slot is reused only when its process is gone): they are adopted,
	// for this process's Recover to finish.
	own := all[self]
	for e := 0; e < len(own); e += journalEntryWords {
		switch s := stateAt(&own[e]); {
		case !a.namesLock(s):
			// Nothing to finish, or a damaged entry that names no lock of
			// this arena: there is nothing it could hold.
			atomic.StoreUint64(&own[e], jFree)
			js.free.Add(1)
		default:
			atomic.StoreUint64(&own[e], uint64(s)|adopted)
			js.adopted++
		}
	}
	a.journals = js
	a.owner = uint32(self + 1)
	return nil
}

// ReleaseInherited ends what the previous occupant of this process's slot
// left on the locks, which no pass of Recover sees as a dead process's: a
// slot is handed on once its process is gone, having closed or died, and
// its owner id is then this process's. It releases the TTAS locks (with
// algorithm "ttas") that the slot's owner id holds, and reports whether
// SetJournals adopted episodes from the slot's journal, which only a
// Recover of this process finishes: the caller should run one. Call it
// after SetJournals and before this process takes any lock.
func (a *Arena) ReleaseInherited(algorithm string) (adoptedEpisodes bool) {
	if a.journals == nil {
		return false
	}
	if algorithm == "ttas" {
		for i := range a.cfg.Locks {
			word, _ := wait.Halves(&a.lockBody(i)[lWord])
			if v := atomic.LoadUint32(word); v>>1 == a.owner && atomic.CompareAndSwapUint32(word, v, 0) {
				wait.WakeAll(word)
			}
		}
	}
	return a.journals.adopted > 0
}

// namesLock reports whether entry state s is an episode that may still be
// in a lock's queue or hold a seat: a phase past claiming and not done, a
// journaled kind, and a lock index of this arena. Anything else in a dead
// process's journal is finished or damaged, and is dropped.
func (a *Arena) namesLock(s entryState) bool {
	phase, kind := s.phase(), s.kind()
	return phase >= jArriving && phase <= jRetired && phase != jDone &&
		kind >= kindHapax && kind <= kindLast && s.lock() < a.cfg.Locks
}

// entry is one claimed entry of this process's journal; the zero entry (no
// journal) makes every method a no-op.
type entry struct{ w []uint64 }

func (e entry) ok() bool { return e.w != nil }

// set writes the entry's fields and then its state, so that a reader that
// sees the state sees the fields it covers.
func (e entry) set(phase, kind uint8, lock int, value, pred, gen uint64) {
	if e.w == nil {
		return
	}
	atomic.StoreUint64(&e.w[1], value)
	atomic.StoreUint64(&e.w[2], pred)
	atomic.StoreUint64(&e.w[3], gen)
	atomic.StoreUint64(&e.w[0], packState(phase, kind, lock))
}

// state loads the entry's state word.
func (e entry) state() entryState { return stateAt(&e.w[0]) }

// phase moves the entry to a new phase, keeping its fields; phase replaces
// the adopted bit too.
func (e entry) phase(phase uint8) {
	if e.w == nil {
		return
	}
	s := e.state()
	atomic.StoreUint64(&e.w[0], uint64(s)&^(phaseMask|adopted)|uint64(phase))
}

// markRegistered records a Hapax-VW registration.
func (e entry) markRegistered() {
	if e.w == nil {
		return
	}
	atomic.StoreUint64(&e.w[0], atomic.LoadUint64(&e.w[0])|registered)
}

// queued records the predecessor an arrival's swap returned.
func (e entry) queued(pred uint64) {
	if e.w == nil {
		return
	}
	atomic.StoreUint64(&e.w[2], pred)
	e.phase(jQueued)
}

// ticketed records the ticket a ticket-awn arrival drew.
func (e entry) ticketed(t uint64) {
	if e.w == nil {
		return
	}
	atomic.StoreUint64(&e.w[1], t)
	e.phase(jQueued)
}

// reserve sets aside n entries of this process's journal for one episode,
// waiting for them until deadline; false if the deadline passed. Without
// journals it always succeeds.
func (a *Arena) reserve(n int, deadline time.Time) bool {
	return a.reserveWithin(n, deadline, nil)
}

// reserveFor is reserve within w's bounds: its deadline, and its context
// (false once that is done).
func (a *Arena) reserveFor(n int, w *waiter) bool {
	return a.reserveWithin(n, w.deadline, w.done)
}

func (a *Arena) reserveWithin(n int, deadline time.Time, done <-chan struct{}) bool {
	js := a.journals
	if js == nil {
		return true
	}
	for {
		v := js.free.Load()
		if v < int64(n) {
			break
		}
		if js.free.CompareAndSwap(v, v-int64(n)) {
			return true
		}
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	js.waiting.Add(1)
	defer js.waiting.Add(-1)
	for {
		v := js.free.Load()
		if v >= int64(n) {
			if js.free.CompareAndSwap(v, v-int64(n)) {
				return true
			}
			continue
		}
		if js.sweepDone() > 0 {
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		select {
		case <-done: // looked at least once a millisecond: see the timer below
			return false
		default:
		}
		// Entries come back through unreserve (which signals) or from
		// another process's Unlock (jDone, found by the sweep): look again
		// now and then. The timer takes mu to wake us, so it cannot fire
		// in the moment before Wait has us listening (we hold mu until
		// then), which would leave us asleep past the deadline.
		t := time.AfterFunc(min(left, time.Millisecond), func() {
			js.mu.Lock()
			js.cond.Broadcast()
			js.mu.Unlock()
		})
		js.cond.Wait()
		t.Stop()
	}
}

// sweepDone frees the entries other processes released (jDone). Called
// with mu held.
func (js *journals) sweepDone() int {
	own, n := js.all[js.self], 0
	for e := 0; e < len(own); e += journalEntryWords {
		s := stateAt(&own[e])
		if s.phase() == jDone && atomic.CompareAndSwapUint64(&own[e], uint64(s), jFree) {
			js.free.Add(1)
			n++
		}
	}
	return n
}

// claim takes a free entry out of the reservation.
func (a *Arena) claim() entry {
	js := a.journals
	if js == nil {
		return entry{}
	}
	own := js.all[js.self]
	for e := 0; e < len(own); e += journalEntryWords {
		if atomic.CompareAndSwapUint64(&own[e], jFree, jClaimed) {
			return entry{own[e : e+journalEntryWords : e+journalEntryWords]}
		}
	}
	// reserve counted a free entry for every claim; none free means the
	// journal was written by someone else: do without.
	return entry{}
}

// free ends an entry and returns it to the reservation pool (an entry
// claim could not deliver returns its reservation).
func (a *Arena) free(e entry) {
	if e.w == nil {
		a.unreserve(1)
		return
	}
	atomic.StoreUint64(&e.w[0], jFree)
	a.unreserve(1)
}

// unreserve returns reserved entries that were never claimed, or freed.
func (a *Arena) unreserve(n int) {
	js := a.journals
	if js == nil || n == 0 {
		return
	}
	js.free.Add(int64(n))
	// A waiter counts itself before it looks at free, and we add to free
	// before we look at waiting: one of us sees the other. Taking mu makes
	// the broadcast wait until that waiter sleeps in cond.Wait.
	if js.waiting.Load() > 0 {
		js.mu.Lock()
		js.cond.Broadcast()
		js.mu.Unlock()
	}
}

// findEpisode returns the entry of the episode with this value on lock
// index: this process's own if it is there, else another process's (an
// Unlock of a lock that process locked).
func (a *Arena) findEpisode(index int, kind uint8, value uint64) (e entry, own bool) {
	js := a.journals
	if js == nil {
		return entry{}, false
	}
	match := func(j []uint64, i int) bool {
		s := stateAt(&j[i])
		return !s.adopted() && s.on(kind, index) &&
			(s.phase() == jQueued || s.phase() == jArriving) && atomic.LoadUint64(&j[i+1]) == value
	}
	all := js.used()
	for n := range all {
		k := (js.self + n) % len(all) // this process's own first
		j := all[k]
		for i := 0; i < len(j); i += journalEntryWords {
			if match(j, i) {
				return entry{j[i : i+journalEntryWords : i+journalEntryWords]}, k == js.self
			}
		}
	}
	return entry{}, false
}

// endEpisode is the last step of an unlock: the entry is freed, or, if it
// belongs to another process, marked done for that process to free.
func (a *Arena) endEpisode(e entry, own bool) {
	if !e.ok() {
		return
	}
	if own {
		a.free(e)
		return
	}
	e.phase(jDone)
}

// findSeat returns the entry of the seat of hapax-cr lock index's holder,
// this process's own if it has it.
func (a *Arena) findSeat(index int) (e entry, own bool) {
	js := a.journals
	if js == nil {
		return entry{}, false
	}
	want := packState(jSeatHold, kindCR, index)
	all := js.used()
	for n := range all {
		k := (js.self + n) % len(all) // this process's own first
		j := all[k]
		for i := 0; i < len(j); i += journalEntryWords {
			if atomic.LoadUint64(&j[i]) == want {
				return entry{j[i : i+journalEntryWords : i+journalEntryWords]}, k == js.self
			}
		}
	}
	return entry{}, false
}

// Parties appends to dst the journal slots, other than this process's,
// that are in an episode of lock index: whose journal holds an entry that
// names the lock (a holder, a waiter, a seat or ticket of hapax-cr, or an
// episode of the dead that the slot's process took over and drives), and,
// with algorithm "ttas", the slot the lock's word names as its holder.
// Each slot is appended once. If the process of one of them is gone (as
// the live function Recover is given tells), Recover has work on the
// lock; if all of them live, it has none there. It reads without locks, so
// an entry that moves between journals meanwhile (another process's
// Recover adopting it) may be missed: a later look finds it where it
// went. It costs a load of every journal entry's state, and no system
// call: a caller can afford it where a Recover, which asks the kernel
// about every slot, would cost too much.
func (a *Arena) Parties(algorithm string, index int, dst []int) []int {
	js := a.journals
	if js == nil || index < 0 || index >= a.cfg.Locks {
		return dst
	}
	add := func(slot int) {
		for _, d := range dst {
			if d == slot {
				return
			}
		}
		dst = append(dst, slot)
	}
	if algorithm == "ttas" {
		word, _ := wait.Halves(&a.lockBody(index)[lWord])
		if owner := atomic.LoadUint32(word) >> 1; owner != 0 && owner != ttasOwnerMask && int(owner)-1 < len(js.all) && int(owner)-1 != js.self {
			add(int(owner) - 1)
		}
	}
	for k, j := range js.used() {
		if k == js.self {
			continue
		}
		for i := 0; i < len(j); i += journalEntryWords {
			if s := stateAt(&j[i]); a.namesLock(s) && s.lock() == index {
				add(k)
				break
			}
		}
	}
	return dst
}
