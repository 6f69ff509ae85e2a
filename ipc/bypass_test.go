//go:build linux

package ipc

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
)

// Knobs for a long hunt (.ci/bypass-hunt runs the test with them); the
// defaults are the run CI can afford.
var (
	bypassRunFlag        = flag.Duration("bypass.run", 0, "how long each run of TestCallersArePassedWithinTheStatedBounds locks (0: 300ms, 150ms with -short)")
	bypassProcsFlag      = flag.Int("bypass.procs", 3, "processes in each bypass run")
	bypassGoroutinesFlag = flag.Int("bypass.goroutines", 4, "goroutines per process in each bypass run, each with a handle of its own")
	bypassAlgosFlag      = flag.String("bypass.algos", "", "comma-separated algorithms the bypass test runs (default: every one with a stated bound)")
)

// Scratch words of the bypass test. A unit is a goroutine (a process for
// cohort): sections[u] counts the critical sections unit u has entered,
// incremented inside the section, so the counts of all units number the
// sections in the order the lock admitted them.
const (
	bypassSections = 1024
	bypassMaxUnits = 64
	bypassReady    = bypassSections + bypassMaxUnits
	bypassStart    = bypassReady + 1
)

// bypassBound is what an algorithm's documentation promises a waiter, per
// other unit, in critical sections of that unit counted after a doorway
// and before the waiter's own section: the section that unit is in at the
// doorway counts. Zero means the algorithm has no such interval.
type bypassBound struct {
	// perProcess: units are processes, and the doorway is the process's
	// arrival at the global lock (cohort).
	perProcess bool
	// ticket bounds the interval from the draw of a passive ticket (the
	// CAS that draws it) to the CAS that takes it out of the queue
	// (hapax-cr).
	ticket uint64
	// queued bounds the interval from the FIFO lock's doorway (the swap
	// into Arrive, or the ticket's fetch-and-add) to the entry.
	queued uint64
}

// bypassBounds are the bounds the documentation of each lock states
// (docs/LOCKS.md, and the comments at restrict.go's crStreak and at
// openCohort):
//
//   - FIFO locks: from the doorway, at most 1 section of each other
//     goroutine (the one it holds or is queued ahead for).
//   - hapax-cr: while a passive ticket waits, at most crStreak of each
//     other goroutine (the section it is in or queued ahead for, then its
//     admissions past the ticket until its streak sends it behind); from
//     the arrival at the inner Hapax lock, FIFO, 1. Together crStreak+1.
//     From the call to the ticket, and from the seat to the inner
//     arrival, nothing bounds it but the OS scheduler.
//   - cohort: from a process's arrival at the global Hapax lock, at most
//     DefaultPassLimit of each other process (one tenure), (P-1) x
//     DefaultPassLimit in all. A caller may wait through several tenures
//     of its own process, and between them nothing bounds it.
func bypassBounds(algo string) (bypassBound, bool) {
	switch algo {
	case "hapax-cr":
		return bypassBound{ticket: crStreak, queued: 1}, true
	case "cohort":
		return bypassBound{perProcess: true, queued: DefaultPassLimit}, true
	case "hapax", "hapax-vw", "tidex", "ticket-awn":
		return bypassBound{queued: 1}, true
	}
	return bypassBound{}, false
}

