package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// jsonOpts are the flags of stats and inspect.
type jsonOpts struct {
	json bool
	all  bool
}

// statsOpts are the flags of stats.
type statsOpts struct {
	json     bool
	segments bool
	watch    time.Duration
	count    int // --watch lines; 0: until interrupted
}

var statsCmd = &command{
	readOnly: true,
	name:     "stats",
	args:     "PATH",
	summary:  "print the map's counters and sizes, once or live",
	help: `Prints the map's counters and geometry as "Key: value" lines, or with --json
as one JSON object with the keys entries, capacity, max_bloat_factor,
segments, tiers_in_use, tiers_max, bytes_used, bytes_allocatable, file_size,
chunk_size, slots_per_tier, entries_per_tier, compactions, relocations,
moves_counted, locks, lock_algorithm, cache, counters, undo_records,
fast_ledgers, hits, misses, puts, deletes, evictions, expired, lock_waits,
lock_timeouts, read_only, resident, huge_page_bytes and path (and
per_segment, a list of the same counters for each segment, with --segments).

entries counts every entry stored: in a cache map, expired ones too until
their space is reclaimed (by a write of the same key, or by the eviction
hand when a segment is full); get and dump skip them at once.

undo_records is false for a map created with --no-undo, and fast_ledgers
false for a file from before Put's fast path had a lock word of its own.

resident is how much of the file this command mapped in (the segment
headers and first tiers), and huge_page_bytes how much of that came in
2 MiB pages: nonzero when the file's page cache holds 2 MiB folios, which
is what makes random lookups cheap (a map opened with the library's
Options.NoHugePages asks for none).

The counters (hits, misses, puts, deletes, evictions, expired, lock waits
and timeouts) are kept in the file by every process that opens the map for
writing, since the map was created, so this command sees them while those
processes run; lookups by read-only processes are not counted. Files from
before the counters report "counters": false and zeros.

With --watch INTERVAL it prints one line every INTERVAL, with the operations
per second since the previous line, until interrupted (Ctrl-C, after which
it exits with status 0) or --count lines (with --json, one JSON object per line, without per-segment rates: --segments
is refused with --watch). --watch 0s is the default: print once.

Counters are read without locks: while other processes write, they are a
close estimate. Opens the map read-only.

Examples:
  mapctl stats /tmp/m.map --json | jq .hits
  mapctl stats /tmp/m.map --watch 1s`,
	flags: func(fs *flag.FlagSet) any {
		o := &statsOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON instead of text")
		fs.BoolVar(&o.segments, "segments", false, "with --json and no --watch: add per_segment, each segment's counters")
		fs.DurationVar(&o.watch, "watch", 0, "print a line of rates every INTERVAL (e.g. 1s, at least 10ms) until interrupted; 0: print once")
		fs.IntVar(&o.count, "count", 0, "with --watch: stop after this many lines (0: never)")
		return o
	},
	run: func(e *env, c *command, opts any, args []string) int {
		if !e.wantArgs(c, args, 1) {
			return exitUsage
		}
		o := opts.(*statsOpts)
		if o.watch < 0 || (o.watch > 0 && o.watch < 10*time.Millisecond) {
			return e.usageError(c, "--watch takes an interval of at least 10ms")
		}
		if o.count < 0 {
			return e.usageError(c, "--count must be 0 or more")
		}
		if o.count > 0 && o.watch == 0 {
			// --watch 0s is the default, no watching: ask for an interval,
			// not for the flag, which may well have been given.
			return e.usageError(c, "--count counts --watch lines: give --watch an interval of at least 10ms")
		}
		if o.segments && !o.json {
			return e.usageError(c, "--segments adds per_segment to the JSON: give --json too")
		}
		if o.segments && o.watch > 0 {
			return e.usageError(c, "--segments works only without --watch: --watch lines have no per-segment rates")
		}
		m, err := openExisting(args[0], true)
		if err != nil {
			return e.fail(c, err)
		}
		defer m.Close()
		if o.watch > 0 {
			return watchStats(e, c, m, o)
		}
		if o.json {
			out := statsJSON{Stats: m.Stats()}
			if o.segments {
				out.PerSegment = m.Segments()
			}
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(out); err != nil {
				return e.fail(c, err)
			}
			return exitOK
		}
		printStats(e.stdout, m.Stats())
		return exitOK
	},
}

// statsJSON is what stats --json prints.
type statsJSON struct {
	hashmap.Stats
	PerSegment []hashmap.SegmentInfo `json:"per_segment,omitempty"`
}

