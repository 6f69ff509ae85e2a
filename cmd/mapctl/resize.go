package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// resizeOpts are resize's flags.
type resizeOpts struct {
	entries  int
	maxSize  int64
	sizeSet  bool // --max-size given
	noGrowth bool
	splits   bool // --splits
	noSplits bool // --no-splits
}

var resizeCmd = &command{
	name:    "resize",
	args:    "PATH",
	summary: "rewrite a map into a new file sized for its entries, in place of the old",
	help: `Rewrites the map PATH into a new file laid out for the entries it holds, and
puts the new file in the old one's place (same path). Use it when a map has
grown far past the --entries it was created with: a grown map keeps the
segments it was made with, so each lookup walks a longer chain of tiers
(mapctl stats shows tiers per segment), and a map grown 16 times reads
at about a third of the speed of one made for its size. The new file is as
fast as one made for its entries. It is also how a file made before growth
or tier stamps (mapctl upgrade rewrites only the header) gains both.

The new file is sized for --entries (default: the larger of the old file's
entries and the entries it holds), with the mean key and value sizes of the
entries it holds, and segments chosen for --entries. It grows up to
--max-size (default: 64 times its first size, at least 64MiB, at most
1TiB), or not at all with --no-growth; a cache map never grows, it evicts.
Its segments split as it fills (see mapctl create) as the old file's did:
a map created with --no-splits (or made before segments split, or with a
--max-size too small for them) keeps its segments in the new file too, unless --splits is given; --no-splits
makes a new file whose segments do not split. A file that does not grow
never splits. Everything else the old file was made with is kept: cache or not,
checksums, undo records, --bloat, the application locks and their
algorithm, --max-processes, the permission bits (and the owner, when run
as a user who may give it). Every entry is copied, a cache map's with its
expiry; entries that expire during the copy are left out.

It needs the map to itself: it refuses while any process has the map open
for writing (exit status 3, naming their pids), while a process that died
with the map open is not recovered from (run mapctl recover first), and
while an entry is damaged (mapctl check says which; mapctl recover
--repair drops it). It changes nothing then. While it runs, a process that opens the
map for writing waits (up to three times its lock timeout, 30s by
default), then opens the new file. Processes that only read (get, dump,
stats; readers are not registered, so resize cannot tell) and have the
old file open keep reading the old file, which no longer changes: open
the map again to see the new one.

The new file is written beside the old one, as PATH.resize-tmp, synced and
renamed over PATH. It is safe to interrupt: Ctrl-C or SIGTERM before the
rename stops it, removes PATH.resize-tmp and leaves the old file as it was
(exit status 3). Killed at any point, or cut by a power failure, it leaves
PATH opening with every entry, the old file before the rename and the new
one after; a leftover PATH.resize-tmp is removed by the next resize. A
resize of a map another resize is rewriting fails at once (exit status 3),
naming the process that runs it. The disk must hold both files at once; when it
cannot, resize fails with "no space left" and removes what it wrote,
leaving the old file as it was.

While it runs, and only if stderr is a terminal, a progress line on stderr
shows the entries copied. At the end it prints what it did:

  resized PATH: 1048576 entries kept in 1.9s
    file size      3.3 MiB -> 402.7 MiB (grows to 25.2 GiB)
    segments       64 -> 1024
    tiers in use   14912 -> 1088 (233.0 -> 1.1 per segment)
    growth steps   8 -> 0

Exit status 0 once the new file is in place, 3 if it is not (the old file
is then as it was).

Examples:
  mapctl stats /srv/sessions.map   # tiers per segment, growth steps
  mapctl resize /srv/sessions.map
  mapctl resize /srv/sessions.map --entries 5000000 --max-size 64GiB
  mapctl resize /srv/sessions.map --splits   # made with --no-splits`,
	flags: func(fs *flag.FlagSet) any {
		o := &resizeOpts{}
		fs.IntVar(&o.entries, "entries", 0, "number of entries to size the new file for (0: the larger of the old file's and the entries it holds)")
		fs.Func("max-size", "the most bytes the new file may grow to, as 64GiB or 500MB (0: 64 times its first size, at least 64MiB, at most 1TiB)", func(v string) error {
			n, err := parseByteSize(v)
			if err != nil {
				return err
			}
			o.maxSize, o.sizeSet = n, true
			return nil
		})
		fs.BoolVar(&o.noGrowth, "no-growth", false, "keep the new file at the size it is created with: puts fail once --entries x --bloat is used up")
		fs.BoolVar(&o.splits, "splits", false, "split the new file's segments as it fills, even if the old file's did not (default: as the old file)")
		fs.BoolVar(&o.noSplits, "no-splits", false, "keep the segments the new file is created with, even if the old file's split (default: as the old file)")
		return o
	},
	run: runResize,
}

func runResize(e *env, c *command, opts any, args []string) int {
	if !e.wantArgs(c, args, 1) {
		return exitUsage
	}
	o := opts.(*resizeOpts)
	switch {
	case o.entries < 0:
		return e.usageError(c, fmt.Sprintf("--entries %d: want 0 (the default) or a count of entries", o.entries))
	case o.noGrowth && o.sizeSet:
		return e.usageError(c, "--max-size and --no-growth together: give one")
	case o.splits && o.noSplits:
		return e.usageError(c, "--splits and --no-splits together: give one")
	}
	ro := &hashmap.ResizeOptions{Entries: o.entries, MaxSize: o.maxSize, Splits: o.splits, NoSplits: o.noSplits}
	if o.noGrowth {
		ro.MaxSize = hashmap.NoGrowth
	}
	path := args[0]
	p := newProgress(e.stderr, "resizing", "entries", 0)
	ro.Progress = func(done, total int64) {
		p.total = total
		p.update(done, done)
	}
	// An interrupt ends the copy, and Resize removes the new file: the
	// default, death, would leave it for the next resize to remove.
	ctx, stop := interruptContext()
	defer stop()
	res, err := hashmap.ResizeContext(ctx, path, ro)
	p.done()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return e.fail(c, fmt.Errorf("interrupted: %s is as it was, and the new file it was copied into is removed", path))
	}
	if errors.Is(err, hashmap.ErrBadOptions) {
		return e.usageError(c, createFlagNames.Replace(err.Error()))
	}
	if err != nil {
		return e.fail(c, err)
	}
	expired := ""
	if res.Expired > 0 {
		expired = fmt.Sprintf(" (%d expired during the copy, left out)", res.Expired)
	}
	fmt.Fprintf(e.stdout, "resized %s: %d %s kept%s in %s\n", path, res.Entries, plural(res.Entries, "entry", "entries"), expired, res.Took.Round(time.Millisecond))
	grows := ""
	if res.New.Grows {
		grows = fmt.Sprintf(" (grows to %s)", shortBytes(res.New.MaxFileSize))
	}
	fmt.Fprintf(e.stdout, "  file size      %s -> %s%s\n", shortBytes(res.Old.FileSize), shortBytes(res.New.FileSize), grows)
	fmt.Fprintf(e.stdout, "  segments       %d -> %d\n", res.Old.Segments, res.New.Segments)
	fmt.Fprintf(e.stdout, "  tiers in use   %d -> %d (%.1f -> %.1f per segment)\n", res.Old.TiersInUse, res.New.TiersInUse,
		float64(res.Old.TiersInUse)/float64(max(res.Old.Segments, 1)), float64(res.New.TiersInUse)/float64(max(res.New.Segments, 1)))
	fmt.Fprintf(e.stdout, "  growth steps   %d -> %d\n", res.Old.GrowthSteps, res.New.GrowthSteps)
	return exitOK
}
