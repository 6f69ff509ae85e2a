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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// demoWorkerEnv is set to "1" in the environment of the demo's worker
// processes, so that a test binary standing in for mapctl knows to run
// the worker rather than its tests.
const demoWorkerEnv = "MAPCTL_DEMO_WORKER"

// demoCounters is the number of counter keys every worker increments.
const demoCounters = 16

type demoOpts struct {
	procs, goroutines, ops int
	keep, queueWriters     bool
}

// demoQueueWritersEnv passes --queue-writers-locally to the workers.
const demoQueueWritersEnv = "MAPCTL_DEMO_QUEUE_WRITERS"

var demoCmd = &command{
	name:    "demo",
	args:    "",
	summary: "run worker processes on a fresh map and verify the result",
	help: `Shows that several processes can share one map. Creates a map in a fresh
temporary directory and starts --procs worker processes (this same program,
re-executed), each running --goroutines goroutines of --ops operations:

  - 30% Compute: atomically increment one of 16 shared counters
    "counter-00".."counter-15" (8-byte little-endian integers);
  - 30% Put of the goroutine's own key "w<ID>-g<G>-<i>" with a value
    derived from the key;
  - 40% Get of a random own key already put, checking its value.

Each worker reports its counts as a JSON line. The demo then checks that
every counter equals the increments reported by all workers, that every put
key holds its value and that no read was wrong, and prints the throughput,
a per-process summary and the map's stats. It ends with "demo OK" (status 0)
or the list of failures (status 3). The directory is removed afterwards
unless --keep is given. Takes no arguments.

Limits, checked before anything is made (exit status 2): --procs at most
256, --goroutines at most 10000, and the map, sized for every put planned,
at most 1 GiB: about 10 million operations in all (procs x goroutines x
ops).

Example:
  mapctl demo --procs 8 --ops 50000`,
	flags: func(fs *flag.FlagSet) any {
		o := &demoOpts{}
		fs.IntVar(&o.procs, "procs", 4, "worker processes")
		fs.IntVar(&o.goroutines, "goroutines", 4, "goroutines per worker process")
		fs.IntVar(&o.ops, "ops", 20000, "operations per goroutine")
		fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory and its map file")
		fs.BoolVar(&o.queueWriters, "queue-writers-locally", false, "workers open the map with Options.QueueWritersLocally (a process's writers to a segment queue locally first)")
		return o
	},
	run: runDemo,
}

// workerReport is what each worker prints, as one JSON line.
type workerReport struct {
	ID         int                  `json:"id"`
	Increments [demoCounters]uint64 `json:"increments"`
	Puts       int                  `json:"puts"`
	PutsPerG   []int                `json:"puts_per_goroutine"`
	Gets       int                  `json:"gets"`
	BadReads   int                  `json:"bad_reads"`
	Seconds    float64              `json:"seconds"`
	Err        string               `json:"error,omitempty"`
}

func ownKey(id, g, i int) []byte { return fmt.Appendf(nil, "w%d-g%d-%d", id, g, i) }
func ownValue(key []byte) []byte { return append([]byte("value-of-"), key...) }
func counterKey(c int) []byte    { return fmt.Appendf(nil, "counter-%02d", c) }

// Limits of the demo, checked before anything is created: the workers
// start every goroutine at once, and the map is sized for every put
// planned (30% of procs x goroutines x ops), so large flags would otherwise
// make a file of tens of gigabytes, or, once the product overflows, a map
// far too small for the puts.
const (
	maxDemoProcs      = 256
	maxDemoGoroutines = 10000
	maxDemoMapBytes   = 1 << 30 // said as "1 GiB" in messages and the help
)

// demoMapOptions sizes the demo map for the puts the workers will make
// (about 30% of all operations), with room to spare. o must have passed
// checkDemoPlan: the product of its counts does not overflow.
func demoMapOptions(o *demoOpts) *hashmap.Options {
	total := o.procs * o.goroutines * o.ops
	// Sized for every put, the map need not split (NoSplits), and its
	// file is as small as demoMapBytes says.
	return &hashmap.Options{Entries: max(total*4/10+1024, 4096), AverageKeySize: 16, AverageValueSize: 32,
		MaxBloatFactor: hashmap.DefaultMaxBloatFactor, MaxProcesses: processesFor(o.procs), NoSplits: true}
}

// demoMaxOps bounds procs x goroutines x ops, so that demoMapOptions's
// total*4 stays inside an int (32-bit ones too), and within the entries a
// map may be sized for.
const demoMaxOps = min(1<<40, math.MaxInt/4)

