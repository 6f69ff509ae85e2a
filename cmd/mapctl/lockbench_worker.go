package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/ipc"
)

// lockbenchReadyWait bounds the wait for workers to be ready (a variable
// for tests).
var lockbenchReadyWait = 30 * time.Second

// lockbenchStopGrace bounds the wait for workers to stop after the stop
// word (a variable for tests).
var lockbenchStopGrace = 10 * time.Second

// lockbenchWorkers are one run's worker processes.
type lockbenchWorkers struct {
	kill   context.CancelFunc // kills them all
	errs   []error            // of each, once it has exited
	wg     sync.WaitGroup     // done when all have exited
	exited atomic.Int32       // workers gone before their time: the run is over
}

// startLockbenchWorkers starts o.procs workers of algo on b, at path, and
// waits for each in the background. If one fails to start, it kills
// those started (with kill, which cancels ctx) and returns once they are
// gone.
func startLockbenchWorkers(ctx context.Context, kill context.CancelFunc, b *benchFile, self, path, algo string, o *lockbenchOpts) (*lockbenchWorkers, error) {
	cmds := make([]*exec.Cmd, o.procs)
	outs := make([]bytes.Buffer, o.procs)
	for p := range cmds {
		cmd := exec.CommandContext(ctx, self, "lockbench-worker", path, algo, strconv.Itoa(p*o.goroutines),
			strconv.Itoa(o.goroutines), strconv.Itoa(o.cs), strconv.Itoa(o.ncs))
		cmd.SysProcAttr = workerProcAttr()
		cmd.Env = append(os.Environ(), demoWorkerEnv+"=1", alockBudgetsEnv+"="+o.alockBudgets)
		cmd.Stdout, cmd.Stderr = &outs[p], &outs[p]
		if err := cmd.Start(); err != nil {
			interrupted := ctx.Err() != nil // before kill, which cancels ctx
			kill()
			for _, started := range cmds[:p] {
				_ = started.Wait()
			}
			if interrupted {
				return nil, errors.New("interrupted; the workers are stopped")
			}
			return nil, err
		}
		cmds[p] = cmd
		if p == 0 && algo == "alock" {
			// Worker 0 is the home, whichever worker opens the lock first.
			b.arena.DeclareALockHome(0, cmd.Process.Pid)
		}
	}
	w := &lockbenchWorkers{kill: kill, errs: make([]error, o.procs)}
	for p, cmd := range cmds {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := cmd.Wait(); err != nil {
				w.errs[p] = fmt.Errorf("worker %d: %v: %s", p, err, strings.TrimSpace(outs[p].String()))
			}
			w.exited.Add(1)
		}()
	}
	return w, nil
}

// awaitReady waits until all the workers' goroutines are ready. It gives
// up, the workers stopped, on an interrupt, when a worker exits, or after
// lockbenchReadyWait.
func (w *lockbenchWorkers) awaitReady(ctx context.Context, b *benchFile, workers uint64) error {
	ready := time.Now().Add(lockbenchReadyWait)
	for atomic.LoadUint64(&b.words[benchReady]) < workers {
		if ctx.Err() != nil {
			w.wg.Wait() // CommandContext kills them
			return errors.New("interrupted; the workers are stopped")
		}
		if w.exited.Load() > 0 {
			atomic.StoreUint64(&b.words[benchStop], 1)
			atomic.StoreUint64(&b.words[benchStart], 1)
			w.stopped()
			return fmt.Errorf("a worker ended before the run began: %w", errors.Join(w.errs...))
		}
		if time.Now().After(ready) {
			atomic.StoreUint64(&b.words[benchStop], 1)
			atomic.StoreUint64(&b.words[benchStart], 1)
			w.kill() // a worker that never got ready may never look
			w.wg.Wait()
			return fmt.Errorf("workers not ready after %v: %v", lockbenchReadyWait, errors.Join(w.errs...))
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// stopped waits for the workers after the stop word, killing any that
// do not stop within the grace (one stuck in Lock would never look).
func (w *lockbenchWorkers) stopped() bool {
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(lockbenchStopGrace):
		w.kill()
		<-done
		return false
	}
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
