package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// inspectLimit is how many segments inspect shows without --all.
const inspectLimit = 64

var inspectCmd = &command{
	readOnly: true,
	name:     "inspect",
	args:     "PATH",
	summary:  "print the map's layout and a table of its segments",
	help: `Prints the map's layout and sizes (as mapctl stats does), then one row per
segment: its index, entries, tiers (the first one plus chained overflow
tiers), modification sequence (odd while a writer is inside) and lock state.
A map whose file has grown lists each growth step first: when, and the
tiers and file size after it.
Only the first 64 segments are listed unless --all is given. With --json,
prints {"stats": {...}, "segments": [...], "segments_total": N} with the same
limit. Locks and counters are read without locking: a snapshot that may be
changing. A lock held for long by no live process points to a writer that
died inside a put. Opens the map read-only.

Example:
  mapctl inspect /tmp/m.map --all`,
	flags: func(fs *flag.FlagSet) any {
		o := &jsonOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON instead of text")
		fs.BoolVar(&o.all, "all", false, fmt.Sprintf("list every segment, not only the first %d", inspectLimit))
		return o
	},
	run: func(e *env, c *command, opts any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		o := opts.(*jsonOpts)
		m, err := openExisting(args[0], true)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		st := m.Stats()
		growth, err := m.Growth()
		if err != nil {
			return e.fail(c, err)
		}
		segs := m.Segments()
		total := len(segs)
		if !o.all && len(segs) > inspectLimit {
			segs = segs[:inspectLimit]
		}
		if o.json {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			err := enc.Encode(struct {
				Stats         hashmap.Stats         `json:"stats"`
				Growth        []hashmap.GrowthStep  `json:"growth"`
				Segments      []hashmap.SegmentInfo `json:"segments"`
				SegmentsTotal int                   `json:"segments_total"`
			}{st, growth, segs, total})
			if err != nil {
				return e.fail(c, err)
			}
			return exitOK
		}
		printStats(e.stdout, st)
		fmt.Fprintln(e.stdout)
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		if len(growth) > 0 {
			fmt.Fprintln(w, "GROWN AT\tTIERS\tFILE SIZE")
			for _, g := range growth {
				fmt.Fprintf(w, "%s\t%d\t%s\n", g.At.UTC().Format(time.RFC3339Nano), g.Tiers, humanBytes(g.FileSize))
			}
			w.Flush()
			fmt.Fprintln(e.stdout)
		}
		fmt.Fprintln(w, "SEGMENT\tENTRIES\tTIERS\tSEQ\tLOCK")
		for _, s := range segs {
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\n", s.Index, s.Entries, s.Tiers, s.Seq, s.LockStr)
		}
		w.Flush()
		if len(segs) < total {
			fmt.Fprintf(e.stdout, "(%d of %d segments shown; --all lists every one)\n", len(segs), total)
		}
		return exitOK
	},
}
