package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// benchConfig is what every bench worker needs to know; the parent hands
// it to them as one JSON argument.
type benchConfig struct {
	Entries    int           `json:"entries"`
	KeySize    int           `json:"key_size"`
	ValueSize  int           `json:"value_size"`
	Goroutines int           `json:"goroutines"`
	Reads      int           `json:"reads_percent"`
	Batch      int           `json:"batch"` // keys a call: above 1, GetMany and PutMany
	Zipf       bool          `json:"zipf"`
	Duration   time.Duration `json:"duration_ns"`
}

type benchOpts struct {
	benchConfig
	procs      int
	keys, dir  string
	json, keep bool
}

var benchCmd = &command{
	name:    "bench",
	args:    "",
	summary: "measure a map like yours on this machine, from several processes",
	help: `Measures what a map shaped like yours does on this machine. Creates a fresh
map in a temporary directory (--dir picks the filesystem, which matters: see
"Where to put the file" in the README), sized for --entries keys of
--key-size bytes with values of --value-size bytes, and fills it. Then it
starts --procs worker processes (this same program, re-executed; fewer
than 4,096) of
--goroutines goroutines each; for --duration every goroutine picks keys
(--keys uniform, or zipf: s = 1.1, a few keys hot) and does --reads percent
reads (GetInto, every byte of the value checked against its key) and the
rest Puts (a new version of the value, of the same size: an overwrite in
place; from --value-size 24 up, a read torn between two versions counts as
wrong). With --batch N above 1, each call takes N keys, all read with
GetMany or all written with PutMany, and the latencies are per call. All
workers start together.

It prints each worker's operations per second, the total, the wall time per
operation (the run's length times the workers, over all their operations),
and read and write latency percentiles from one operation in 32 timed
(clock reads included: about 20-40 ns). --json prints one JSON object
instead. Exit status 3 if any read returned a wrong value or any operation
failed. The directory is removed afterwards unless --keep is given. Takes
no arguments.

Example:
  mapctl bench --procs 2 --reads 100              # two reader processes
  mapctl bench --entries 100000 --value-size 1024 --reads 50 --keys zipf
  mapctl bench --dir /dev/shm --duration 10s --json
  mapctl bench --reads 0 --batch 16               # PutMany, 16 keys a call`,
	flags: func(fs *flag.FlagSet) any {
		o := &benchOpts{}
		fs.IntVar(&o.Entries, "entries", 1_000_000, "keys in the map")
		fs.IntVar(&o.KeySize, "key-size", 16, "bytes in a key (at least 8)")
		fs.IntVar(&o.ValueSize, "value-size", 64, "bytes in a value (at least 8)")
		fs.IntVar(&o.procs, "procs", 1, "worker processes")
		fs.IntVar(&o.Goroutines, "goroutines", 1, fmt.Sprintf("goroutines per worker process (at most %d)", maxDemoGoroutines))
		fs.IntVar(&o.Reads, "reads", 95, "percent of operations that are reads; the rest are Puts")
		fs.IntVar(&o.Batch, "batch", 1, "keys a call: above 1, reads go through GetMany and writes through PutMany")
		fs.StringVar(&o.keys, "keys", "uniform", "key distribution: uniform or zipf")
		fs.DurationVar(&o.Duration, "duration", 5*time.Second, "how long the workers run")
		fs.StringVar(&o.dir, "dir", "", "directory for the map's temporary directory (default: $TMPDIR or /tmp)")
		fs.BoolVar(&o.json, "json", false, "print one JSON object instead of text")
		fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory and its map file")
		return o
	},
	run: runBench,
}

// benchReport is what a worker prints as its last JSON line, and the sum
// of all of them in the parent.
type benchReport struct {
	Reads     uint64           `json:"reads"`
	Writes    uint64           `json:"writes"`
	BadReads  uint64           `json:"bad_reads"`
	Errors    uint64           `json:"errors"`
	FirstErr  string           `json:"first_error,omitempty"`
	Seconds   float64          `json:"seconds"`
	ReadHist  latencyHistogram `json:"read_histogram"`
	WriteHist latencyHistogram `json:"write_histogram"`
}

func (r *benchReport) add(o *benchReport) {
	r.Reads += o.Reads
	r.Writes += o.Writes
	r.BadReads += o.BadReads
	r.Errors += o.Errors
	if r.FirstErr == "" {
		r.FirstErr = o.FirstErr
	}
	r.ReadHist.add(&o.ReadHist)
	r.WriteHist.add(&o.WriteHist)
}

