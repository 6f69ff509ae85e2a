package main

// The scale run's child processes: -scale-cell loads one store with one
// set and measures it; -scale-worker is one of the two processes of a p2
// cell; -scale-open times opening a loaded file. Keys are computed from
// their index (scaleKey) everywhere, never held in a slice.

import (
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// scaleChild is one (store, set) pair being measured, in its own process.
type scaleChild struct {
	spec   storeSpec
	d      dataset
	dir    string
	dur    time.Duration
	runs   int
	budget time.Duration
	mapctl string
}

// figure is one figure of a raw.txt line: a value and its unit.
type figure struct {
	v    float64
	unit string
}

// emit prints a line of Go benchmark format for cell: n iterations, then
// the figures.
func (c *scaleChild) emit(cell string, n uint64, figs ...figure) {
	var b strings.Builder
	fmt.Fprintf(&b, "BenchmarkScale/set=%s/store=%s/cell=%s %d", c.d.name, c.spec.name, cell, n)
	for _, f := range figs {
		fmt.Fprintf(&b, " %s %s", fmtFigure(f.v), f.unit)
	}
	fmt.Println(b.String())
}

// fmtFigure writes a figure with the digits it means: whole numbers from
// 100 up, four significant digits below.
func fmtFigure(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// note prints a NOTE line for results.md: something the pair's row must say.
func (c *scaleChild) note(text string) {
	fmt.Printf("NOTE set=%s store=%s %s\n", c.d.name, c.spec.name, text)
}

// runScaleCell is the -scale-cell process: arg is
// "store,set,dir,duration,runs,budget,mapctl".
func runScaleCell(arg string) int {
	f := strings.SplitN(arg, ",", 7)
	if len(f) != 7 {
		fmt.Fprintln(os.Stderr, "bench: -scale-cell: want store,set,dir,duration,runs,budget,mapctl, not", arg)
		return 2
	}
	spec, ok := findStore(f[0])
	d, err := parseSet(f[1])
	c := &scaleChild{spec: spec, d: d, dir: f[2], mapctl: f[6]}
	var err2, err3 error
	c.dur, err2 = time.ParseDuration(f[3])
	c.runs, err3 = strconv.Atoi(f[4])
	c.budget, _ = time.ParseDuration(f[5])
	if !ok || err != nil || err2 != nil || err3 != nil || c.budget <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -scale-cell: bad argument", arg)
		return 2
	}
	if err := c.run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s %s: %v\n", spec.name, d.name, err)
		return 1
	}
	return 0
}

// run loads the store (keys [0, N-m) in batches, then the last m by single
// Puts), measures its footprint and its cells, closes it, and for
// sharedmap times opening, checking, recovering and dumping the file.
func (c *scaleChild) run() error {
	n := c.d.keys
	m := min(n/10, 1_000_000)
	debug.FreeOSMemory()
	rss0, huge0 := rssMB(), hugeMB()
	st, err := c.spec.open(c.dir, c.d)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	deadline := time.Now().Add(c.budget)
	loaded, wall, err := scaleLoad(st, c.d, n-m, deadline, c.spec.name)
	if err != nil {
		return err
	}
	rate := float64(loaded) / wall.Seconds()
	c.emit("load", uint64(loaded), figure{float64(wall.Nanoseconds()) / float64(max(loaded, 1)), "ns/op"},
		figure{rate, "keys/s"}, figure{wall.Seconds(), "wall-s"})
	if loaded < n-m {
		c.note(fmt.Sprintf("load did not finish in %v (%d keys loaded, %.0f keys/s)", c.budget, loaded, rate))
		return nil
	}
	puts, el, err := firstWrites(st, c.d, n-m, n, deadline)
	if err != nil {
		return err
	}
	c.emit("first-put", uint64(puts), figure{float64(el.Nanoseconds()) / float64(max(puts, 1)), "ns/op"})
	if puts < m {
		c.note(fmt.Sprintf("first-write Puts did not finish in %v (%d of %d)", c.budget, puts, m))
		return nil
	}
	c.footprint(rss0, huge0)
	for run := range c.runs {
		if err := c.cells(st, run); err != nil {
			return err
		}
	}
	closed = true
	if err := st.Close(); err != nil {
		return err
	}
	if c.spec.name == "sharedmap" {
		return c.sharedmapTools()
	}
	return nil
}

// loadBatch is how many keys the load hands the store at a time.
const loadBatch = 10_000

