package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
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
segments, max_segments, tiers_in_use, tiers_max, tiers_limit, max_file_size, growth_steps,
bytes_used, bytes_allocatable, file_size,
chunk_size, slots_per_tier, entries_per_tier, compactions, relocations,
moves_counted, locks, lock_algorithm, cache, counters, undo_records,
fast_ledgers, hits, misses, puts, deletes, evictions, expired, lock_waits,
lock_timeouts, read_only, resident, huge_page_bytes and path (and
per_segment, a list of the same counters for each segment, with --segments).

entries counts every entry stored: in a cache map, expired ones too until
their space is reclaimed (by a write of the same key, or by the eviction
hand when a segment is full); get and dump skip them at once.

segments is the count of segments in use, and max_segments the most the
map may split into as it grows (segments in a map that does not split):
a map whose file splits adds a segment at a time as it fills.

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

With --watch INTERVAL it prints a table within 80 columns: a header, then
a row every INTERVAL with the rates since the row before, until
interrupted (Ctrl-C, after which it exits with status 0) or for --count
rows. --watch 0s is the default: print once.

  time      the row's time of day
  entries   entries stored, as entries above
  gets/s    lookups a second (hits and misses)
  hit%      of those lookups, the part that found the key; "-" if none
  puts/s    entries stored a second
  dels/s    entries deleted a second
  evict/s   entries evicted a second (cache maps only)
  exp/s     expired entries reclaimed a second (cache maps only)
  waits/s   lock waits a second
  tmo       lock timeouts since the row before

  time         entries   gets/s   hit%   puts/s dels/s waits/s tmo
  14:02:31   1,234,567  812,340  97.5%   40,112    103       2   0

Counts are grouped in thousands; one too wide for its column is shortened
to a suffix (12.3M, k for thousands, M millions, G billions). With --json
each row is a JSON object on a line of its own, with no header and the
keys time, entries, hits_per_s, misses_per_s, hit_ratio (0 with no
lookups), puts_per_s, deletes_per_s, evictions_per_s, expired_per_s,
lock_waits_per_s and lock_timeouts. --segments is refused with --watch:
the rows have no per-segment rates.

Counters are read without locks: while other processes write, they are a
close estimate. Opens the map read-only.

