package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	switch o.keys {
	case "uniform":
	case "zipf":
		o.Zipf = true
	default:
		return e.usageError(c, fmt.Sprintf("--keys %q: want uniform or zipf", o.keys))
	}
	switch {
	case o.Entries < 1:
		return e.usageError(c, "--entries must be at least 1")
	case o.KeySize < 8 || o.ValueSize < 8:
		return e.usageError(c, "--key-size and --value-size must be at least 8: a key and its value carry the key's number")
	case o.procs < 1 || o.Goroutines < 1:
		return e.usageError(c, "--procs and --goroutines must be at least 1")
	case o.procs >= maxWorkerProcs:
		return e.usageError(c, tooManyProcs)
	case o.Goroutines > maxDemoGoroutines:
		return e.usageError(c, fmt.Sprintf("--goroutines must be at most %d (a worker process starts them all at once)", maxDemoGoroutines))
	case o.Reads < 0 || o.Reads > 100:
		return e.usageError(c, "--reads is a percentage, 0 to 100")
	case o.Batch < 1 || o.Batch > maxBenchBatch:
		return e.usageError(c, fmt.Sprintf("--batch must be from 1 to %d", maxBenchBatch))
	case o.Duration <= 0:
		return e.usageError(c, "--duration must be positive")
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
		MaxProcesses: max(hashmap.DefaultMaxProcesses, o.procs+1)})
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
		removed := " (removed at the end)"
		if o.keep {
			removed = ""
		}
		fmt.Fprintf(e.stdout, "map %s%s: %s keys of %d B, values of %d B, filled in %v (%.0f ns a Put)\n",
			path, removed, thousands(uint64(o.Entries)), o.KeySize, o.ValueSize, fill.Round(time.Millisecond), float64(fill.Nanoseconds())/float64(o.Entries))
		fmt.Fprintf(e.stdout, "%d process(es) x %d goroutine(s), %d%% reads, %s keys, for %v\n",
			o.procs, o.Goroutines, o.Reads, o.keys, o.Duration)
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
	var total benchReport
	for i := range reports {
		total.add(&reports[i])
		total.Seconds = max(total.Seconds, reports[i].Seconds)
	}
	ops := total.Reads + total.Writes
	if ops == 0 {
		return e.fail(c, fmt.Errorf("no operation finished in %v: give a longer --duration", o.Duration))
	}
	workers := o.procs * o.Goroutines
	nsPerOp := total.Seconds * 1e9 * float64(workers) / float64(ops)
	if o.json {
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
		if err := writeJSONLine(e.stdout, out); err != nil {
			return e.fail(c, err)
		}
	} else {
		for i, r := range reports {
			fmt.Fprintf(e.stdout, "  worker %d: %s reads, %s writes in %.2fs: %s ops/s\n",
				i, thousands(r.Reads), thousands(r.Writes), r.Seconds, thousands(uint64(perSecond(r.Reads+r.Writes, r.Seconds))))
		}
		fmt.Fprintf(e.stdout, "total: %s ops/s; %.0f ns an operation per worker\n", thousands(uint64(perSecond(ops, total.Seconds))), nsPerOp)
		sampled := "1 in 32"
		if o.Batch > 1 {
			sampled = fmt.Sprintf("every call of %d keys", o.Batch)
		}
		for _, h := range []struct {
			name string
			h    *latencyHistogram
		}{{"read", &total.ReadHist}, {"write", &total.WriteHist}} {
			if h.h.count() > 0 {
				fmt.Fprintf(e.stdout, "%s latency (%s timed, %s): p50 %s, p99 %s, p99.9 %s\n", h.name, thousands(h.h.count()), sampled,
					fmtNanos(h.h.percentile(50)), fmtNanos(h.h.percentile(99)), fmtNanos(h.h.percentile(99.9)))
			}
		}
		fmt.Fprintf(e.stdout, "bad reads: %d, failed operations: %d\n", total.BadReads, total.Errors)
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

// perSecond is n operations over seconds as a rate.
func perSecond(n uint64, seconds float64) float64 { return float64(n) / max(seconds, 1e-9) }

func fmtNanos(ns float64) string {
	return time.Duration(ns).Round(time.Nanosecond).String()
}

// benchKey writes key number i into key (len(key) >= 8): the number
// scrambled by an odd multiplier (a bijection, so keys stay distinct and
// their first bytes vary), then a fixed filler.
func benchKey(key []byte, i uint64) {
	binary.BigEndian.PutUint64(key, i*0x9e3779b97f4a7c15)
	for j := 8; j < len(key); j++ {
		key[j] = 'k'
	}
}

// Bench values: every byte derives from the key's number i and, in values
// of 24 bytes or more, a version, so that a reader checks the whole value
// against its key and a read torn between two Puts of the key shows:
//
//	bytes 0-7   i, little-endian
//	bytes 8-15  the version, little-endian (values of 24 bytes or more)
//	the rest    words s, s+benchStep, s+2*benchStep, ..., little-endian,
//	            the last one cut short, where s = benchSeed(i, version)
//
// Values under 24 bytes have no version (it is 0), as it would have no
// whole word after it to be checked by: rewrites of them are alike. Words
// rather than bytes keep making and checking a value cheap beside the Put
// or Get (measured: about 6 and 7 ns for 64 B, 35 and 50 ns for 1 KiB); a
// Put's value is made before its clock starts, a Get's checked after.
const benchStep = 0x9e3779b97f4a7c15

// benchSeed mixes a key's number and a version into the first word of a
// value's tail (splitmix64's finalizer: every bit of either moves every
// byte), so that neither a neighbour's value nor another version of the
// key's own matches it.
func benchSeed(i, version uint64) uint64 {
	x := i ^ version*benchStep
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// benchValue makes value (len(value) >= 8) key number i's value of the
// given version (ignored under 24 bytes).
func benchValue(value []byte, i, version uint64) {
	binary.LittleEndian.PutUint64(value, i)
	tail := value[8:]
	if len(tail) >= 16 {
		binary.LittleEndian.PutUint64(tail, version)
		tail = tail[8:]
	} else {
		version = 0
	}
	benchFill(tail, benchSeed(i, version))
}

// benchFill writes the words s, s+benchStep, ... into tail, four at a time
// (twice as fast as one by one).
func benchFill(tail []byte, s uint64) {
	step := uint64(benchStep)
	s1, s2, s3, step4 := s+step, s+2*step, s+3*step, 4*step
	for len(tail) >= 32 {
		w := tail[:32]
		binary.LittleEndian.PutUint64(w, s)
		binary.LittleEndian.PutUint64(w[8:], s1)
		binary.LittleEndian.PutUint64(w[16:], s2)
		binary.LittleEndian.PutUint64(w[24:], s3)
		s, s1, s2, s3 = s+step4, s1+step4, s2+step4, s3+step4
		tail = tail[32:]
	}
	for len(tail) >= 8 {
		binary.LittleEndian.PutUint64(tail, s)
		s += step
		tail = tail[8:]
	}
	for j := range tail {
		tail[j] = byte(s >> (8 * j))
	}
}

// benchValueOK says whether v is a value benchValue makes for key number
// i, of n bytes and any version: every byte is checked.
func benchValueOK(v []byte, i uint64, n int) bool {
	if len(v) != n || binary.LittleEndian.Uint64(v) != i {
		return false
	}
	tail := v[8:]
	var version uint64
	if len(tail) >= 16 {
		version = binary.LittleEndian.Uint64(tail)
		tail = tail[8:]
	}
	return benchTailOK(tail, benchSeed(i, version))
}

// benchTailOK says whether tail holds what benchFill(tail, s) writes. It
// ors the differences of four words at a time and tests once, rather than
// branching on every word.
func benchTailOK(tail []byte, s uint64) bool {
	var diff uint64
	step := uint64(benchStep)
	s1, s2, s3, step4 := s+step, s+2*step, s+3*step, 4*step
	for len(tail) >= 32 {
		w := tail[:32]
		// (^ and | bind alike in Go: the parentheses matter.)
		diff |= (binary.LittleEndian.Uint64(w) ^ s) | (binary.LittleEndian.Uint64(w[8:]) ^ s1) |
			(binary.LittleEndian.Uint64(w[16:]) ^ s2) | (binary.LittleEndian.Uint64(w[24:]) ^ s3)
		s, s1, s2, s3 = s+step4, s1+step4, s2+step4, s3+step4
		tail = tail[32:]
	}
	for len(tail) >= 8 {
		diff |= binary.LittleEndian.Uint64(tail) ^ s
		s += step
		tail = tail[8:]
	}
	for j := range tail {
		diff |= uint64(tail[j] ^ byte(s>>(8*j)))
	}
	return diff == 0
}

// fillBenchMap puts every key, drawing a progress bar on w when it is a
// terminal.
func fillBenchMap(ctx context.Context, m *hashmap.Map, cfg *benchConfig, w io.Writer) error {
	key, value := make([]byte, cfg.KeySize), make([]byte, cfg.ValueSize)
	p := newProgress(w, "filling", "keys", int64(cfg.Entries))
	defer p.done()
	for i := range cfg.Entries {
		benchKey(key, uint64(i))
		benchValue(value, uint64(i), 0)
		if err := m.Put(key, value); err != nil {
			return err
		}
		if i&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted after %d keys", i)
			}
			p.update(int64(i), int64(i))
		}
	}
	return nil
}