// scaleLoad puts keys [0, n) into the fresh store st, loadBatch keys at a
// time, through its batch load or write if it has one (else single Puts),
// until done or deadline, and returns how many it put and the time taken.
// Progress goes to stderr, a line per tenth.
func scaleLoad(st store, d dataset, n int, deadline time.Time, name string) (int, time.Duration, error) {
	keys := make([][]byte, loadBatch)
	flat := make([]byte, loadBatch*keySize)
	for j := range keys {
		keys[j] = flat[j*keySize : (j+1)*keySize : (j+1)*keySize]
	}
	vals := make([][]byte, loadBatch)
	for j := range vals {
		vals[j] = newValueBuf(d.valueSize)
	}
	start, tenth, done := time.Now(), max(n/10, 1), 0
	for done < n && time.Now().Before(deadline) {
		k := keys[:min(loadBatch, n-done)]
		for j := range k {
			scaleKey(k[j], done+j)
			valueFor(vals[j], done+j)
		}
		if err := putBatch(st, k, vals[:len(k)]); err != nil {
			return done, time.Since(start), fmt.Errorf("load: %w", err)
		}
		if (done+len(k))/tenth > done/tenth {
			el := time.Since(start)
			fmt.Fprintf(os.Stderr, "%s %s: loaded %d of %d in %v (%.0f keys/s)\n", name, d.name, done+len(k), n,
				el.Round(time.Millisecond), float64(done+len(k))/el.Seconds())
		}
		done += len(k)
	}
	return done, time.Since(start), nil
}

// putBatch writes one batch of the load.
func putBatch(st store, keys, vals [][]byte) error {
	switch s := st.(type) {
	case batchLoader:
		return s.LoadBatch(keys, func(i int) []byte { return vals[i] })
	case batchPutter:
		return s.PutMany(keys, vals)
	}
	for j, k := range keys {
		if err := st.Put(k, vals[j]); err != nil {
			return err
		}
	}
	return nil
}

// firstWrites puts keys [from, to), fresh keys into an almost full store,
// one Put each, until done or deadline: the cost of a first write at scale.
func firstWrites(st store, d dataset, from, to int, deadline time.Time) (int, time.Duration, error) {
	kbuf, val := make([]byte, keySize), newValueBuf(d.valueSize)
	start := time.Now()
	i := from
	for ; i < to; i++ {
		if err := st.Put(scaleKey(kbuf, i), valueFor(val, i)); err != nil {
			return i - from, time.Since(start), fmt.Errorf("first-write Put of key %d: %w", i, err)
		}
		if i%1024 == 0 && time.Now().After(deadline) {
			break
		}
	}
	return i - from, time.Since(start), nil
}

// footprint prints the store's file and resident bytes per entry and how
// much of its resident memory is in 2 MiB pages; rss0 and huge0 are the
// process's resident and huge-page MB before the store was opened.
func (c *scaleChild) footprint(rss0, huge0 float64) {
	debug.FreeOSMemory()
	rss, huge := rssMB()-rss0, hugeMB()-huge0
	n := float64(c.d.keys)
	figs := []figure{{0, "ns/op"}, {rss * (1 << 20) / n, "resident-B/entry"}, {huge, "huge-MB"}}
	if rss > 0 {
		figs = append(figs, figure{max(huge, 0) / rss, "huge-frac"})
	}
	if blocks, size := dirBytes(c.dir); size > 0 {
		figs = append(figs, figure{blocks / n, "file-B/entry"}, figure{size / n, "apparent-B/entry"})
	}
	c.emit("footprint", 1, figs...)
}

// dirBytes is what the files under dir take on disk (st_blocks) and their
// apparent size, in bytes.
func dirBytes(dir string) (blocks, size float64) {
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if info, err := e.Info(); err == nil {
			size += float64(info.Size())
			if s, ok := info.Sys().(*syscall.Stat_t); ok {
				blocks += float64(s.Blocks) * 512
			}
		}
		return nil
	})
	return blocks, size
}

// cells measures run number run of the cells: Get and Put of random loaded
// keys, one goroutine, then for stores several processes open at once the
// same with two worker processes.
func (c *scaleChild) cells(st store, run int) error {
	var misses *uint64 // a cache's misses are counted; any other store's is an error
	if c.spec.evicts {
		misses = new(uint64)
	}
	for _, op := range []string{"get", "put"} {
		before := missCount(misses)
		ops, el, err := opLoop(st, c.d, op == "put", uint64(run*2+1), c.dur, nil, misses)
		if err != nil {
			return fmt.Errorf("%s-uniform-g1: %w", op, err)
		}
		missed := missCount(misses) - before
		var h latHist
		if _, _, err := opLoop(st, c.d, op == "put", uint64(run*2+2), c.dur, &h, misses); err != nil {
			return fmt.Errorf("%s-uniform-g1 latency: %w", op, err)
		}
		c.emit(op+"-uniform-g1", ops, figure{float64(el.Nanoseconds()) / float64(ops), "ns/op"},
			figure{h.quantile(0.5), "p50-ns"}, figure{h.quantile(0.99), "p99-ns"}, figure{h.quantile(0.999), "p99.9-ns"})
		if missed > 0 {
			c.note(fmt.Sprintf("run %d: its Gets found %.1f%% of the keys (a cache that drops keys; a miss costs less than a hit)",
				run+1, 100*(1-float64(missed)/float64(ops))))
		}
	}
	if !c.spec.multiProcess {
		return nil
	}
	for _, op := range []string{"get", "put"} {
		args := make([][]string, 2)
		for w := range args {
			args[w] = []string{"-scale-worker", strings.Join([]string{c.spec.name, c.d.name, c.dir, op,
				c.dur.String(), strconv.Itoa(100*run + w + 1)}, ",")}
		}
		ops, el, err := runWorkerProcs(args, c.dur)
		if err != nil {
			return fmt.Errorf("%s-uniform-p2: %w", op, err)
		}
		c.emit(op+"-uniform-p2", ops, figure{float64(el.Nanoseconds()) / float64(max(ops, 1)), "ns/op"})
	}
	return nil
}