func runBench(e *env, c *command, opts any, args []string) int {
	o := opts.(*benchOpts)
	if len(args) != 0 {
		return e.usageError(c, "takes no arguments")
	}
	if msg := checkBenchOpts(o); msg != "" {
		return e.usageError(c, msg)
	}
	self, err := os.Executable()
	if err != nil {
		return e.fail(c, err)
	}
	dir, err := os.MkdirTemp(o.dir, "sharedmap-bench-")
	if err != nil {
		return e.fail(c, fmt.Errorf("making the map's directory: %w", err))
	}
	if o.keep {
		defer fmt.Fprintf(e.stderr, "kept %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// An interrupted run still stops its workers and removes the map.
	ctx, stop := interruptContext()
	defer stop()
	path := filepath.Join(dir, "bench.map")
	m, err := hashmap.Open(path, &hashmap.Options{Entries: o.Entries, AverageKeySize: o.KeySize, AverageValueSize: o.ValueSize,
		MaxProcesses: processesFor(o.procs)})
	if errors.Is(err, hashmap.ErrBadOptions) {
		// As in create: flags no map can have are a usage error. The
		// temporary path is left out, since it is gone when this prints.
		return e.usageError(c, "--entries, --key-size and --value-size: "+strings.TrimPrefix(err.Error(), "open "+path+": "))
	}
	if err != nil {
		return e.fail(c, err)
	}
	defer m.Close()
	fillStart := time.Now()
	if err := fillBenchMap(ctx, m, &o.benchConfig, e.stderr); err != nil {
		return e.fail(c, fmt.Errorf("filling the map: %w", err))
	}
	fill := time.Since(fillStart)
	if !o.json {
		printBenchPlan(e.stdout, o, path, fill)
	}
	reports, err := runBenchWorkers(ctx, self, path, o)
	if ctx.Err() != nil {
		// Whatever failed on the way (a worker killed, one not started)
		// is the interrupt's doing, and the context's "context canceled"
		// would only repeat it.
		return e.fail(c, errors.New("interrupted"))
	}
	if err != nil {
		return e.fail(c, err)
	}
	total := sumBenchReports(reports)
	ops := total.Reads + total.Writes
	if ops == 0 {
		return e.fail(c, fmt.Errorf("no operation finished in %v: give a longer --duration", o.Duration))
	}
	workers := o.procs * o.Goroutines
	nsPerOp := total.Seconds * 1e9 * float64(workers) / float64(ops)
	if o.json {
		if err := writeJSONLine(e.stdout, benchJSON(o, reports, &total, fill, nsPerOp)); err != nil {
			return e.fail(c, err)
		}
	} else {
		printBenchResults(e.stdout, o, reports, &total, nsPerOp)
	}
	if total.BadReads > 0 || total.Errors > 0 {
		msg := fmt.Sprintf("%d wrong values read, %d operations failed", total.BadReads, total.Errors)
		if total.FirstErr != "" {
			msg += " (first: " + total.FirstErr + ")"
		}
		return e.fail(c, errors.New(msg))
	}
	return exitOK
}

// sumBenchReports adds up the workers' reports; its Seconds is the
// longest worker's.
func sumBenchReports(reports []benchReport) benchReport {
	var total benchReport
	for i := range reports {
		total.add(&reports[i])
		total.Seconds = max(total.Seconds, reports[i].Seconds)
	}
	return total
}

// checkBenchOpts refuses flags bench cannot run, saying which flag is
// wrong; "" if o is fine. It sets o.Zipf from --keys.
func checkBenchOpts(o *benchOpts) string {
	switch o.keys {
	case "uniform":
	case "zipf":
		o.Zipf = true
	default:
		return fmt.Sprintf("--keys %q: want uniform or zipf", o.keys)
	}
	switch {
	case o.Entries < 1:
		return "--entries must be at least 1"
	case o.KeySize < 8 || o.ValueSize < 8:
		return "--key-size and --value-size must be at least 8: a key and its value carry the key's number"
	case o.procs < 1 || o.Goroutines < 1:
		return "--procs and --goroutines must be at least 1"
	case o.procs >= maxWorkerProcs:
		return tooManyProcs
	case o.Goroutines > maxDemoGoroutines:
		return fmt.Sprintf("--goroutines must be at most %d (a worker process starts them all at once)", maxDemoGoroutines)
	case o.Reads < 0 || o.Reads > 100:
		return "--reads is a percentage, 0 to 100"
	case o.Batch < 1 || o.Batch > maxBenchBatch:
		return fmt.Sprintf("--batch must be from 1 to %d", maxBenchBatch)
	case o.Duration <= 0:
		return "--duration must be positive"
	}
	return ""
}

// printBenchPlan says what the run is about to do: the map filled in
// fill, and the workers' mix.
func printBenchPlan(w io.Writer, o *benchOpts, path string, fill time.Duration) {
	removed := " (removed at the end)"
	if o.keep {
		removed = ""
	}
	fmt.Fprintf(w, "map %s%s: %s keys of %d B, values of %d B, filled in %v (%.0f ns a Put)\n",
		path, removed, thousands(uint64(o.Entries)), o.KeySize, o.ValueSize, fill.Round(time.Millisecond), float64(fill.Nanoseconds())/float64(o.Entries))
	fmt.Fprintf(w, "%d process(es) x %d goroutine(s), %d%% reads, %s keys, for %v\n",
		o.procs, o.Goroutines, o.Reads, o.keys, o.Duration)
}

// benchJSON is the --json report: the run's parameters, its totals and
// latency percentiles, and each process's rate.
func benchJSON(o *benchOpts, reports []benchReport, total *benchReport, fill time.Duration, nsPerOp float64) map[string]any {
	ops := total.Reads + total.Writes
	out := map[string]any{
		"entries": o.Entries, "key_size": o.KeySize, "value_size": o.ValueSize,
		"procs": o.procs, "goroutines": o.Goroutines, "reads_percent": o.Reads, "keys": o.keys,
		"duration_seconds": total.Seconds, "fill_ns_per_put": float64(fill.Nanoseconds()) / float64(o.Entries),
		"reads": total.Reads, "writes": total.Writes, "ops_per_second": perSecond(ops, total.Seconds),
		"ns_per_op": nsPerOp, "bad_reads": total.BadReads, "errors": total.Errors,
		"read_p50_ns": total.ReadHist.percentile(50), "read_p99_ns": total.ReadHist.percentile(99), "read_p999_ns": total.ReadHist.percentile(99.9),
		"write_p50_ns": total.WriteHist.percentile(50), "write_p99_ns": total.WriteHist.percentile(99), "write_p999_ns": total.WriteHist.percentile(99.9),
		"read_samples": total.ReadHist.count(), "write_samples": total.WriteHist.count(),
	}
	if total.FirstErr != "" {
		out["first_error"] = total.FirstErr
	}
	per := make([]float64, len(reports))
	for i, r := range reports {
		per[i] = perSecond(r.Reads+r.Writes, r.Seconds)
	}
	out["ops_per_second_per_process"] = per
	return out
}

// printBenchResults is the report without --json: each worker's rate, the
// total, the latency percentiles and what went wrong.
func printBenchResults(w io.Writer, o *benchOpts, reports []benchReport, total *benchReport, nsPerOp float64) {
	ops := total.Reads + total.Writes
	for i, r := range reports {
		fmt.Fprintf(w, "  worker %d: %s reads, %s writes in %.2fs: %s ops/s\n",
			i, thousands(r.Reads), thousands(r.Writes), r.Seconds, thousands(uint64(perSecond(r.Reads+r.Writes, r.Seconds))))
	}
	fmt.Fprintf(w, "total: %s ops/s; %.0f ns an operation per worker\n", thousands(uint64(perSecond(ops, total.Seconds))), nsPerOp)
	sampled := "1 in 32"
	if o.Batch > 1 {
		sampled = fmt.Sprintf("every call of %d keys", o.Batch)
	}
	for _, h := range []struct {
		name string
		h    *latencyHistogram
	}{{"read", &total.ReadHist}, {"write", &total.WriteHist}} {
		if h.h.count() > 0 {
			fmt.Fprintf(w, "%s latency (%s timed, %s): p50 %s, p99 %s, p99.9 %s\n", h.name, thousands(h.h.count()), sampled,
				fmtNanos(h.h.percentile(50)), fmtNanos(h.h.percentile(99)), fmtNanos(h.h.percentile(99.9)))
		}
	}
	fmt.Fprintf(w, "bad reads: %d, failed operations: %d\n", total.BadReads, total.Errors)
}

// perSecond is n operations over seconds as a rate.
func perSecond(n uint64, seconds float64) float64 { return float64(n) / max(seconds, 1e-9) }

func fmtNanos(ns float64) string {
	return time.Duration(ns).Round(time.Nanosecond).String()
}

// maxWorkerProcs bounds --procs of bench and demo: a map's process slots
// (hashmap's limit), one of them the parent's.
const maxWorkerProcs = 4096

var tooManyProcs = fmt.Sprintf("--procs must be below %d: a map has at most %d process slots, and this process takes one", maxWorkerProcs, maxWorkerProcs)

// maxBenchBatch bounds --batch.
const maxBenchBatch = 4096