// runBenchWorkers starts the workers, waits until every one has opened the
// map, lets them all go at once and collects their reports. When ctx ends
// it kills them and returns what that made fail: the caller checks ctx.
func runBenchWorkers(ctx context.Context, self, path string, o *benchOpts) ([]benchReport, error) {
	cfg, err := json.Marshal(o.benchConfig)
	if err != nil {
		return nil, err
	}
	type worker struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr bytes.Buffer
	}
	workers := make([]*worker, o.procs)
	defer func() {
		for _, w := range workers {
			if w != nil && w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Kill()
				_ = w.cmd.Wait()
			}
		}
	}()
	for i := range workers {
		w := &worker{cmd: exec.CommandContext(ctx, self, "bench-worker", path, string(cfg))}
		w.cmd.Env = append(os.Environ(), demoWorkerEnv+"=1")
		w.cmd.SysProcAttr = workerProcAttr()
		w.cmd.Stderr = &w.stderr
		if w.stdin, err = w.cmd.StdinPipe(); err != nil {
			return nil, err
		}
		out, err := w.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		w.stdout = bufio.NewReaderSize(out, 1<<16)
		if err := w.cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting worker %d: %w", i, err)
		}
		workers[i] = w
	}
	failed := func(i int, w *worker, err error) error {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
		return fmt.Errorf("worker %d: %v: %s", i, err, bytes.TrimSpace(w.stderr.Bytes()))
	}
	for i, w := range workers {
		if line, err := w.stdout.ReadString('\n'); err != nil || line != "ready\n" {
			if err == nil {
				err = fmt.Errorf("said %q instead of ready", strings.TrimSpace(line))
			}
			return nil, failed(i, w, err)
		}
	}
	for i, w := range workers {
		// The start signal. A worker whose stdin ends without it (this
		// process died) gives up instead.
		if _, err := io.WriteString(w.stdin, benchGo); err != nil {
			return nil, failed(i, w, err)
		}
		_ = w.stdin.Close()
	}
	reports := make([]benchReport, len(workers))
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, rerr := io.ReadAll(w.stdout)
			werr := w.cmd.Wait()
			switch {
			case werr != nil:
				errs[i] = fmt.Errorf("worker %d: %v: %s", i, werr, bytes.TrimSpace(w.stderr.Bytes()))
			case rerr != nil:
				errs[i] = fmt.Errorf("worker %d: reading its report: %v", i, rerr)
			default:
				if err := json.Unmarshal(bytes.TrimSpace(data), &reports[i]); err != nil {
					errs[i] = fmt.Errorf("worker %d: no report (%v): %s", i, err, bytes.TrimSpace(w.stderr.Bytes()))
				}
			}
		}()
	}
	wg.Wait()
	return reports, errors.Join(errs...)
}

