package hashmap

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sharedmap/sharedmap/rwulock"
)

// StrayLocks describes, for a person, locks that processes hold on the map
// file and that no writer takes (a flock, POSIX or OFD read locks, such as a
// reader may take). They stop no writer and no recovery. Empty where the
// platform does not list locks, or the file has no process registry.
func (m *Map) StrayLocks() []string {
	if m.reg == nil {
		return nil
	}
	return m.reg.StrayLocks()
}

// Problem is one thing Check found wrong.
type Problem struct {
	Segment int   // -1 for problems not tied to a segment
	Err     error // what is wrong, said for a person (damage matches ErrCorrupt)
}

// Check verifies the whole map read-only: every segment's lock word and
// sequence, tier chains, hash slots, entries and their checksums, and
// counters; the process registry, for processes that died without their
// locks being recovered; and the lock journals, for entries no lock
// episode could have written. A segment that a live writer is changing
// is looked at again, so a busy map is not reported as damaged; a lock
// held longer than LockTimeout is reported. It returns every problem found
// (none: the file is sound).
func (m *Map) Check() ([]Problem, error) {
	c, err := m.enterAny(false)
	if err != nil {
		return nil, err
	}
	defer c.Leave()
	var out []Problem
	for _, err := range m.file.HeaderProblems() {
		out = append(out, Problem{-1, alsoIs{err, ErrCorrupt}})
	}
	if m.regErr != nil {
		out = append(out, Problem{-1, m.regErr})
	}
	if m.lockTable.err != nil {
		out = append(out, Problem{-1, m.lockTable.err})
	}
	if m.reg != nil {
		m.reg.Check(func(err error) { out = append(out, Problem{-1, err}) })
		slots, err := m.reg.Slots()
		if err != nil {
			return nil, err
		}
		for _, s := range slots {
			if s.Dead() {
				out = append(out, Problem{-1, fmt.Errorf("process %d (slot %d, opened %s) died with the map open; run recover",
					s.PID, s.Index, s.ClaimedAt.Format(time.RFC3339))})
			}
		}
		if a := m.lockTable.arena; a != nil {
			for i := range m.reg.Layout().Slots {
				for _, err := range a.CheckJournal(m.reg.Journal(i)) {
					out = append(out, Problem{-1, fmt.Errorf("process slot %d: %w", i, err)})
				}
			}
		}
	}
	m.table.CheckGlobal(func(err error) { out = append(out, Problem{-1, err}) })
	for i := range int(m.layout.Segments) {
		s := m.table.Segment(i)
		deadline := time.Now().Add(m.opts.LockTimeout)
		for {
			// An insert changes no sequence (it changes no value), but the
			// count of entries, under the update lock: a pass is quiet when
			// the lock was free on both sides of it and neither moved.
			before, entries, free := s.Seq(), s.Len(), s.Lock().State().Free()
			var found []error
			s.Check(func(err error) { found = append(found, err) })
			quiet := free && before&1 == 0 && s.SeqAfterReads() == before && s.Len() == entries && s.Lock().State().Free()
			if quiet || len(found) == 0 || !time.Now().Before(deadline) {
				for _, err := range found {
					out = append(out, Problem{i, err})
				}
				// A lock held all this time is a live process's or a dead
				// one's: say which, as only the dead one's is recover's.
				if len(found) > 0 && !s.Lock().State().Free() {
					live, passedOn := m.liveHolders(i)
					if live != "" {
						out = append(out, Problem{i, fmt.Errorf("the lock is held by a live process (%s), longer than the lock timeout: busy, or stopped (SIGSTOP, a debugger); check again when it lets go", live)})
					}
					if passedOn != "" {
						out = append(out, Problem{i, fmt.Errorf("the lock is held by a process that is no longer running (%s), whose slot stays live: a process it passed the map's file descriptor to (an exec with it among the child's files, a fork) keeps the slot's lock; the lock is released once that descriptor is closed, or its process exits", passedOn)})
					}
				}
				break
			}
			time.Sleep(time.Millisecond) // a writer is at work: look again
		}
	}
	return out, nil
}

// liveHolders names the processes with the map open whose ledgers account
// for a hold of segment i's lock (a read, update or write lock, not a
// wait), or a change to it in flight: in live those running, in passedOn
// those whose slot lives on after them (registry.Slot.ProcessGone); ""
// for none, or when the file has no registry to tell.
func (m *Map) liveHolders(i int) (live, passedOn string) {
	if m.reg == nil {
		return "", ""
	}
	slots, err := m.reg.Live(nil)
	if err != nil {
		return "", ""
	}
	holding := func(ledger uint64) bool {
		held, settled := rwulock.LedgerHolds(ledger)
		st := rwulock.Decode(held)
		return st.Readers > 0 || st.Update || st.Write || !settled
	}
	var running, gone []string
	var ledgers []uint64
	for _, slot := range slots {
		ledgers = m.appendLedgers(ledgers[:0], slot, i)
		if !slices.ContainsFunc(ledgers, holding) {
			continue
		}
		sl, err := m.reg.Slot(slot)
		switch {
		case err != nil:
			running = append(running, fmt.Sprintf("slot %d", slot))
		case sl.ProcessGone():
			gone = append(gone, fmt.Sprintf("pid %d, slot %d", sl.PID, slot))
		default:
			running = append(running, fmt.Sprintf("pid %d, slot %d", sl.PID, slot))
		}
	}
	return strings.Join(running, "; "), strings.Join(gone, "; ")
}