// opLoop runs Gets (each value checked) or Puts (each key's own value
// again) of uniformly random loaded keys on st for dur, and returns how
// many and the time taken. With h, each operation is timed into h, by a
// clock read before and after it, whose cost (tens of ns) the latencies
// include; the key's computation and the value's check are outside it.
func opLoop(st store, d dataset, put bool, seed uint64, dur time.Duration, h *latHist, misses *uint64) (uint64, time.Duration, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1e))
	kbuf, val, dst := make([]byte, keySize), newValueBuf(d.valueSize), make([]byte, 0, d.valueSize)
	start := time.Now()
	deadline := start.Add(dur)
	var ops uint64
	for time.Now().Before(deadline) {
		for range 64 {
			i := rng.IntN(d.keys)
			k := scaleKey(kbuf, i)
			var t0 time.Time
			if h != nil {
				t0 = time.Now()
			}
			var err error
			found := true
			if put {
				err = st.Put(k, valueFor(val, i))
			} else {
				dst, found, err = st.Get(dst[:0], k)
			}
			if h != nil {
				h.add(time.Since(t0))
			}
			switch {
			case err != nil:
				return ops, 0, err
			case !found && misses != nil:
				*misses++
			case !found:
				return ops, 0, fmt.Errorf("key %d not found", i)
			case !put:
				if err := checkValue(dst, d.valueSize, i); err != nil {
					return ops, 0, err
				}
			}
		}
		ops += 64
	}
	return ops, time.Since(start), nil
}

// missCount is *misses, or 0 where misses are not counted.
func missCount(misses *uint64) uint64 {
	if misses == nil {
		return 0
	}
	return *misses
}

// latHist counts latencies in buckets of about 1.5% width (exact below
// 128 ns), so that millions of operations take a few KB.
type latHist struct {
	counts [3840]uint64
	n      uint64
}

func histBucket(v uint64) int {
	if v < 128 {
		return int(v)
	}
	shift := bits.Len64(v) - 7
	return 128 + (shift-1)*64 + int(v>>shift) - 64
}

// histValue is the middle of bucket b, in ns.
func histValue(b int) float64 {
	if b < 128 {
		return float64(b)
	}
	shift := (b-128)/64 + 1
	mant := uint64((b-128)%64 + 64)
	return float64(mant<<shift) + float64(uint64(1)<<shift)/2
}

func (h *latHist) add(d time.Duration) {
	h.counts[histBucket(uint64(max(d, 0)))]++
	h.n++
}

// quantile is the latency below which a share q of the operations fell.
func (h *latHist) quantile(q float64) float64 {
	want := uint64(q*float64(h.n)) + 1
	var seen uint64
	for b, c := range h.counts {
		if seen += c; seen >= want {
			return histValue(b)
		}
	}
	return 0
}