// TestCallersArePassedWithinTheStatedBounds runs 3 processes of 4
// goroutines (by default) on one lock on whatever cores the machine has
// (2 in CI, so oversubscribed) for a bounded time, and asserts for every
// wait the bound of bypassBounds, per other unit, exactly: the start of
// an interval is marked by a hook that runs in Lock right after the
// doorway's atomic, the end of a ticket's wait right before the CAS that
// ends it, and each mark reads every unit's count of sections (a count is
// incremented inside the section). A section counted in an interval was
// therefore counted after its doorway and before its end: the test can
// miss sections counted between the atomic and the mark, never count one
// too many, so any count over the bound is a real bypass.
func TestCallersArePassedWithinTheStatedBounds(t *testing.T) {
	if raceEnabled {
		// The detector sees none of the mapped words the locks order;
		// the run without it asserts the bounds, at a fraction of the time.
		t.Skip("the race detector sees nothing of the mapped words this measures")
	}
	procs, goroutines := *bypassProcsFlag, *bypassGoroutinesFlag
	if procs < 2 || procs*goroutines > bypassMaxUnits {
		t.Fatalf("bypass.procs %d x bypass.goroutines %d: want at least 2 processes and at most %d goroutines", procs, goroutines, bypassMaxUnits)
	}
	run := *bypassRunFlag
	if run == 0 {
		run = 300 * time.Millisecond
		if testing.Short() {
			run = 150 * time.Millisecond
		}
	}
	algos := []string{"hapax-cr", "cohort", "hapax", "hapax-vw", "tidex", "ticket-awn"}
	if *bypassAlgosFlag != "" {
		algos = strings.Split(*bypassAlgosFlag, ",")
	}
	for _, algo := range algos {
		t.Run(algo, func(t *testing.T) {
			b, ok := bypassBounds(algo)
			if !ok {
				t.Fatalf("%s states no bypass bound this test measures", algo)
			}
			// A run in which no wait reached where the bound applies tests
			// nothing (a loaded machine can run the processes one after
			// another); it runs again, up to 3 times. A count over the
			// bound fails at once: the marks never overcount.
			for attempt := 1; ; attempt++ {
				r := bypassRun(t, algo, procs, goroutines, run, false)
				t.Logf("attempt %d: %s", attempt, r)
				if r.violations > 0 {
					t.Fatalf("%d waits were passed by more sections than the bound allows (per other unit: %d while a ticket waits, %d from the doorway); the first: %s",
						r.violations, b.ticket, b.queued, r.first)
				}
				if r.tested(b, procs, goroutines) {
					return
				}
				if attempt >= 3 {
					t.Fatalf("in %d runs no wait came near the bound: the test did not test it", attempt)
				}
			}
		})
	}
}

// TestTheBypassMeasureCatchesABrokenBound runs the measurement against
// locks broken on purpose, so that the strict test above is known to be
// able to fail: cohort with a pass limit three times the stated one, and
// hapax-cr with handles whose streak never runs out (they are admitted
// past passive waiters without end).
func TestTheBypassMeasureCatchesABrokenBound(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector sees nothing of the mapped words this measures")
	}
	for _, algo := range []string{"cohort", "hapax-cr"} {
		t.Run(algo, func(t *testing.T) {
			run := 300 * time.Millisecond
			for attempt := 1; ; attempt++ {
				r := bypassRun(t, algo, 3, 4, run, true)
				t.Logf("attempt %d: %s", attempt, r)
				if r.violations > 0 {
					return
				}
				if attempt >= 3 {
					t.Fatalf("in %d runs the measure saw no wait over the bound of a lock broken past it", attempt)
				}
				run *= 2
			}
		})
	}
}

// bypassResult sums the helpers' reports of one run.
type bypassResult struct {
	calls, tickets, queued uint64 // calls; waits with a ticket; waits from a doorway
	maxTicket, maxQueued   uint64 // largest count of one other unit in one interval
	maxTotal               uint64 // largest count of all other units in a wait's intervals
	maxSeen                uint64 // largest count of all other units from a call to its entry
	violations             uint64
	first                  string // the first violation of some helper
}

func (r bypassResult) String() string {
	return fmt.Sprintf("%d calls, %d ticket waits, %d doorway waits; per other unit: largest while a ticket waits %d, from the doorway %d; all others in a wait's intervals %d, from the call %d; %d over the bound",
		r.calls, r.tickets, r.queued, r.maxTicket, r.maxQueued, r.maxTotal, r.maxSeen, r.violations)
}

// tested reports whether some wait came near the bound: for a ticket, past
// half a streak, which only a descheduled head lets happen (and only where
// goroutines outnumber seats); for a doorway, the bound itself, but for a
// cohort of one goroutine, whose every tenure is one section.
func (r bypassResult) tested(b bypassBound, procs, goroutines int) bool {
	if b.ticket != 0 && crSeats() < uint64(procs*goroutines) && r.maxTicket < b.ticket/2 {
		return false
	}
	if b.perProcess && goroutines == 1 {
		return r.maxQueued >= 1
	}
	return r.maxQueued >= b.queued
}