// watchStats prints the counters' rates every o.watch, until it has
// printed o.count lines or is interrupted, which is how a watch without a
// count is meant to end: exit status 0 either way.
func watchStats(e *env, c *command, m *hashmap.Map, o *statsOpts) int {
	ctx, stop := interruptContext()
	defer stop()
	prev, at := m.Stats(), time.Now()
	tick := time.NewTicker(o.watch)
	defer tick.Stop()
	for round := 0; o.count == 0 || round < o.count; round++ {
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
		st, now := m.Stats(), time.Now()
		secs := now.Sub(at).Seconds()
		rate := func(a, b int64) float64 { return float64(a-b) / secs }
		lookups := (st.Hits - prev.Hits) + (st.Misses - prev.Misses)
		hitRatio := 0.0
		if lookups > 0 {
			hitRatio = float64(st.Hits-prev.Hits) / float64(lookups)
		}
		if o.json {
			line := map[string]any{
				"time": now.Format(time.RFC3339Nano), "entries": st.Entries,
				"hits_per_s": rate(st.Hits, prev.Hits), "misses_per_s": rate(st.Misses, prev.Misses),
				"puts_per_s": rate(st.Puts, prev.Puts), "deletes_per_s": rate(st.Deletes, prev.Deletes),
				"evictions_per_s": rate(st.Evictions, prev.Evictions), "expired_per_s": rate(st.Expired, prev.Expired),
				"lock_waits_per_s": rate(st.LockWaits, prev.LockWaits), "lock_timeouts": st.LockTimeouts - prev.LockTimeouts,
				"hit_ratio": hitRatio,
			}
			if err := json.NewEncoder(e.stdout).Encode(line); err != nil {
				return e.fail(c, err)
			}
		} else {
			fmt.Fprintf(e.stdout, "%s entries %d  hits/s %.0f  misses/s %.0f  hit ratio %.3f  puts/s %.0f  deletes/s %.0f  evictions/s %.0f  expired/s %.0f  lock waits/s %.0f  lock timeouts %d\n",
				now.Format("15:04:05"), st.Entries, rate(st.Hits, prev.Hits), rate(st.Misses, prev.Misses), hitRatio,
				rate(st.Puts, prev.Puts), rate(st.Deletes, prev.Deletes), rate(st.Evictions, prev.Evictions),
				rate(st.Expired, prev.Expired), rate(st.LockWaits, prev.LockWaits), st.LockTimeouts-prev.LockTimeouts)
		}
		prev, at = st, now
	}
	return exitOK
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
	fmt.Fprintf(w, "File size: %s (overflow tiers take disk only once used)\n", humanBytes(st.FileSize))
	fmt.Fprintf(w, "Chunk size: %d\n", st.ChunkSize)
	fmt.Fprintf(w, "Slots per tier: %d\n", st.SlotsPerTier)
	fmt.Fprintf(w, "Entries per tier: %d\n", st.EntriesPerTier)
	switch {
	case st.MovesCounted:
		fmt.Fprintf(w, "Compactions: %d, relocations: %d\n", st.Compactions, st.Relocations)
	case st.Compactions != 0 || st.Relocations != 0:
		// An older file: counted in this process only, which for
		// mapctl is nothing unless it wrote, so zeros would mislead.
		fmt.Fprintf(w, "Compactions, relocations by this process: %d, %d\n", st.Compactions, st.Relocations)
	}
	if st.Counters {
		fmt.Fprintf(w, "Hits: %d, misses: %d\n", st.Hits, st.Misses)
		fmt.Fprintf(w, "Puts: %d, deletes: %d\n", st.Puts, st.Deletes)
		fmt.Fprintf(w, "Lock waits: %d, lock timeouts: %d\n", st.LockWaits, st.LockTimeouts)
	}
	if st.Cache {
		fmt.Fprintf(w, "Cache: evictions %d, expired entries reclaimed %d\n", st.Evictions, st.Expired)
	}
	if st.UndoRecords {
		fmt.Fprintf(w, "Undo records: yes (a process killed while rewriting a value leaves the old one or the new one, whole)\n")
	} else {
		fmt.Fprintf(w, "Undo records: no (a process killed while rewriting a value in place loses that key)\n")
	}
	if st.FastLedgers {
		fmt.Fprintf(w, "Fast ledgers: yes (Put's fast path keeps its lock in one word of its own)\n")
	} else {
		fmt.Fprintf(w, "Fast ledgers: no (a file from before them: Put's fast path pays the ledger's and the in-flight count's atomics)\n")
	}
	fmt.Fprintf(w, "Opened read-only by this process: %v\n", st.ReadOnly)
	fmt.Fprintf(w, "Resident in this process: %s, %s of it in 2 MiB pages\n", humanBytes(st.Resident), humanBytes(st.HugePageBytes))
}