// zipfSpread is a prime that spreads Zipf ranks over the keys.
const zipfSpread = 1_000_000_007

// benchGo is the line that starts a bench worker.
const benchGo = "go\n"

// maxWorkerProcs bounds --procs of bench and demo: a map's process slots
// (hashmap's limit), one of them the parent's.
const maxWorkerProcs = 4096

var tooManyProcs = fmt.Sprintf("--procs must be below %d: a map has at most %d process slots, and this process takes one", maxWorkerProcs, maxWorkerProcs)

var benchWorkerCmd = &command{
	name:    "bench-worker",
	args:    "PATH CONFIG",
	summary: "one worker process of mapctl bench (internal)",
	help: `Internal: mapctl bench starts its worker processes with this command. Opens
the map PATH, prints "ready", waits for a "go" line on its standard input, runs
the goroutines CONFIG (JSON) describes and prints its report as one JSON
line.

Example:
  mapctl bench-worker /tmp/bench.map '{"entries":1000,"key_size":16,"value_size":64,"goroutines":1,"reads_percent":95,"duration_ns":1000000000}'`,
	hidden: true,
	run:    runBenchWorker,
}

func runBenchWorker(e *env, c *command, _ any, args []string) int {
	if !e.wantArgs(c, args, 2) {
		return exitUsage
	}
	var cfg benchConfig
	if err := json.Unmarshal([]byte(args[1]), &cfg); err != nil {
		return e.usageError(c, fmt.Sprintf("CONFIG: %v", err))
	}
	if cfg.Entries < 1 || cfg.KeySize < 8 || cfg.ValueSize < 8 || cfg.Goroutines < 1 || cfg.Duration <= 0 {
		return e.usageError(c, "CONFIG: entries, goroutines and duration must be positive, sizes at least 8")
	}
	m, err := openExisting(args[0], false)
	if err != nil {
		return e.fail(c, err)
	}
	defer m.Close()
	if _, err := fmt.Fprintln(e.stdout, "ready"); err != nil {
		return e.fail(c, err)
	}
	if line, _ := bufio.NewReader(e.stdin).ReadString('\n'); line != benchGo {
		return e.fail(c, errors.New("no start signal on stdin: mapctl bench is gone"))
	}
	rep := benchWork(m, &cfg)
	if err := writeJSONLine(e.stdout, rep); err != nil {
		return e.fail(c, err)
	}
	return exitOK
}

