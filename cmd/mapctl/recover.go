package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

var checkCmd = &command{
	readOnly: true,
	name:     "check",
	args:     "PATH",
	summary:  "verify the whole file read-only; exit 3 if anything is wrong",
	help: `Verifies the map PATH without changing it (it is opened read-only): every
segment's lock word and modification sequence, tier chains, hash slots,
entries and their checksums, counters, and the process registry (processes
that died with the map open). Prints each problem found, or a summary line
if there are none, which ends with the size of the file, the time the
check took and their rate, on one line:

  ok: 1024 segments, 1000000 entries, no problems
  (308.7 MiB checked in 0.12 s, 2.5 GiB/s)

(scripts that match the line up to "no problems" still match it). The
segments are checked on every core at once. While it runs, and only if
stderr is a terminal, a progress line on stderr shows the segments checked,
their rate and the time left. A segment that a live writer is changing is
looked at again before anything is reported, so checking a busy map is
fine.

It also names locks on the file that no writer takes (a reader's flock or
read locks), as notes: they stop no writer and no recovery.

Exit status 0 if the file is sound, 3 if any problem was found: run
"mapctl recover PATH" to release what dead processes held, and
"mapctl recover --repair PATH" to rebuild segments whose data is damaged.

Example:
  mapctl check /tmp/m.map`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		m, err := openExisting(args[0], true)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		for _, l := range m.StrayLocks() {
			fmt.Fprintf(e.stdout, "note: %s\n", l)
		}
		return e.reportCheck(c, m, "no problems", false)
	},
}

var recoverCmd = &command{
	name:    "recover",
	args:    "PATH",
	summary: "release what processes that died with the map open held",
	help: `Finds processes that died with the map PATH open (the kernel dropped their
registry lock) and releases everything they held: read, update and write
locks and waits on every segment. Segments a dead process was modifying are
rebuilt from their entries; entries whose checksum fails are dropped. Then
it checks the file as "mapctl check" does.

With --reset-locks it first forces every lock of the map's lock table (and
the map's own lock) free, and makes whatever waits for one queue again: for
a lock damage to the file left taken or queued for good, which nothing
here can tell from a lock in use (a Lock that times out on a lock nobody
holds). It refuses while any other process has the map open for writing
(one that only reads, as get, dump and stats do, holds no lock).

With --repair it also rebuilds, from their entries, the segments that the
check finds damaged where no dead process explains it: pages of the file
torn by a machine crash (see Map.Sync), a stray write. Entries that do not
decode or fail their checksum are dropped and counted; every other entry is
kept. With or without --repair, the headers of the process registry and
of the lock table, whose sizes the file's header also holds, are rewritten
from it when damaged (as every process that opens the map for writing
does); --repair also rewrites registry places that no process could have
written. Other damage there is reported, not mended.

It is safe while other processes use the map: it only removes what no live
process accounts for, and never touches a live process's locks; a segment
being rebuilt makes its writers wait as any writer does. Operations run the
release by themselves when a lock wait times out, and the first process to
open a map whose users all died runs it at open; this command is for
repairing at a time of your choosing.

It ends with check's summary line ("ok: ... nothing held by the dead",
then the size, time and rate of the check), and on a terminal draws
check's progress line, and --repair's for the check that finds what to
rebuild.

Exit status 0 if the file is sound afterwards, 3 otherwise.

Examples:
  mapctl recover /tmp/m.map
  mapctl check /tmp/m.map || mapctl recover --repair /tmp/m.map
  mapctl recover --reset-locks /tmp/m.map`,
	flags: func(fs *flag.FlagSet) any {
		o := &recoverOpts{}
		fs.BoolVar(&o.repair, "repair", false, "also rebuild segments the check finds damaged (their damaged entries are dropped)")
		fs.BoolVar(&o.resetLocks, "reset-locks", false, "also force every lock of the map's lock table free (needs the map to itself)")
		return o
	},
	run: func(e *env, c *command, opts any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		m, err := openExisting(args[0], false) // opening joins the registry and repairs what the dead left
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		var rep hashmap.Recovery
		var rebuilt []hashmap.SegmentRepair
		o := opts.(*recoverOpts)
		if o.resetLocks {
			n, err := m.Locks().Reset()
			if err != nil {
				return e.fail(c, err)
			}
			fmt.Fprintf(e.stdout, "locks reset: %d\n", n)
		}
		if o.repair {
			sp := newSegmentProgress(e, c, "repairing")
			r, err := m.RepairWith(hashmap.CheckOptions{Progress: sp.update})
			sp.stop()
			if err != nil {
				return e.fail(c, err)
			}
			rep, rebuilt = r.Recovery, r.Rebuilt
			if r.NoRegistry {
				fmt.Fprintln(e.stdout, "dead processes not looked for: the file predates the process registry (made by a version before it); segments checked and rebuilt only")
			}
			for _, f := range r.Failed {
				fmt.Fprintf(e.stdout, "segment %d: not rebuilt: %v\n", f.Segment, f.Err)
			}
		} else if rep, err = m.Recover(); err != nil {
			return e.fail(c, err)
		}
		atOpen := m.RecoveredAtOpen()
		rep.DeadProcesses = append(atOpen.DeadProcesses, rep.DeadProcesses...)
		rep.Segments = append(atOpen.Segments, rep.Segments...)
		for _, what := range append(atOpen.Mended, rep.Mended...) {
			fmt.Fprintf(e.stdout, "mended: %s\n", what)
		}
		for _, d := range rep.DeadProcesses {
			fmt.Fprintf(e.stdout, "dead process %d (slot %d, opened %s)\n", d.PID, d.Slot, d.OpenedAt.Format("2006-01-02 15:04:05"))
		}
		for _, s := range rep.Segments {
			fmt.Fprintf(e.stdout, "segment %d: released %+v", s.Segment, s.Orphans)
			if s.Restored {
				fmt.Fprintf(e.stdout, "; a rewrite it cut short put right from the undo record (that key has, whole, its old value or the one being written)")
			}
			if s.Rebuilt {
				fmt.Fprintf(e.stdout, "; rebuilt: %d entries kept, %d dropped, %d second copies dropped, %d stray chunks freed", s.Kept, s.Dropped, s.Doubled, s.Freed)
			}
			fmt.Fprintln(e.stdout)
		}
		for _, s := range rebuilt {
			fmt.Fprintf(e.stdout, "segment %d: damaged, rebuilt: %d entries kept, %d dropped, %d second copies dropped, %d salvaged, %d stray chunks freed",
				s.Segment, s.Kept, s.Dropped, s.Doubled, s.Salvaged, s.Freed)
			if s.Relinked > 0 {
				fmt.Fprintf(e.stdout, ", %d overflow tiers a damaged link had cut loose linked again", s.Relinked)
			}
			fmt.Fprintln(e.stdout)
		}
		return e.reportCheck(c, m, "nothing held by the dead", opts.(*recoverOpts).repair)
	},
}