Examples:
  mapctl stats /tmp/m.map --json | jq .hits
  mapctl stats /tmp/m.map --watch 1s`,
	flags: func(fs *flag.FlagSet) any {
		o := &statsOpts{}
		fs.BoolVar(&o.json, "json", false, "print JSON instead of text")
		fs.BoolVar(&o.segments, "segments", false, "with --json and no --watch: add per_segment, each segment's counters")
		fs.DurationVar(&o.watch, "watch", 0, "print a table row of rates every INTERVAL (e.g. 1s, at least 10ms) until interrupted; 0: print once")
		fs.IntVar(&o.count, "count", 0, "with --watch: stop after this many rows (0: never)")
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
	if !o.json {
		fmt.Fprintln(e.stdout, watchHeader(prev.Cache))
	}
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
		if o.json {
			lookups := (st.Hits - prev.Hits) + (st.Misses - prev.Misses)
			hitRatio := 0.0
			if lookups > 0 {
				hitRatio = float64(st.Hits-prev.Hits) / float64(lookups)
			}
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
			fmt.Fprintln(e.stdout, watchRow(now, st, prev, secs))
		}
		prev, at = st, now
	}
	return exitOK
}

// watchColumns are the columns of the stats --watch table, in order:
// their headers, their widths and whether only cache maps have them. The
// widths, each with one space before it, add up to 79 for a cache map:
// the table fits an 80-column terminal without wrapping.
var watchColumns = []struct {
	name  string
	width int
	cache bool
}{
	{"time", 8, false},
	{"entries", 11, false},
	{"gets/s", 8, false},
	{"hit%", 6, false},
	{"puts/s", 8, false},
	{"dels/s", 6, false},
	{"evict/s", 7, true},
	{"exp/s", 6, true},
	{"waits/s", 7, false},
	{"tmo", 3, false},
}

// watchCell is one cell of the stats --watch table: text, or if that is
// empty a count, grouped in thousands or shortened to fit its column.
type watchCell struct {
	text string
	n    int64
}

// watchHeader is the first line of the stats --watch table.
func watchHeader(cache bool) string {
	cells := make([]watchCell, len(watchColumns))
	for i, c := range watchColumns {
		cells[i] = watchCell{text: c.name}
	}
	return watchLine(cells, cache)
}

// watchRow is the stats --watch table's row for st, read at now, secs
// seconds after prev.
func watchRow(now time.Time, st, prev hashmap.Stats, secs float64) string {
	rate := func(a, b int64) watchCell { return watchCell{n: int64(math.Round(float64(a-b) / secs))} }
	hitRatio := watchCell{text: "-"} // no lookups: no ratio
	if lookups := (st.Hits - prev.Hits) + (st.Misses - prev.Misses); lookups > 0 {
		hitRatio.text = fmt.Sprintf("%.1f%%", 100*float64(st.Hits-prev.Hits)/float64(lookups))
	}
	cells := []watchCell{
		{text: now.Format("15:04:05")},
		{n: int64(st.Entries)},
		rate(st.Hits+st.Misses, prev.Hits+prev.Misses),
		hitRatio,
		rate(st.Puts, prev.Puts),
		rate(st.Deletes, prev.Deletes),
		rate(st.Evictions, prev.Evictions),
		rate(st.Expired, prev.Expired),
		rate(st.LockWaits, prev.LockWaits),
		{n: st.LockTimeouts - prev.LockTimeouts},
	}
	return watchLine(cells, st.Cache)
}

// watchLine lays cells out in watchColumns: the first left-aligned, the
// others right-aligned after a space.
func watchLine(cells []watchCell, cache bool) string {
	var b strings.Builder
	for i, c := range watchColumns {
		if c.cache && !cache {
			continue
		}
		text := cells[i].text
		if text == "" {
			text = fitCount(cells[i].n, c.width)
		}
		if i == 0 {
			fmt.Fprintf(&b, "%-*s", c.width, text)
		} else {
			fmt.Fprintf(&b, " %*s", c.width, text)
		}
	}
	return b.String()
}

// fitCount writes n, at least 0, with its digits grouped in thousands
// (1,234,567) or, if that is wider than width, shortened to a k, M, G or
// T suffix and as many of three significant digits as fit (12.3M, 12M).
func fitCount(n int64, width int) string {
	n = max(n, 0)
	s := thousands(uint64(n))
	if len(s) <= width {
		return s
	}
	v := float64(n)
	var suffix string
	for _, suffix = range []string{"k", "M", "G", "T"} {
		if v /= 1000; math.Round(v) < 1000 {
			break
		}
	}
	whole := len(strconv.FormatFloat(v, 'f', 0, 64))
	for digits := 3; ; digits-- {
		s = strconv.FormatFloat(v, 'f', max(digits-whole, 0), 64) + suffix
		if len(s) <= width || digits <= whole {
			return s
		}
	}
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
	if st.MaxSegments > st.Segments {
		fmt.Fprintf(w, "Segments: %d in use, splits up to %d\n", st.Segments, st.MaxSegments)
	} else {
		fmt.Fprintf(w, "Segments: %d\n", st.Segments)
	}
	fmt.Fprintf(w, "Tiers in use: %d of %d\n", st.TiersInUse, st.TiersMax)
	fmt.Fprintf(w, "Bytes used: %d of %d allocatable (%s)\n", st.BytesUsed, st.BytesAllocatable, pct(st.BytesUsed, st.BytesAllocatable))
	fmt.Fprintf(w, "File size: %s (overflow tiers take disk only once used)\n", humanBytes(st.FileSize))
	if st.MaxFileSize > st.FileSize || st.GrowthSteps > 0 {
		fmt.Fprintf(w, "Grows to: %s at most (%d tiers); grown %d %s\n", humanBytes(st.MaxFileSize), st.TiersLimit, st.GrowthSteps, plural(st.GrowthSteps, "time", "times"))
	}
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