// benchWork runs cfg.Goroutines goroutines for cfg.Duration and sums up
// what they did.
func benchWork(m *hashmap.Map, cfg *benchConfig) benchReport {
	var stop atomic.Bool
	var mu sync.Mutex
	var total benchReport
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(cfg.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(time.Now().UnixNano() + int64(g)*7919))
			var zipf *rand.Zipf
			if cfg.Zipf && cfg.Entries > 1 {
				zipf = rand.NewZipf(r, 1.1, 1, uint64(cfg.Entries-1))
			}
			key, value := make([]byte, cfg.KeySize), make([]byte, cfg.ValueSize)
			buf := make([]byte, 0, cfg.ValueSize)
			// Each Put writes a new version of the value: this
			// goroutine's own sequence, so that a read torn between two
			// writers' Puts shows too.
			version := r.Uint64()
			var rep benchReport
			note := func(err error) {
				if rep.Errors++; rep.FirstErr == "" {
					rep.FirstErr = err.Error()
				}
			}
			pick := func() uint64 {
				if zipf != nil {
					// Hot keys spread over the key space, not all in the
					// segments of the smallest numbers: rank r is key
					// r*p mod Entries, one to one while the prime p does
					// not divide Entries.
					return zipf.Uint64() * zipfSpread % uint64(cfg.Entries)
				}
				return uint64(r.Int63n(int64(cfg.Entries)))
			}
			if cfg.Batch > 1 {
				benchBatches(m, cfg, &stop, r, pick, version, &rep, note)
			}
			for n := uint64(0); cfg.Batch <= 1; n++ {
				if n&255 == 0 && stop.Load() {
					break
				}
				i := pick()
				benchKey(key, i)
				read := r.Intn(100) < cfg.Reads
				if !read {
					version++
					benchValue(value, i, version)
				}
				timed := n&31 == 0
				var t0 time.Time
				if timed {
					t0 = time.Now()
				}
				if read {
					v, err := m.GetInto(buf[:0], key)
					if timed {
						rep.ReadHist.record(time.Since(t0))
					}
					rep.Reads++
					switch {
					case err != nil:
						note(fmt.Errorf("get key %d: %w", i, err))
					case !benchValueOK(v, i, cfg.ValueSize):
						rep.BadReads++
					}
					continue
				}
				err := m.Put(key, value)
				if timed {
					rep.WriteHist.record(time.Since(t0))
				}
				rep.Writes++
				if err != nil {
					note(fmt.Errorf("put key %d: %w", i, err))
				}
			}
			mu.Lock()
			total.add(&rep)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.Seconds = time.Since(start).Seconds()
	return total
}