// demoMapBytes is the size of the file demoMapOptions makes for o; ok is
// false if the map cannot be made at all.
func demoMapBytes(o *demoOpts) (n int64, ok bool) {
	if o.ops > 0 && o.procs*o.goroutines > demoMaxOps/o.ops {
		return 0, false
	}
	n, err := hashmap.FileSize(demoMapOptions(o))
	return n, err == nil
}

// checkDemoPlan refuses flags the demo cannot run, or that would make a
// map over maxDemoMapBytes, saying which flag to lower; "" if o is fine.
func checkDemoPlan(o *demoOpts) string {
	switch {
	case o.procs < 1 || o.goroutines < 1 || o.ops < 0:
		return "--procs and --goroutines must be at least 1, --ops at least 0"
	case o.procs > maxDemoProcs:
		return fmt.Sprintf("--procs must be at most %d", maxDemoProcs)
	case o.goroutines > maxDemoGoroutines:
		return fmt.Sprintf("--goroutines must be at most %d (a worker process starts them all at once)", maxDemoGoroutines)
	}
	if n, ok := demoMapBytes(o); ok && n <= maxDemoMapBytes {
		return ""
	}
	// The most --ops that fits with these --procs and --goroutines: the
	// size grows with ops, so search for it.
	lo, hi := 0, o.ops // lo fits (a map of 4096 entries), hi does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if n, ok := demoMapBytes(&demoOpts{procs: o.procs, goroutines: o.goroutines, ops: mid}); ok && n <= maxDemoMapBytes {
			lo = mid
		} else {
			hi = mid
		}
	}
	return fmt.Sprintf("--procs %d x --goroutines %d x --ops %d would need a map over the demo's limit of 1 GiB: lower --ops (at most %d with this --procs and --goroutines), --goroutines or --procs",
		o.procs, o.goroutines, o.ops, lo)
}

func runDemo(e *env, c *command, opts any, args []string) int {
	o := opts.(*demoOpts)
	if len(args) != 0 {
		return e.usageError(c, "takes no arguments")
	}
	if msg := checkDemoPlan(o); msg != "" {
		return e.usageError(c, msg)
	}
	self, err := os.Executable()
	if err != nil {
		return e.fail(c, err)
	}
	dir, err := os.MkdirTemp("", "sharedmap-demo-")
	if err != nil {
		return e.fail(c, err)
	}
	if o.keep {
		defer fmt.Fprintf(e.stdout, "kept %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	path := filepath.Join(dir, "demo.map")
	m, err := hashmap.Open(path, demoMapOptions(o))
	if err != nil {
		return e.fail(c, err)
	}
	defer m.Close()
	fmt.Fprintf(e.stdout, "map %s: %d processes x %d goroutines x %d ops (Compute increments, Puts, Gets)\n",
		path, o.procs, o.goroutines, o.ops)

	// Ctrl-C or a TERM stops the workers and still removes the directory;
	// a killed mapctl takes its workers with it (workerProcAttr).
	ctx, stop := interruptContext()
	defer stop()
	start := time.Now()
	reports, errs := runDemoWorkers(ctx, self, path, o)
	wall := time.Since(start)
	if ctx.Err() != nil {
		return e.fail(c, errors.New("interrupted; the workers are stopped"))
	}

	var v demoVerdict
	fmt.Fprintln(e.stdout, "per process:")
	want, total, incs := v.tallyWorkers(e.stdout, reports, errs)
	v.checkCounters(m, want)
	stored, missing := v.checkOwnKeys(m, reports)
	counters := 0
	for c := range want {
		if want[c] > 0 {
			counters++
		}
	}
	if n := m.Len(); n != stored+counters && missing == 0 {
		v.problem("the map holds %d entries, expected %d puts + %d counters", n, stored, counters)
	}
	fmt.Fprintf(e.stdout, "total: %d operations (%d increments, %d puts verified) in %v across %d processes: %.0f ops/s\n",
		total, incs, stored, wall.Round(time.Millisecond), o.procs, float64(total)/wall.Seconds())
	fmt.Fprintln(e.stdout, "map stats:")
	printStats(&indenter{w: e.stdout}, m.Stats())
	if len(v.failures) > 0 {
		for _, f := range v.failures {
			fmt.Fprintf(e.stdout, "FAIL: %s\n", f)
		}
		fmt.Fprintf(e.stderr, "mapctl: demo: %d failures\n", len(v.failures))
		return exitError
	}
	fmt.Fprintln(e.stdout, "demo OK: every counter exact, every put readable, no bad read")
	return exitOK
}

// runDemoWorkers starts o.procs demo workers on the map at path, waits for
// them all, and returns each one's report, or the error that stands for
// it: one that could not start, failed without saying why, or sent no
// report.
func runDemoWorkers(ctx context.Context, self, path string, o *demoOpts) ([]workerReport, []error) {
	reports := make([]workerReport, o.procs)
	errs := make([]error, o.procs)
	var wg sync.WaitGroup
	for p := range o.procs {
		cmd := exec.CommandContext(ctx, self, "demo-worker", path, strconv.Itoa(p), strconv.Itoa(o.goroutines), strconv.Itoa(o.ops))
		cmd.SysProcAttr = workerProcAttr()
		cmd.Env = append(os.Environ(), demoWorkerEnv+"=1")
		if o.queueWriters {
			cmd.Env = append(cmd.Env, demoQueueWritersEnv+"=1")
		}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			errs[p] = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr := cmd.Wait()
			got := readWorkerReport(&out, &reports[p])
			switch {
			case werr != nil && got && reports[p].Err != "":
				// Its report says why, and what it did before: both count.
			case werr != nil:
				errs[p] = fmt.Errorf("%v: %s", werr, bytes.TrimSpace(errOut.Bytes()))
			case !got:
				errs[p] = fmt.Errorf("no report on stdout: %s", bytes.TrimSpace(errOut.Bytes()))
			}
		}()
	}
	wg.Wait()
	return reports, errs
}

// readWorkerReport decodes into r the first line of out that is a JSON
// report, and says whether there was one.
func readWorkerReport(out io.Reader, r *workerReport) bool {
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if json.Unmarshal(sc.Bytes(), r) == nil {
			return true
		}
	}
	return false
}

