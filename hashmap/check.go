package hashmap

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/rwulock"
	"github.com/sharedmap/sharedmap/segment"
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
// (none: the file is sound). It is CheckWith with the default options:
// the segments are checked on every core.
func (m *Map) Check() ([]Problem, error) {
	return m.CheckWith(CheckOptions{})
}

// CheckOptions tune a Check (CheckWith), and the check that Repair runs
// (RepairWith).
type CheckOptions struct {
	// Progress, if not nil, is told how far the check of the segments
	// has got: done of total segments checked. It is called at most
	// every few milliseconds, from one goroutine at a time, with done
	// never falling, and a last time with done == total when every
	// segment is checked; it should return quickly, as a segment's
	// checker waits for it.
	Progress func(done, total int)
	// Workers is how many goroutines check segments at once: 0 is
	// GOMAXPROCS, at most 16. Each segment is checked alone
	// and read-only, so they can be checked side by side; 1 checks them
	// one after another, on the calling goroutine, for a check that
	// should take no more than one core from a busy machine.
	Workers int
}

// maxCheckWorkers bounds CheckOptions.Workers' default: past the point
// where the cores together read memory as fast as it delivers, more
// goroutines only wait.
const maxCheckWorkers = 16

// progressEvery is how often, at most, CheckOptions.Progress is called.
const progressEvery = 5 * time.Millisecond

// CheckWith is Check with options o: its progress reported as it goes,
// and how many goroutines share the work. The problems found are the
// same, in the same order: those of no segment first, then by segment.
func (m *Map) CheckWith(o CheckOptions) ([]Problem, error) {
	c, err := m.enterAny(false)
	if err != nil {
		return nil, err
	}
	defer c.Leave()
	out, err := m.checkOutsideSegments()
	if err != nil {
		return nil, err
	}
	return m.checkOrphans(m.checkSegments(out, o)), nil
}

// checkOutsideSegments is what Check finds wrong outside the segments: in
// the file header, the process registry, the lock table and its journals,
// and the segment table's global state.
func (m *Map) checkOutsideSegments() ([]Problem, error) {
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
			// Past the high-water mark journals were never written; the
			// registry's Check finds any byte there that is not zero.
			for i := range m.reg.InUse() {
				for _, err := range a.CheckJournal(m.reg.Journal(i)) {
					out = append(out, Problem{-1, fmt.Errorf("process slot %d: %w", i, err)})
				}
			}
		}
	}
	m.table.CheckGlobal(func(err error) { out = append(out, Problem{-1, err}) })
	return out, nil
}

// checkSegments checks every segment, o.Workers (see CheckOptions) at a
// time, and returns out with the problems found appended in the order of
// the segments. Workers take the next segment from a shared count, so a
// segment looked at again while a writer holds it delays no other.
func (m *Map) checkSegments(out []Problem, o CheckOptions) []Problem {
	total := int(m.table.Segments())
	workers := o.Workers
	if workers <= 0 {
		workers = min(runtime.GOMAXPROCS(0), maxCheckWorkers)
	}
	workers = max(min(workers, total), 1)
	p := checkProgress{report: o.Progress, total: total}
	p.last.Store(time.Now().UnixNano())
	if workers == 1 {
		var ck segment.Checker
		for i := range total {
			out = m.checkSegment(&ck, i, out)
			p.segmentDone()
		}
	} else {
		var next atomic.Int64
		found := make([][]Problem, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				var ck segment.Checker
				for i := int(next.Add(1) - 1); i < total; i = int(next.Add(1) - 1) {
					found[w] = m.checkSegment(&ck, i, found[w])
					p.segmentDone()
				}
			})
		}
		wg.Wait()
		from := len(out)
		for _, f := range found {
			out = append(out, f...)
		}
		// Stable: a segment's problems stay in the order found.
		slices.SortStableFunc(out[from:], func(a, b Problem) int { return cmp.Compare(a.Segment, b.Segment) })
	}
	if o.Progress != nil {
		p.mu.Lock()
		o.Progress(total, total)
		p.mu.Unlock()
	}
	return out
}

// checkProgress is a check's count of the segments done, and when it was
// last reported to report.
type checkProgress struct {
	report func(done, total int)
	total  int
	done   atomic.Int64
	last   atomic.Int64 // UnixNano of the last report
	mu     sync.Mutex   // held while report runs
}

// segmentDone counts a segment checked and, if progressEvery has passed
// since the last report and no other goroutine is reporting, reports.
func (p *checkProgress) segmentDone() {
	done := p.done.Add(1)
	if p.report == nil || int(done) == p.total {
		return // the last report is checkSegments', once every worker is done
	}
	now := time.Now().UnixNano()
	if now-p.last.Load() < int64(progressEvery) || !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	if now-p.last.Load() < int64(progressEvery) {
		return // another goroutine has just reported
	}
	p.last.Store(now)
	p.report(int(p.done.Load()), p.total) // read again under mu: never falls
}

// checkSegment appends to out the problems of segment i, checked with ck.
// A segment a writer changes while it is read is read again, until a pass
// sees it quiet or LockTimeout passes.
func (m *Map) checkSegment(ck *segment.Checker, i int, out []Problem) []Problem {
	s := m.table.Segment(i)
	// The first tier is read whole: mapped in by one call, not a page
	// fault at a time (an Open of an existing map leaves it out).
	_ = m.file.Region.Prefault(m.layout.TiersOff+int64(i)*m.layout.TierSize, m.layout.TierSize, false) // advisory
	deadline := time.Now().Add(m.opts.LockTimeout)
	for {
		// An insert changes no sequence (it changes no value), but the
		// count of entries, under the update lock: a pass is quiet when
		// the lock was free on both sides of it and neither moved.
		before, entries, free := s.Seq(), s.Len(), s.Lock().State().Free()
		var found []error
		ck.Check(s, func(err error) { found = append(found, err) })
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
			return out
		}
		time.Sleep(time.Millisecond) // a writer is at work: look again
	}
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
