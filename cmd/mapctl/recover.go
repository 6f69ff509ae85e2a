package main

import (
	"fmt"

	"github.com/sharedmap/sharedmap/hashmap"
)

var checkCmd = &command{
	name:    "check",
	args:    "PATH",
	summary: "verify the whole file read-only; exit 3 if anything is wrong",
	help: `Verifies the map PATH without changing it (it is opened read-only): every
segment's lock word and modification sequence, tier chains, hash slots,
entries and their checksums, counters, and the process registry (processes
that died with the map open). Prints each problem found, or a summary line
if there are none. A segment that a live writer is changing is looked at
again before anything is reported, so checking a busy map is fine.

Exit status 0 if the file is sound, 3 if any problem was found: run
"mapctl recover PATH" to release what dead processes held.

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
		return e.reportCheck(c, m, "no problems")
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

It is safe while other processes use the map: it only removes what no live
process accounts for, and never touches a live process's locks. Operations
run the same repair by themselves when a lock wait times out, and the first
process to open a map whose users all died runs it at open; this command is
for repairing at a time of your choosing.

Exit status 0 if the file is sound afterwards, 3 otherwise.

Example:
  mapctl recover /tmp/m.map`,
	run: func(e *env, c *command, _ any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		m, err := openExisting(args[0], false) // opening joins the registry and repairs what the dead left
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		rep, err := m.Recover()
		if err != nil {
			return e.fail(c, err)
		}
		atOpen := m.RecoveredAtOpen()
		rep.DeadProcesses = append(atOpen.DeadProcesses, rep.DeadProcesses...)
		rep.Segments = append(atOpen.Segments, rep.Segments...)
		for _, d := range rep.DeadProcesses {
			fmt.Fprintf(e.stdout, "dead process %d (slot %d, opened %s)\n", d.PID, d.Index, d.ClaimedAt.Format("2006-01-02 15:04:05"))
		}
		for _, s := range rep.Segments {
			fmt.Fprintf(e.stdout, "segment %d: released %+v", s.Segment, s.Orphans)
			if s.Rebuilt {
				fmt.Fprintf(e.stdout, "; rebuilt: %d entries kept, %d dropped, %d second copies dropped", s.Kept, s.Dropped, s.Doubled)
			}
			fmt.Fprintln(e.stdout)
		}
		return e.reportCheck(c, m, "nothing held by the dead")
	},
}

// reportCheck runs m.Check, prints each problem (exit status 3 if any) or
// a summary line ending in clean.
func (e *env) reportCheck(c *command, m *hashmap.Map, clean string) int {
	problems, err := m.Check()
	if err != nil {
		return e.fail(c, err)
	}
	for _, p := range problems {
		fmt.Fprintln(e.stdout, p.Err)
	}
	if len(problems) > 0 {
		return e.fail(c, fmt.Errorf("%d problems found in %s", len(problems), m.Path()))
	}
	fmt.Fprintf(e.stdout, "ok: %d segments, %d entries, %s\n", len(m.Segments()), m.Len(), clean)
	return exitOK
}
