package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/sharedmap/sharedmap/hashmap"
)

// jsonOpts are the flags of stats and inspect.
type jsonOpts struct {
	json bool
	all  bool
}

var statsCmd = &command{
	name:    "stats",
	args:    "PATH",
	summary: "print the map's counters and sizes",
	help: `Prints the map's counters and geometry as "Key: value" lines, or with --json
as one JSON object with the keys entries, capacity, max_bloat_factor,
segments, tiers_in_use, tiers_max, bytes_used, bytes_allocatable, file_size,
chunk_size, slots_per_tier, entries_per_tier, compactions, relocations,
cache, evictions, expired, read_only and path. Counters are read without locks: while other processes
write, they are a close estimate. Opens the map read-only.

Example:
  mapctl stats /tmp/m.map --json | jq .entries`,
	flags: func(fs *flag.FlagSet) any {
		o := &jsonOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON instead of text")
		return o
	},
	run: func(e *env, c *command, opts any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		m, err := openExisting(args[0], true)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		if opts.(*jsonOpts).json {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(m.Stats()); err != nil {
				return e.fail(c, err)
			}
			return exitOK
		}
		printStats(e.stdout, m.Stats())
		return exitOK
	},
}

// printStats writes st as "Key: value" lines.
func printStats(w io.Writer, st hashmap.Stats) {
	pct := func(a, b int64) string {
		if b == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
	}
	fmt.Fprintf(w, "Path: %s\n", st.Path)
	fmt.Fprintf(w, "Entries: %d\n", st.Entries)
	fmt.Fprintf(w, "Capacity: %d (%s used)\n", st.Capacity, pct(int64(st.Entries), int64(st.Capacity)))
	fmt.Fprintf(w, "Max bloat factor: %g\n", st.MaxBloatFactor)
	fmt.Fprintf(w, "Segments: %d\n", st.Segments)
	fmt.Fprintf(w, "Tiers in use: %d of %d\n", st.TiersInUse, st.TiersMax)
	fmt.Fprintf(w, "Bytes used: %d of %d allocatable (%s)\n", st.BytesUsed, st.BytesAllocatable, pct(st.BytesUsed, st.BytesAllocatable))
	fmt.Fprintf(w, "File size: %s, sparse\n", humanBytes(st.FileSize))
	fmt.Fprintf(w, "Chunk size: %d\n", st.ChunkSize)
	fmt.Fprintf(w, "Slots per tier: %d\n", st.SlotsPerTier)
	fmt.Fprintf(w, "Entries per tier: %d\n", st.EntriesPerTier)
	fmt.Fprintf(w, "Compactions: %d\n", st.Compactions)
	fmt.Fprintf(w, "Relocations: %d\n", st.Relocations)
	if st.Cache {
		fmt.Fprintf(w, "Cache: evictions %d, expired entries reclaimed %d\n", st.Evictions, st.Expired)
	}
	fmt.Fprintf(w, "Read only: %v\n", st.ReadOnly)
}
