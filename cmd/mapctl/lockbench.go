package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
	"github.com/sharedmap/sharedmap/offheap"
)

// flockAlgorithm is the lockbench baseline that is not an ipc lock: flock(2)
// on the bench file, one open file description per goroutine.
const flockAlgorithm = "flock"

// The bench file is an ipc arena with one lock, then these words.
const (
	benchReady   = 0 // goroutines ready to start
	benchStart   = 1 // set to 1 by the parent to start everyone
	benchStop    = 2 // set to 1 by the parent to stop
	benchPRNG    = 8 // the shared PRNG, advanced only inside the critical section
	benchCounts  = 16
	benchWorkers = 4096 // the most procs x goroutines
)

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
	var procs []int
	for _, f := range strings.Split(o.procsList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return e.usageError(c, fmt.Sprintf("--procs %q: want process counts of at least 1, comma-separated", o.procsList))
		}
		procs = append(procs, n)
	}
	if o.goroutines < 1 || slices.Max(procs)*o.goroutines > benchWorkers {
		return e.usageError(c, fmt.Sprintf("--goroutines must be at least 1, and procs x goroutines at most %d", benchWorkers))
	}
	if o.cs < 1 || o.ncs < 0 || o.duration <= 0 || o.runs < 1 {
		// (With no step in the critical section every holder writes the
		// same value, and the exclusion check could not fail.)
		return e.usageError(c, "--cs must be at least 1, --ncs at least 0, --duration positive, --runs at least 1")
	}
	if o.slots == 0 {
		o.slots = ipc.DefaultSlots // what the arena takes 0 for
	}
	if o.json && o.markdown {
		return e.usageError(c, "--json and --markdown exclude each other")
	}
	if _, err := (ipc.Config{Slots: o.slots, Locks: 1}).Words(); err != nil {
		return e.usageError(c, err.Error())
	}
	if _, _, err := parseALockBudgets(o.alockBudgets); err != nil {
		return e.usageError(c, err.Error())
	}
	algos := strings.Split(o.algos, ",")
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
			return e.usageError(c, fmt.Sprintf("%v; also %s (flock(2) on the file), or all", err, flockAlgorithm))
		}
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
		po := *o
		po.procs = n
		if !o.json && !o.markdown {
			fmt.Fprintf(e.stdout, "%d processes x %d goroutines, cs %d, ncs %d, %v per run, %d runs, %d waiting slots\n",
				n, o.goroutines, o.cs, o.ncs, o.duration, o.runs, o.slots)
			fmt.Fprintf(e.stdout, "%-10s %14s %9s %10s\n", "algo", "ops/s", "fairness", "exclusion")
		}
		runs := make([][]lockbenchResult, len(algos))
		for run := range o.runs {
			for i, algo := range algos {
				r, err := lockbenchRun(ctx, self, filepath.Join(dir, fmt.Sprintf("locks-%d-%d-%d", n, run, i)), algo, &po)
				if err != nil {
					return e.fail(c, fmt.Errorf("%s at %d processes: %w", algo, n, err))
				}
				if r.Ops == 0 {
					// A fairness of 0 would read as a starved goroutine.
					return e.fail(c, fmt.Errorf("%s at %d processes: no critical section finished in %v: give a longer --duration", algo, n, o.duration))
				}
				runs[i] = append(runs[i], r)
			}
		}
		for i := range algos {
			r := medianResult(runs[i])
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
		fmt.Fprint(e.stdout, "| algorithm |")
		for _, n := range procs {
			fmt.Fprintf(e.stdout, " %d %s |", n, plural(n, "process", "processes"))
		}
		fmt.Fprint(e.stdout, "\n|---|")
		fmt.Fprint(e.stdout, strings.Repeat("---|", len(procs)))
		fmt.Fprintln(e.stdout)
		for _, algo := range algos {
			fmt.Fprintf(e.stdout, "| %s |", algo)
			for _, r := range table[algo] {
				fmt.Fprintf(e.stdout, " %sk (fair %.2f)", thousands(uint64(math.Round(r.OpsPerSec/1000))), r.Fairness)
				if !r.ExclusionOK {
					fmt.Fprint(e.stdout, " EXCLUSION FAILED")
				}
				fmt.Fprint(e.stdout, " |")
			}
			fmt.Fprintln(e.stdout)
		}
	}
	return status
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