// bypassRun runs the helpers once and sums their reports. broken runs a
// lock broken past its bound (TestTheBypassMeasureCatchesABrokenBound).
func bypassRun(t *testing.T, algo string, procs, goroutines int, run time.Duration, broken bool) bypassResult {
	path := createTestFile(t, Config{Locks: 1})
	reports := testutil.Run(t, testutil.Commands("bypass", procs, "LOCKS_PATH="+path, "LOCKS_ALGO="+algo,
		"LOCKS_PROCS="+strconv.Itoa(procs), "LOCKS_GOROUTINES="+strconv.Itoa(goroutines), "LOCKS_RUN="+run.String(),
		"LOCKS_BROKEN="+strconv.FormatBool(broken))...)
	if len(reports) != procs {
		t.Fatalf("%d of %d helpers reported: %v", len(reports), procs, reports)
	}
	tf := openTestFile(t, path)
	defer tf.close()
	if n := tf.scratch[scratchCounter]; tf.scratch[scratchPRNG] != replay(n) {
		t.Fatal("PRNG off: exclusion failed")
	}
	var r bypassResult
	for _, rep := range reports {
		// calls tickets queued maxTicket maxQueued maxTotal maxSeen violations first
		if len(rep) != 9 {
			t.Fatalf("report %v", rep)
		}
		v := make([]uint64, 8)
		for i := range v {
			var err error
			if v[i], err = strconv.ParseUint(rep[i], 10, 64); err != nil {
				t.Fatalf("report %v: %v", rep, err)
			}
		}
		r.calls += v[0]
		r.tickets += v[1]
		r.queued += v[2]
		r.maxTicket, r.maxQueued = max(r.maxTicket, v[3]), max(r.maxQueued, v[4])
		r.maxTotal, r.maxSeen = max(r.maxTotal, v[5]), max(r.maxSeen, v[6])
		r.violations += v[7]
		if r.first == "" && rep[8] != "-" {
			r.first = rep[8]
		}
	}
	return r
}

// bypassMarks are one goroutine's marks of its current call: copies of
// every unit's section count at each mark, taken by the lock's hooks on
// the goroutine that calls Lock.
type bypassMarks struct {
	sections                      []uint64 // the shared counts
	call, drew, served, arrived   []uint64
	entry                         []uint64
	ticket, queued                bool // drew and arrived were marked in this call
	calls, tickets, queuedWaits   uint64
	maxTicket, maxQueued          uint64
	maxTotal, maxSeen, violations uint64
	first                         string
}

func newBypassMarks(scratch []uint64, units int) *bypassMarks {
	k := &bypassMarks{sections: scratch[bypassSections : bypassSections+units]}
	for _, p := range []*[]uint64{&k.call, &k.drew, &k.served, &k.arrived, &k.entry} {
		*p = make([]uint64, units)
	}
	return k
}

// mark copies every unit's count. Each count only grows, so a count read
// after a doorway is at least the count at the doorway: later reads can
// only lose sections from an interval, never add one.
func (k *bypassMarks) mark(to []uint64) {
	for u := range to {
		to[u] = atomic.LoadUint64(&k.sections[u])
	}
}

// entered tallies the call that has just entered its section as unit me,
// against bound b.
func (k *bypassMarks) entered(me int, b bypassBound) {
	k.mark(k.entry)
	k.calls++
	if k.ticket {
		k.tickets++
	}
	if k.queued {
		k.queuedWaits++
	}
	var total, seen uint64
	for u := range k.entry {
		if u == me {
			continue
		}
		seen += k.entry[u] - k.call[u]
		if k.ticket {
			n := k.served[u] - k.drew[u]
			total += n
			k.maxTicket = max(k.maxTicket, n)
			if n > b.ticket {
				k.violate(fmt.Sprintf("unit%d:ticket:%d>%d", u, n, b.ticket))
			}
		}
		if k.queued {
			n := k.entry[u] - k.arrived[u]
			total += n
			k.maxQueued = max(k.maxQueued, n)
			if n > b.queued {
				k.violate(fmt.Sprintf("unit%d:doorway:%d>%d", u, n, b.queued))
			}
		}
	}
	k.maxTotal, k.maxSeen = max(k.maxTotal, total), max(k.maxSeen, seen)
	k.ticket, k.queued = false, false
}

