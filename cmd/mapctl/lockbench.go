package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
)

// flockAlgorithm is the lockbench baseline that is not an ipc lock: flock(2)
// on the bench file, one open file description per goroutine.
const flockAlgorithm = "flock"

type lockbenchOpts struct {
	algos, procsList           string
	procs, goroutines, cs, ncs int
	slots, runs                int
	alockBudgets               string
	duration                   time.Duration
	json, markdown             bool
}

var lockbenchCmd = &command{
	name:    "lockbench",
	args:    "",
	summary: "measure the cross-process lock algorithms (MutexBench)",
	help: `MutexBench across processes, as in the Hapax paper. Creates a lock file in a
temporary directory and starts --procs worker processes (this program,
re-executed), each running --goroutines goroutines that loop for --duration:

  lock; advance a shared PRNG --cs steps; unlock;
  advance a private PRNG a random 0..2x--ncs steps.

It reports, per algorithm:
  ops/s      lock/unlock pairs per second, all workers together;
  fairness   the fewest pairs any goroutine completed divided by the most
             (1 is perfectly fair, 0 means someone starved);
  exclusion  whether the shared PRNG, replayed afterwards for the total
             number of steps, arrives at the same state: any two holders at
             once lose steps and fail it.

Algorithms (--algo, comma-separated, or "all"):
` + lockbenchAlgoHelp() + `  flock      flock(2) on the file: the kernel's lock, one file description
             per goroutine

--procs takes a list: every algorithm is measured at each count. With --runs N,
each measurement is repeated N times, the algorithms taking turns so that a
noisy moment does not fall on one of them, and the medians of throughput and
of fairness are reported (exclusion must hold in every run); with an even N,
the slower of the two middle runs, with its own fairness.

With --json, one JSON object per algorithm, process count and line, with the
keys algo, procs, goroutines, cs, ncs, runs, seconds, ops, ops_per_sec,
fairness, min_ops, max_ops and exclusion_ok (ops, min_ops and max_ops are
from the run with the median throughput; of two middle runs, the slower).
With --markdown, one table:
an algorithm per row, a process count per column. Exit status 3 if any
exclusion check fails.

Example:
  mapctl lockbench --algo hapax-cr,hapax,ttas --procs 4
  mapctl lockbench --algo all --procs 8 --duration 2s --json
  mapctl lockbench --algo all --procs 1,2,4,8 --runs 5 --duration 1s --markdown`,
	flags: func(fs *flag.FlagSet) any {
		o := &lockbenchOpts{}
		fs.StringVar(&o.algos, "algo", ipc.DefaultAlgorithm, `lock algorithms, comma-separated, or "all"`)
		fs.StringVar(&o.procsList, "procs", "2", "worker processes, or a comma-separated list of counts")
		fs.IntVar(&o.runs, "runs", 1, "runs per measurement; medians are reported")
		fs.BoolVar(&o.markdown, "markdown", false, "print one Markdown table (algorithms x process counts)")
		fs.IntVar(&o.goroutines, "goroutines", 1, "goroutines per worker process")
		fs.IntVar(&o.cs, "cs", 1, "shared PRNG steps inside the critical section")
		fs.IntVar(&o.ncs, "ncs", 500, "mean private PRNG steps outside it (randomized 0..2x)")
		fs.IntVar(&o.slots, "slots", ipc.DefaultSlots, fmt.Sprintf("waiting array slots (a power of two; 0 means the default, %d; small values force collisions)", ipc.DefaultSlots))
		fs.DurationVar(&o.duration, "duration", 2*time.Second, "measuring time per algorithm")
		fs.StringVar(&o.alockBudgets, "alock-budgets", fmt.Sprintf("%d,%d", ipc.DefaultALockBudgetHome, ipc.DefaultALockBudgetRemote),
			"alock handovers within a cohort before it yields: home,others (worker 0 is the home)")
		fs.BoolVar(&o.json, "json", false, "print one JSON object per algorithm")
		return o
	},
	run: runLockbench,
}