// benchFile is a mapped lock file.
type benchFile struct {
	file   *os.File
	region *offheap.Region
	arena  *ipc.Arena
	words  []uint64 // the bench words after the arena
}

func createBenchFile(path string, slots int) (*benchFile, error) {
	cfg := ipc.Config{Slots: slots, Locks: 1}
	n, err := cfg.Words()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(int64(n+benchCounts+benchWorkers) * 8); err != nil {
		f.Close()
		return nil, err
	}
	b, err := mapBenchFile(f, n, false)
	if err != nil {
		return nil, err
	}
	if err := ipc.Format(b.region.Uint64s(0, int64(n)), cfg); err != nil {
		b.close()
		return nil, err
	}
	b.close()
	return openBenchFile(path)
}

func openBenchFile(path string) (*benchFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return mapBenchFile(f, int(st.Size()/8)-benchCounts-benchWorkers, true)
}

func mapBenchFile(f *os.File, arenaWords int, attach bool) (*benchFile, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := offheap.MapRegion(f, st.Size(), true)
	if err != nil {
		f.Close()
		return nil, err
	}
	b := &benchFile{file: f, region: r, words: r.Uint64s(int64(arenaWords)*8, benchCounts+benchWorkers)}
	if attach {
		if b.arena, err = ipc.Attach(r.Uint64s(0, int64(arenaWords))); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *benchFile) close() {
	b.region.Unmap()
	b.file.Close()
}

// lockbenchReadyWait bounds the wait for workers to be ready (a variable
// for tests).
var lockbenchReadyWait = 30 * time.Second

// lockbenchStopGrace bounds the wait for workers to stop after the stop
// word (a variable for tests).
var lockbenchStopGrace = 10 * time.Second

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
	cmds := make([]*exec.Cmd, o.procs)
	outs := make([]bytes.Buffer, o.procs)
	for p := range cmds {
		cmd := exec.CommandContext(ctx, self, "lockbench-worker", path, algo, strconv.Itoa(p*o.goroutines),
			strconv.Itoa(o.goroutines), strconv.Itoa(o.cs), strconv.Itoa(o.ncs))
		cmd.SysProcAttr = workerProcAttr()
		cmd.Env = append(os.Environ(), demoWorkerEnv+"=1", alockBudgetsEnv+"="+o.alockBudgets)
		cmd.Stdout, cmd.Stderr = &outs[p], &outs[p]
		if err := cmd.Start(); err != nil {
			kill()
			for _, started := range cmds[:p] {
				_ = started.Wait()
			}
			if ctx.Err() != nil {
				return r, errors.New("interrupted; the workers are stopped")
			}
			return r, err
		}
		cmds[p] = cmd
		if p == 0 && algo == "alock" {
			// Worker 0 is the home, whichever worker opens the lock first.
			b.arena.DeclareALockHome(0, cmd.Process.Pid)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, o.procs)
	var exited atomic.Int32 // workers gone before their time: the run is over
	for p, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs[p] = fmt.Errorf("worker %d: %v: %s", p, err, strings.TrimSpace(outs[p].String()))
			}
			exited.Add(1)
		}()
	}
	// stopped waits for the workers after the stop word, killing any that
	// do not stop within the grace (one stuck in Lock would never look).
	stopped := func() bool {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(lockbenchStopGrace):
			kill()
			<-done
			return false
		}
	}
	workers := uint64(o.procs * o.goroutines)
	ready := time.Now().Add(lockbenchReadyWait)
	for atomic.LoadUint64(&b.words[benchReady]) < workers {
		if ctx.Err() != nil {
			wg.Wait() // CommandContext kills them
			return r, errors.New("interrupted; the workers are stopped")
		}
		if exited.Load() > 0 {
			atomic.StoreUint64(&b.words[benchStop], 1)
			atomic.StoreUint64(&b.words[benchStart], 1)
			stopped()
			return r, fmt.Errorf("a worker ended before the run began: %w", errors.Join(errs...))
		}
		if time.Now().After(ready) {
			atomic.StoreUint64(&b.words[benchStop], 1)
			atomic.StoreUint64(&b.words[benchStart], 1)
			kill() // a worker that never got ready may never look
			wg.Wait()
			return r, fmt.Errorf("workers not ready after %v: %v", lockbenchReadyWait, errors.Join(errs...))
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	atomic.StoreUint64(&b.words[benchStart], 1)
	select {
	case <-time.After(o.duration):
	case <-ctx.Done():
	}
	atomic.StoreUint64(&b.words[benchStop], 1)
	r.Seconds = time.Since(start).Seconds() // the workers' teardown is not the lock's time
	clean := stopped()
	if ctx.Err() != nil && clean {
		return r, errors.New("interrupted; the workers are stopped")
	}
	if !clean {
		return r, fmt.Errorf("workers still running %v after the stop, killed: %v", lockbenchStopGrace, errors.Join(errs...))
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
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
	return r, nil
}

// benchPRNGStep is one step of xorshift64, the PRNG both sections advance.
func benchPRNGStep(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

var lockbenchWorkerCmd = &command{
	name:    "lockbench-worker",
	args:    "PATH ALGO BASE GOROUTINES CS NCS",
	summary: "one worker process of mapctl lockbench (internal)",
	help: `Internal: mapctl lockbench starts its worker processes with this command.
Runs GOROUTINES goroutines, numbered from BASE, of the loop "mapctl lockbench
--help" describes, on the lock file PATH with algorithm ALGO.

Example:
  mapctl lockbench-worker /tmp/locks hapax 0 2 1 500`,
	hidden: true,
	run:    runLockbenchWorker,
}

func runLockbenchWorker(e *env, c *command, _ any, args []string) int {
	if !e.wantArgs(c, args, 6) {
		return exitUsage
	}
	var n [4]int
	for i, a := range args[2:] {
		v, err := strconv.Atoi(a)
		if err != nil || v < 0 {
			return e.usageError(c, fmt.Sprintf("%q is not a count", a))
		}
		n[i] = v
	}
	path, algo, base, goroutines, cs, ncs := args[0], args[1], n[0], n[1], n[2], n[3]
	if base+goroutines > benchWorkers {
		return e.usageError(c, "too many workers")
	}
	b, err := openBenchFile(path)
	if err != nil {
		return e.fail(c, err)
	}
	defer b.close()
	if home, others, err := parseALockBudgets(os.Getenv(alockBudgetsEnv)); err == nil {
		if err := b.arena.SetALockBudgets(home, others); err != nil {
			return e.fail(c, err)
		}
	}
	// Built before the start so that setup costs stay out of the timing.
	lockers := make([]ipc.Mutex, goroutines)
	for g := range lockers {
		if algo == flockAlgorithm {
			lk, err := newFlockMutex(path)
			if err != nil {
				return e.fail(c, err)
			}
			defer lk.Close()
			lockers[g] = lk
		} else if lockers[g], err = b.arena.Mutex(algo, 0); err != nil {
			return e.fail(c, err)
		}
	}
	words := b.words
	var wg sync.WaitGroup
	for g, m := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := uint64(base+g)*0x9e3779b97f4a7c15 | 1
			atomic.AddUint64(&words[benchReady], 1)
			for atomic.LoadUint64(&words[benchStart]) == 0 {
				time.Sleep(50 * time.Microsecond)
			}
			var ops uint64
			for atomic.LoadUint64(&words[benchStop]) == 0 {
				m.Lock()
				// Plain, non-atomic steps on shared memory: two holders at
				// once lose steps, which the replay detects.
				x := words[benchPRNG]
				if x == 0 {
					x = 1
				}
				for range cs {
					x = benchPRNGStep(x)
				}
				words[benchPRNG] = x
				m.Unlock()
				ops++
				if ncs > 0 {
					local = benchPRNGStep(local)
					for range local % uint64(2*ncs+1) {
						local = benchPRNGStep(local)
					}
				}
			}
			atomic.StoreUint64(&words[benchCounts+base+g], ops)
		}()
	}
	wg.Wait()
	return exitOK
}

// alockBudgetsEnv passes --alock-budgets to the workers.
const alockBudgetsEnv = "SHAREDMAP_ALOCK_BUDGETS"

func parseALockBudgets(s string) (home, others int, err error) {
	if _, err := fmt.Sscanf(s, "%d,%d", &home, &others); err != nil || home < 1 || others < 1 {
		return 0, 0, fmt.Errorf("--alock-budgets %q: want two positive counts, home,others (as 20,5)", s)
	}
	return home, others, nil
}

func sumOf(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}