func (k *bypassMarks) violate(what string) {
	if k.violations == 0 {
		k.first = what
	}
	k.violations++
}

// helperBypass runs LOCKS_GOROUTINES goroutines, each with its own handle,
// locking for LOCKS_RUN, and reports what their waits were passed by.
func helperBypass(t *testing.T) {
	tf := openTestFile(t, os.Getenv("LOCKS_PATH"))
	defer tf.close()
	algo := os.Getenv("LOCKS_ALGO")
	me, procs, goroutines := envInt(t, "HELPER_INDEX"), envInt(t, "LOCKS_PROCS"), envInt(t, "LOCKS_GOROUTINES")
	broken := os.Getenv("LOCKS_BROKEN") == "true"
	run, err := time.ParseDuration(os.Getenv("LOCKS_RUN"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := bypassBounds(algo)
	if !ok {
		t.Fatalf("no bound for %s", algo)
	}
	units := procs * goroutines
	if b.perProcess {
		units = procs
	}
	s := tf.scratch
	// Begin together, and end at one time: the run is bounded in time.
	if atomic.AddUint64(&s[bypassReady], 1) == uint64(procs) {
		atomic.StoreUint64(&s[bypassStart], uint64(time.Now().Add(run).UnixNano()))
	}
	for atomic.LoadUint64(&s[bypassStart]) == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	end := time.Unix(0, int64(atomic.LoadUint64(&s[bypassStart])))

	var mu sync.Mutex
	var sum bypassMarks
	sum.first = "-"
	var wg sync.WaitGroup
	for g := range goroutines {
		m := tf.mutex(t, algo, 0)
		unit := me*goroutines + g
		if b.perProcess {
			unit = me
		}
		k := newBypassMarks(s, units)
		arrived := func() { k.mark(k.arrived); k.queued = true }
		var cr *restricted
		switch l := m.(type) {
		case *restricted:
			cr = l
			l.drew = func(uint64) { k.mark(k.drew); k.ticket = true }
			l.serving = func() { k.mark(k.served) }
			l.inner.(*hapax).arrived = arrived
		case *cohort:
			l.global.(*hapax).arrived = arrived
			if broken {
				l.passLimit = 3 * DefaultPassLimit
			}
		case *hapax:
			l.arrived = arrived
		case *tidex:
			l.arrived = arrived
		case *ticketAWN:
			l.arrived = arrived
		default:
			t.Fatalf("%s: no doorway hook for %T", algo, m)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if broken && cr != nil {
					cr.streak.Store(0) // never yields to passive waiters
				}
				k.mark(k.call)
				m.Lock()
				k.entered(unit, b)
				atomic.AddUint64(&s[bypassSections+unit], 1)
				criticalSection(s)
				if err := m.Unlock(); err != nil {
					t.Error(err)
					return
				}
			}
			mu.Lock()
			defer mu.Unlock()
			sum.calls += k.calls
			sum.tickets += k.tickets
			sum.queuedWaits += k.queuedWaits
			sum.maxTicket, sum.maxQueued = max(sum.maxTicket, k.maxTicket), max(sum.maxQueued, k.maxQueued)
			sum.maxTotal, sum.maxSeen = max(sum.maxTotal, k.maxTotal), max(sum.maxSeen, k.maxSeen)
			if sum.violations == 0 && k.violations > 0 {
				sum.first = fmt.Sprintf("proc%d:g%d:%s", me, g, k.first)
			}
			sum.violations += k.violations
		}()
	}
	wg.Wait()
	testutil.Report("%d %d %d %d %d %d %d %d %s", sum.calls, sum.tickets, sum.queuedWaits, sum.maxTicket, sum.maxQueued,
		sum.maxTotal, sum.maxSeen, sum.violations, sum.first)
}