// runScaleWorker is a -scale-worker process: arg is
// "store,set,dir,get|put,duration,seed". It opens the store the parent
// loaded, warms up, prints "ready", waits for "go" and runs its loop for
// the duration, printing "ops elapsed-ns" (as runWorker does).
func runScaleWorker(arg string) int {
	f := strings.Split(arg, ",")
	if len(f) != 6 {
		fmt.Fprintln(os.Stderr, "bench: -scale-worker: bad argument", arg)
		return 2
	}
	spec, ok := findStore(f[0])
	d, err := parseSet(f[1])
	dur, err2 := time.ParseDuration(f[4])
	seed, err3 := strconv.ParseUint(f[5], 10, 64)
	if !ok || err != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, "bench: -scale-worker: bad argument", arg)
		return 2
	}
	st, err := spec.open(f[2], d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer st.Close()
	// A fresh process has none of the store's pages mapped: Gets for the
	// cell's duration first, so that the cell measures two processes at
	// work rather than their page faults (the one-goroutine cells run in
	// the process that loaded the store, all mapped).
	if _, _, err := opLoop(st, d, false, seed+1<<32, dur, nil, nil); err != nil {
		fmt.Fprintln(os.Stderr, "bench: warm-up:", err)
		return 1
	}
	fmt.Println("ready")
	var line string
	if _, err := fmt.Scanln(&line); err != nil || line != "go" {
		fmt.Fprintln(os.Stderr, "bench: worker: no start signal:", line, err)
		return 1
	}
	ops, el, err := opLoop(st, d, f[3] == "put", seed, dur, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Printf("%d %d\n", ops, el.Nanoseconds())
	return 0
}

// runScaleOpen is a -scale-open process: arg is "store,set,dir"; it opens
// the loaded store, closes it, and prints how long the open took in ns.
func runScaleOpen(arg string) int {
	f := strings.Split(arg, ",")
	spec, ok := findStore(f[0])
	d, err := parseSet(f[min(1, len(f)-1)])
	if len(f) != 3 || !ok || err != nil {
		fmt.Fprintln(os.Stderr, "bench: -scale-open: bad argument", arg)
		return 2
	}
	start := time.Now()
	st, err := spec.open(f[2], d)
	el := time.Since(start)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	st.Close()
	fmt.Println(el.Nanoseconds())
	return 0
}

// sharedmapTools times, each as a process of its own on the closed,
// loaded file: an open (hashmap.Open, timed inside the process), and
// mapctl check, recover and dump (timed from start to exit), with the
// file's bytes over that time.
func (c *scaleChild) sharedmapTools() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	openCmd := exec.Command(self, "-scale-open", strings.Join([]string{c.spec.name, c.d.name, c.dir}, ","))
	openCmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with this process
	openCmd.Stderr = os.Stderr
	out, err := openCmd.Output()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		return fmt.Errorf("open process said %q", out)
	}
	c.emit("open", 1, figure{ns, "ns/op"})
	if c.mapctl == "" {
		c.note("no -mapctl: check, recover and dump not timed")
		return nil
	}
	path := filepath.Join(c.dir, "sharedmap.map")
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	// The dump is loaded back up to 10M keys, the mark: beyond,
	// the dump and a second map would not fit beside the first where the
	// store lives in memory (tmpfs), so the dump goes to the null device.
	dumped := ""
	if c.d.keys <= mapctlLoadMax {
		dumped = filepath.Join(c.dir, "dump.tsv")
	}
	for _, tool := range []string{"check", "recover", "dump"} {
		out := ""
		if tool == "dump" {
			out = dumped
		}
		el, err := c.runMapctl(out, tool, path)
		if err != nil {
			c.note(fmt.Sprintf("mapctl %s: %v", tool, err))
			continue
		}
		c.emit(tool, 1, figure{float64(el.Nanoseconds()), "ns/op"}, figure{float64(info.Size()) / el.Seconds() / 1e9, "GB/s"})
	}
	return c.timeMapctlLoad(path, dumped)
}

// mapctlLoadMax is the largest set whose dump the scale run loads back
// with mapctl load.
const mapctlLoadMax = 10_000_000

// timeMapctlLoad loads the dump of the map at path (every key, one line
// each) into a fresh map of the same size with mapctl load, timed from
// start to exit: the command line's way to fill a map, against the other
// stores' batched loads. Both files are removed after.
func (c *scaleChild) timeMapctlLoad(path, dumped string) error {
	if dumped == "" {
		return nil // too large to load back (see sharedmapTools)
	}
	defer os.Remove(dumped)
	if _, err := os.Stat(dumped); err != nil {
		return nil // dump failed, and said so
	}
	fresh := filepath.Join(c.dir, "loaded.map")
	defer os.Remove(fresh)
	create := exec.Command(c.mapctl, "create", "--entries", strconv.Itoa(c.d.keys), "--key-size", strconv.Itoa(keySize),
		"--value-size", strconv.Itoa(c.d.valueSize), fresh)
	create.Stderr = os.Stderr
	if err := create.Run(); err != nil {
		c.note(fmt.Sprintf("mapctl create: %v", err))
		return nil
	}
	el, err := c.runMapctl("", "load", fresh, dumped)
	if err != nil {
		c.note(fmt.Sprintf("mapctl load: %v", err))
		return nil
	}
	c.emit("mapctl-load", uint64(c.d.keys), figure{float64(el.Nanoseconds()) / float64(c.d.keys), "ns/op"},
		figure{float64(c.d.keys) / el.Seconds(), "keys/s"})
	return nil
}

// runMapctl runs mapctl with args, its stdout to the file out (none: the
// null device), and returns how long it took from start to exit.
func (c *scaleChild) runMapctl(out string, args ...string) (time.Duration, error) {
	cmd := exec.Command(c.mapctl, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		cmd.Stdout = f
	}
	start := time.Now()
	err := cmd.Run()
	return time.Since(start), err
}
