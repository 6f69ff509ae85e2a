package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// runBenchWorkers starts the workers, waits until every one has opened the
// map, lets them all go at once and collects their reports. When ctx ends
// it kills them and returns what that made fail: the caller checks ctx.
func runBenchWorkers(ctx context.Context, self, path string, o *benchOpts) ([]benchReport, error) {
	cfg, err := json.Marshal(o.benchConfig)
	if err != nil {
		return nil, err
	}
	workers := make([]*benchWorkerProc, o.procs)
	defer killBenchWorkers(workers)
	if err := startBenchWorkers(ctx, workers, self, path, cfg); err != nil {
		return nil, err
	}
	for i, w := range workers {
		if line, err := w.stdout.ReadString('\n'); err != nil || line != "ready\n" {
			if err == nil {
				err = fmt.Errorf("said %q instead of ready", strings.TrimSpace(line))
			}
			return nil, w.failed(i, err)
		}
	}
	for i, w := range workers {
		// The start signal. A worker whose stdin ends without it (this
		// process died) gives up instead.
		if _, err := io.WriteString(w.stdin, benchGo); err != nil {
			return nil, w.failed(i, err)
		}
		_ = w.stdin.Close()
	}
	return collectBenchReports(workers)
}

// benchWorkerProc is one bench worker process and its pipes.
type benchWorkerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

// failed kills worker i, w, and returns err with what it said on stderr.
func (w *benchWorkerProc) failed(i int, err error) error {
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	return fmt.Errorf("worker %d: %v: %s", i, err, bytes.TrimSpace(w.stderr.Bytes()))
}

// startBenchWorkers starts a worker for each element of workers, storing
// each as it starts, so that the caller can kill those started when one
// fails to.
func startBenchWorkers(ctx context.Context, workers []*benchWorkerProc, self, path string, cfg []byte) error {
	for i := range workers {
		w := &benchWorkerProc{cmd: exec.CommandContext(ctx, self, "bench-worker", path, string(cfg))}
		w.cmd.Env = append(os.Environ(), demoWorkerEnv+"=1")
		w.cmd.SysProcAttr = workerProcAttr()
		w.cmd.Stderr = &w.stderr
		var err error
		if w.stdin, err = w.cmd.StdinPipe(); err != nil {
			return err
		}
		out, err := w.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		w.stdout = bufio.NewReaderSize(out, 1<<16)
		if err := w.cmd.Start(); err != nil {
			return fmt.Errorf("starting worker %d: %w", i, err)
		}
		workers[i] = w
	}
	return nil
}

// killBenchWorkers kills and waits for the workers started and not yet
// waited for.
func killBenchWorkers(workers []*benchWorkerProc) {
	for _, w := range workers {
		if w != nil && w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	}
}

// collectBenchReports waits for every worker and reads its report: the
// error joins those of the workers that failed or sent none.
func collectBenchReports(workers []*benchWorkerProc) ([]benchReport, error) {
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
			rep := benchGoroutine(m, cfg, &stop, g)
			mu.Lock()
			total.add(&rep)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.Seconds = time.Since(start).Seconds()
	return total
}

// benchGoroutine is benchWork's goroutine g: it reads and writes random
// keys until stop, and reports what it did.
func benchGoroutine(m *hashmap.Map, cfg *benchConfig, stop *atomic.Bool, g int) benchReport {
	r := rand.New(rand.NewSource(time.Now().UnixNano() + int64(g)*7919))
	var zipf *rand.Zipf
	if cfg.Zipf && cfg.Entries > 1 {
		zipf = rand.NewZipf(r, 1.1, 1, uint64(cfg.Entries-1))
	}
	// Each Put writes a new version of the value: this goroutine's own
	// sequence, so that a read torn between two writers' Puts shows too.
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
			// segments of the smallest numbers: rank r is key r*p mod
			// Entries, one to one while the prime p does not divide
			// Entries.
			return zipf.Uint64() * zipfSpread % uint64(cfg.Entries)
		}
		return uint64(r.Int63n(int64(cfg.Entries)))
	}
	if cfg.Batch > 1 {
		benchBatches(m, cfg, stop, r, pick, version, &rep, note)
	} else {
		benchSingles(m, cfg, stop, r, pick, version, &rep, note)
	}
	return rep
}

// benchSingles is benchWork's loop for --batch 1: every call takes one
// key, read with GetInto (its value checked) or written with Put, and one
// call in 32 is timed.
func benchSingles(m *hashmap.Map, cfg *benchConfig, stop *atomic.Bool, r *rand.Rand, pick func() uint64, version uint64, rep *benchReport, note func(error)) {
	key, value := make([]byte, cfg.KeySize), make([]byte, cfg.ValueSize)
	buf := make([]byte, 0, cfg.ValueSize)
	for n := uint64(0); ; n++ {
		if n&255 == 0 && stop.Load() {
			return
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
}

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