// maxBenchBatch bounds --batch.
const maxBenchBatch = 4096

// benchBatches is benchWork's loop for --batch above 1: every call takes
// cfg.Batch keys, all read with GetMany (each value checked) or all
// written with PutMany, and is timed whole.
func benchBatches(m *hashmap.Map, cfg *benchConfig, stop *atomic.Bool, r *rand.Rand, pick func() uint64, version uint64, rep *benchReport, note func(error)) {
	keys, values := make([][]byte, cfg.Batch), make([][]byte, cfg.Batch)
	bufs := make([][]byte, cfg.Batch)
	index := make([]uint64, cfg.Batch)
	for j := range keys {
		keys[j], values[j], bufs[j] = make([]byte, cfg.KeySize), make([]byte, cfg.ValueSize), make([]byte, 0, cfg.ValueSize)
	}
	for n := uint64(0); ; n++ {
		if n&15 == 0 && stop.Load() {
			return
		}
		for j := range keys {
			index[j] = pick()
			benchKey(keys[j], index[j])
		}
		if r.Intn(100) < cfg.Reads {
			t0 := time.Now()
			err := m.GetMany(keys, bufs)
			rep.ReadHist.record(time.Since(t0))
			rep.Reads += uint64(cfg.Batch)
			if err != nil {
				note(fmt.Errorf("get many: %w", err))
				continue
			}
			for j, v := range bufs {
				if !benchValueOK(v, index[j], cfg.ValueSize) {
					rep.BadReads++
				}
				if v == nil { // absent: GetMany let the buffer go
					bufs[j] = make([]byte, 0, cfg.ValueSize)
				}
			}
			continue
		}
		version++
		for j := range values {
			benchValue(values[j], index[j], version)
		}
		t0 := time.Now()
		_, err := m.PutMany(keys, values)
		rep.WriteHist.record(time.Since(t0))
		rep.Writes += uint64(cfg.Batch)
		if err != nil {
			note(fmt.Errorf("put many: %w", err))
		}
	}
}

// latencyHistogram counts durations in buckets an eighth of a power of two
// wide: bucket 8*(b-2)+s holds durations whose highest set bit is b and
// whose next three bits are s (exact below 8 ns), so any percentile is read
// to within 12.5%.
type latencyHistogram [64 * 8]uint64

func (h *latencyHistogram) record(d time.Duration) {
	ns := uint64(max(d, 0))
	h[bucketOf(ns)]++
}

func bucketOf(ns uint64) int {
	if ns < 8 {
		return int(ns)
	}
	b := bits.Len64(ns) - 1 // highest set bit, >= 3
	return (b-2)*8 + int(ns>>(b-3)&7)
}

// bucketLow is the smallest duration that falls in bucket i.
func bucketLow(i int) uint64 {
	if i < 8 {
		return uint64(i)
	}
	b, s := i/8+2, uint64(i%8)
	return (8 + s) << (b - 3)
}

func (h *latencyHistogram) add(o *latencyHistogram) {
	for i := range h {
		h[i] += o[i]
	}
}

func (h *latencyHistogram) count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// percentile returns the middle of the bucket that holds percentile p of
// the recorded durations (by nearest rank), in nanoseconds (0 if none were
// recorded).
func (h *latencyHistogram) percentile(p float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p/100*float64(n))) - 1 // nearest rank, from 0
	if rank >= n {
		rank = n - 1
	}
	var seen uint64
	for i, c := range h {
		if seen += c; seen > rank {
			if lo, hi := bucketLow(i), bucketLow(i+1); hi-lo > 1 {
				return float64(lo+hi) / 2
			}
			return float64(bucketLow(i)) // a bucket of one value
		}
	}
	return 0
}