// demoVerdict gathers what the demo's checks found wrong.
type demoVerdict struct {
	failures []string
}

func (v *demoVerdict) problem(format string, a ...any) {
	v.failures = append(v.failures, fmt.Sprintf(format, a...))
}

// tallyWorkers prints a line per worker and adds up what they did: the
// increments of each counter, all operations, and all increments.
func (v *demoVerdict) tallyWorkers(w io.Writer, reports []workerReport, errs []error) (want [demoCounters]uint64, total, incs uint64) {
	for p, r := range reports {
		if errs[p] != nil {
			v.problem("worker %d failed: %v", p, errs[p])
			continue
		}
		if r.Err != "" {
			v.problem("worker %d: %s", p, r.Err)
		}
		if r.BadReads > 0 {
			v.problem("worker %d read %d wrong values", p, r.BadReads)
		}
		var n uint64
		for c := range want {
			want[c] += r.Increments[c]
			n += r.Increments[c]
		}
		incs += n
		ops := n + uint64(r.Puts+r.Gets)
		total += ops
		fmt.Fprintf(w, "  worker %d: %d increments, %d puts, %d gets, %d bad reads in %.2fs (%.0f ops/s)\n",
			p, n, r.Puts, r.Gets, r.BadReads, r.Seconds, float64(ops)/max(r.Seconds, 1e-9))
	}
	return want, total, incs
}

// checkCounters checks that each counter in m holds the increments the
// workers made to it; one never incremented may be absent.
func (v *demoVerdict) checkCounters(m *hashmap.Map, want [demoCounters]uint64) {
	for c := range want {
		val, err := m.Get(counterKey(c))
		var got uint64
		switch {
		case err == nil && len(val) == 8:
			got = binary.LittleEndian.Uint64(val)
		case err == nil:
			v.problem("counter %d holds %d bytes, not 8", c, len(val))
			continue
		case !(want[c] == 0 && errors.Is(err, hashmap.ErrNotFound)):
			v.problem("counter %d: %v", c, err)
			continue
		}
		if got != want[c] {
			v.problem("counter %d is %d, the workers made %d increments", c, got, want[c])
		}
	}
}

// checkOwnKeys checks that every key the workers put holds its value, and
// returns how many do and how many are missing or wrong (the first five
// of those are problems of their own, the rest one problem).
func (v *demoVerdict) checkOwnKeys(m *hashmap.Map, reports []workerReport) (stored, missing int) {
	for p, r := range reports {
		for g, n := range r.PutsPerG {
			for i := range n {
				k := ownKey(p, g, i)
				if val, err := m.Get(k); err != nil || !bytes.Equal(val, ownValue(k)) {
					if missing++; missing <= 5 {
						v.problem("key %s = %s, %v; want %q", k, quoteShort(string(val)), err, ownValue(k))
					}
					continue
				}
				stored++
			}
		}
	}
	if missing > 5 {
		v.problem("... %d keys missing or wrong in all", missing)
	}
	return stored, missing
}

// processesFor is the MaxProcesses of a map that procs workers and this
// process open at once: room for them, and for at least 64 (a mapctl of
// the user's beside them), and no more, so that the map's size, which the
// demo bounds, goes to entries.
func processesFor(procs int) int {
	return max(64, procs+1)
}