// recoverOpts are recover's flags.
type recoverOpts struct {
	repair, resetLocks bool
}

// reportCheck runs m.Check, with a progress line on a terminal, and prints
// each problem (exit status 3 if any) or a summary line ending in clean
// and, in parentheses, the size of the file, the time the check took and
// their rate. The error line says what to run next: recover --repair for
// damage (or, once repaired, where to read on), and recover for what dead
// processes hold.
func (e *env) reportCheck(c *command, m *hashmap.Map, clean string, repaired bool) int {
	// Check looks again at a segment a writer holds, for up to the lock
	// timeout (10 s by default) when the holder is dead: the progress
	// says so when it stops, rather than sit silent.
	sp := newSegmentProgress(e, c, "checking")
	start := time.Now()
	problems, err := m.CheckWith(hashmap.CheckOptions{Progress: sp.update})
	took := time.Since(start)
	sp.stop()
	if err != nil {
		return e.fail(c, err)
	}
	for _, p := range problems {
		fmt.Fprintln(e.stdout, p.Err)
	}
	if len(problems) > 0 {
		noun := "problems"
		if len(problems) == 1 {
			noun = "problem"
		}
		return e.fail(c, fmt.Errorf("%d %s found in %s: %s", len(problems), noun, m.Path(), nextStep(problems, m.Path(), repaired)))
	}
	fmt.Fprintf(e.stdout, "ok: %d segments, %d entries, %s (%s)\n", len(m.Segments()), m.Len(), clean, throughput(fileSize(m), "checked", took))
	return exitOK
}

// nextStep is what to run about problems Check found in the map at path.
func nextStep(problems []hashmap.Problem, path string, repaired bool) string {
	damaged := slices.ContainsFunc(problems, func(p hashmap.Problem) bool { return errors.Is(p.Err, hashmap.ErrCorrupt) })
	switch {
	case damaged && repaired:
		return "what repair could not mend; mapctl dump " + path + " saves what still reads, and docs/RELIABILITY.md says what is refused"
	case damaged:
		return "run mapctl recover --repair " + path + " to rebuild the damaged segments, keeping every entry that is sound (mapctl dump first, to keep a copy of what reads)"
	default:
		return "run mapctl recover " + path + " to release what dead processes hold (a live process holding a lock past the timeout is named above: it is busy or stuck)"
	}
}