func lockbenchAlgoHelp() string {
	var b strings.Builder
	for _, a := range ipc.Algorithms() {
		fmt.Fprintf(&b, "  %-10s %s\n", a.Name, a.Summary)
	}
	return b.String()
}

// lockbenchResult is one algorithm's run; its JSON form is --json's output.
type lockbenchResult struct {
	Algo        string  `json:"algo"`
	Procs       int     `json:"procs"`
	Goroutines  int     `json:"goroutines"`
	CS          int     `json:"cs"`
	NCS         int     `json:"ncs"`
	Runs        int     `json:"runs"`
	Seconds     float64 `json:"seconds"`
	Ops         uint64  `json:"ops"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	Fairness    float64 `json:"fairness"`
	MinOps      uint64  `json:"min_ops"`
	HomeShare   float64 `json:"home_share,omitempty"` // alock: worker 0's share of the operations
	MaxOps      uint64  `json:"max_ops"`
	ExclusionOK bool    `json:"exclusion_ok"`
}

func runLockbench(e *env, c *command, opts any, args []string) int {
	o := opts.(*lockbenchOpts)
	if len(args) != 0 {
		return e.usageError(c, "takes no arguments")
	}
	procs, algos, msg := lockbenchPlan(o)
	if msg != "" {
		return e.usageError(c, msg)
	}
	self, err := os.Executable()
	if err != nil {
		return e.fail(c, err)
	}
	dir, err := os.MkdirTemp("", "sharedmap-lockbench-")
	if err != nil {
		return e.fail(c, err)
	}
	defer os.RemoveAll(dir)
	// Ctrl-C or a TERM stops the workers and still removes the directory;
	// a killed mapctl takes its workers with it (workerProcAttr).
	ctx, stopSignals := interruptContext()
	defer stopSignals()
	status := exitOK
	table := make(map[string][]lockbenchResult)
	for _, n := range procs {
		if !o.json && !o.markdown {
			fmt.Fprintf(e.stdout, "%d processes x %d goroutines, cs %d, ncs %d, %v per run, %d runs, %d waiting slots\n",
				n, o.goroutines, o.cs, o.ncs, o.duration, o.runs, o.slots)
			fmt.Fprintf(e.stdout, "%-10s %14s %9s %10s\n", "algo", "ops/s", "fairness", "exclusion")
		}
		results, err := lockbenchMedians(ctx, self, dir, o, n, algos)
		if err != nil {
			return e.fail(c, err)
		}
		for _, r := range results {
			table[r.Algo] = append(table[r.Algo], r)
			if !r.ExclusionOK {
				status = exitError
			}
			switch {
			case o.json:
				b, _ := json.Marshal(r)
				fmt.Fprintf(e.stdout, "%s\n", b)
			case !o.markdown:
				fmt.Fprintf(e.stdout, "%-10s %14.0f %9.3f %10s", r.Algo, r.OpsPerSec, r.Fairness, exclusionVerdict(r.ExclusionOK))
				if r.HomeShare > 0 {
					fmt.Fprintf(e.stdout, "   home share %.2f (budgets %s)", r.HomeShare, o.alockBudgets)
				}
				fmt.Fprintln(e.stdout)
			}
		}
	}
	if o.markdown {
		printLockbenchMarkdown(e.stdout, procs, algos, table)
	}
	return status
}

// lockbenchPlan reads the process counts and algorithms o names, each
// algorithm once, and refuses flags lockbench cannot run, saying which;
// msg is "" if o is fine. It sets o.slots to the arena's default for 0.
func lockbenchPlan(o *lockbenchOpts) (procs []int, algos []string, msg string) {
	for _, f := range strings.Split(o.procsList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, nil, fmt.Sprintf("--procs %q: want process counts of at least 1, comma-separated", o.procsList)
		}
		procs = append(procs, n)
	}
	if o.goroutines < 1 || slices.Max(procs)*o.goroutines > benchWorkers {
		return nil, nil, fmt.Sprintf("--goroutines must be at least 1, and procs x goroutines at most %d", benchWorkers)
	}
	if o.cs < 1 || o.ncs < 0 || o.duration <= 0 || o.runs < 1 {
		// (With no step in the critical section every holder writes the
		// same value, and the exclusion check could not fail.)
		return nil, nil, "--cs must be at least 1, --ncs at least 0, --duration positive, --runs at least 1"
	}
	if o.slots == 0 {
		o.slots = ipc.DefaultSlots // what the arena takes 0 for
	}
	if o.json && o.markdown {
		return nil, nil, "--json and --markdown exclude each other"
	}
	if _, err := (ipc.Config{Slots: o.slots, Locks: 1}).Words(); err != nil {
		return nil, nil, err.Error()
	}
	if _, _, err := parseALockBudgets(o.alockBudgets); err != nil {
		return nil, nil, err.Error()
	}
	algos = strings.Split(o.algos, ",")
	if o.algos == "all" {
		algos = nil
		for _, a := range ipc.Algorithms() {
			algos = append(algos, a.Name)
		}
		algos = append(algos, flockAlgorithm)
	}
	seen := map[string]bool{} // a name twice would give a row two cells per column
	algos = slices.DeleteFunc(algos, func(a string) bool {
		dup := seen[a]
		seen[a] = true
		return dup
	})
	for _, a := range algos {
		if _, err := ipc.Lookup(a); err != nil && a != flockAlgorithm {
			return nil, nil, fmt.Sprintf("%v; also %s (flock(2) on the file), or all", err, flockAlgorithm)
		}
	}
	return procs, algos, ""
}

// lockbenchMedians runs each of algos o.runs times at n processes, in
// turn, with a lock file in dir for each run, and returns each
// algorithm's median run (medianResult).
func lockbenchMedians(ctx context.Context, self, dir string, o *lockbenchOpts, n int, algos []string) ([]lockbenchResult, error) {
	po := *o
	po.procs = n
	runs := make([][]lockbenchResult, len(algos))
	for run := range o.runs {
		for i, algo := range algos {
			r, err := lockbenchRun(ctx, self, filepath.Join(dir, fmt.Sprintf("locks-%d-%d-%d", n, run, i)), algo, &po)
			if err != nil {
				return nil, fmt.Errorf("%s at %d processes: %w", algo, n, err)
			}
			if r.Ops == 0 {
				// A fairness of 0 would read as a starved goroutine.
				return nil, fmt.Errorf("%s at %d processes: no critical section finished in %v: give a longer --duration", algo, n, o.duration)
			}
			runs[i] = append(runs[i], r)
		}
	}
	results := make([]lockbenchResult, len(algos))
	for i := range algos {
		results[i] = medianResult(runs[i])
	}
	return results, nil
}

// printLockbenchMarkdown prints --markdown's table: a row per algorithm,
// a column per process count.
func printLockbenchMarkdown(w io.Writer, procs []int, algos []string, table map[string][]lockbenchResult) {
	fmt.Fprint(w, "| algorithm |")
	for _, n := range procs {
		fmt.Fprintf(w, " %d %s |", n, plural(n, "process", "processes"))
	}
	fmt.Fprint(w, "\n|---|")
	fmt.Fprint(w, strings.Repeat("---|", len(procs)))
	fmt.Fprintln(w)
	for _, algo := range algos {
		fmt.Fprintf(w, "| %s |", algo)
		for _, r := range table[algo] {
			fmt.Fprintf(w, " %sk (fair %.2f)", thousands(uint64(math.Round(r.OpsPerSec/1000))), r.Fairness)
			if !r.ExclusionOK {
				fmt.Fprint(w, " EXCLUSION FAILED")
			}
			fmt.Fprint(w, " |")
		}
		fmt.Fprintln(w)
	}
}

func exclusionVerdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// thousands formats n with comma separators.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// medianResult folds repeated runs of one measurement into one result: the
// run with the median throughput (of two middle runs, the slower), the
// median fairness (with an even count, that run's own), and exclusion
// only if every run kept it.
func medianResult(runs []lockbenchResult) lockbenchResult {
	byOps := slices.Clone(runs)
	slices.SortFunc(byOps, func(a, b lockbenchResult) int { return cmp.Compare(a.OpsPerSec, b.OpsPerSec) })
	// A run's own figures, so that they agree with each other: of two
	// middle runs, the slower.
	n := len(byOps)
	r := byOps[(n-1)/2]
	fair := make([]float64, len(runs))
	for i, x := range runs {
		fair[i] = x.Fairness
		r.ExclusionOK = r.ExclusionOK && x.ExclusionOK
	}
	slices.Sort(fair)
	if n%2 == 1 {
		r.Fairness = fair[n/2]
	} // else the chosen run's own, beside its own min_ops and max_ops
	r.Runs = len(runs)
	return r
}

// lockbenchRun is one run of algo at o.procs processes on a new lock file
// at path: it starts the workers, waits until all are ready, lets them go
// for o.duration, stops them and reads what they did.
func lockbenchRun(ctx context.Context, self, path, algo string, o *lockbenchOpts) (lockbenchResult, error) {
	r := lockbenchResult{Algo: algo, Procs: o.procs, Goroutines: o.goroutines, CS: o.cs, NCS: o.ncs, Runs: 1}
	b, err := createBenchFile(path, o.slots)
	if err != nil {
		return r, err
	}
	defer b.close()
	// Cancelled on a signal, or by us to kill workers that will not stop.
	ctx, kill := context.WithCancel(ctx)
	defer kill()
	w, err := startLockbenchWorkers(ctx, kill, b, self, path, algo, o)
	if err != nil {
		return r, err
	}
	workers := uint64(o.procs * o.goroutines)
	if err := w.awaitReady(ctx, b, workers); err != nil {
		return r, err
	}
	start := time.Now()
	atomic.StoreUint64(&b.words[benchStart], 1)
	select {
	case <-time.After(o.duration):
	case <-ctx.Done():
	}
	atomic.StoreUint64(&b.words[benchStop], 1)
	r.Seconds = time.Since(start).Seconds() // the workers' teardown is not the lock's time
	clean := w.stopped()
	if ctx.Err() != nil && clean {
		return r, errors.New("interrupted; the workers are stopped")
	}
	if !clean {
		return r, fmt.Errorf("workers still running %v after the stop, killed: %v", lockbenchStopGrace, errors.Join(w.errs...))
	}
	if err := errors.Join(w.errs...); err != nil {
		return r, err
	}
	r.tally(b, algo, o, workers)
	return r, nil
}

// tally reads what the run's workers counted in b: the operations, their
// spread over the workers, alock's home share, and whether the shared
// PRNG took every step the critical sections made (no two holders at
// once).
func (r *lockbenchResult) tally(b *benchFile, algo string, o *lockbenchOpts, workers uint64) {
	counts := slices.Clone(b.words[benchCounts : benchCounts+workers])
	if algo == "alock" {
		var home uint64
		for _, n := range counts[:o.goroutines] {
			home += n
		}
		r.HomeShare = math.Round(float64(home)/float64(max(1, sumOf(counts)))*1000) / 1000
	}
	r.MinOps, r.MaxOps = slices.Min(counts), slices.Max(counts)
	for _, n := range counts {
		r.Ops += n
	}
	r.OpsPerSec = float64(r.Ops) / r.Seconds
	if r.MaxOps > 0 {
		r.Fairness = math.Round(float64(r.MinOps)/float64(r.MaxOps)*1000) / 1000
	}
	var x uint64 = 1
	for range r.Ops * uint64(o.cs) {
		x = benchPRNGStep(x)
	}
	got := atomic.LoadUint64(&b.words[benchPRNG])
	r.ExclusionOK = got == x || (r.Ops == 0 && got == 0)
}

func sumOf(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}
