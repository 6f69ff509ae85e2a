// Command bench measures sharedmap against what a user would pick instead:
// a Go map under sync.RWMutex, fastcache, freecache, bigcache, ristretto,
// bbolt, LMDB and Redis over a unix socket. Run it through run.sh, which
// installs and starts what it needs and stops it afterwards.
//
// Every cell runs for -duration; ns/op is wall time over all operations of
// all goroutines (or processes), so with 2 of them perfect scaling halves
// it. Each cell is repeated -runs times, the stores taking turns, and the
// median is reported; the raw lines are printed in Go benchmark format
// (benchstat reads them) and the medians go to -out as results.md and
// chart.png.
//
// With -scale it runs the scale run instead (scale.sh, scale.go): each
// store's cost from 100 thousand to 100 million keys.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const keySize = 16

type dataset struct {
	name      string
	keys      int
	valueSize int
}

func (d dataset) memory() int { return d.keys * (d.valueSize + keySize + 64) * 2 }

var datasets = []dataset{
	{name: "1M-64B", keys: 1_000_000, valueSize: 64},
	{name: "100k-1KiB", keys: 100_000, valueSize: 1024},
}

type workload struct {
	name   string
	getPct int // percent of operations that are Gets, the rest Puts
	batch  int // > 0: all Gets or all Puts in batches of this many keys (a store's batch read or write, or a loop); each key is an operation
}

var workloads = []workload{{"get", 100, 0}, {"put", 0, 0}, {"mix95", 95, 0}, {"mix50", 50, 0}, {"getmany", 100, getManyBatch}, {"putmany", 0, getManyBatch}}

// getManyBatch is the batch of the getmany and putmany workloads: 16 keys
// a call, as a page of results might read or a request's updates write.
const getManyBatch = 16

// cell is one measured combination.
type cell struct {
	workload workload
	zipf     bool
	workers  int
	procs    bool // workers are processes, not goroutines
}

func (c cell) String() string {
	dist := "uniform"
	if c.zipf {
		dist = "zipf"
	}
	unit := "g"
	if c.procs {
		unit = "p"
	}
	return fmt.Sprintf("%s-%s-%s%d", c.workload.name, dist, unit, c.workers)
}

// Where results go unless -out says: a full run's files are the ones the
// docs quote and the repository keeps, and a narrowed run (a profile, an
// A/B of one cell) must not replace them.
const (
	fullRunDir    = "results"
	partialRunDir = "results/partial"
)

// outDir is the directory a run writes to: out (-out) if given, else env
// (BENCH_OUT) if set, else fullRunDir for a run of every store, dataset and
// cell, partialRunDir for one narrowed by any of the filters.
func outDir(out, env, stores, datasets, cells string) string {
	switch {
	case out != "":
		return out
	case env != "":
		return env
	case stores != "" || datasets != "" || cells != "":
		return partialRunDir
	}
	return fullRunDir
}

func main() {
	var (
		duration  = flag.Duration("duration", time.Second, "measuring time per cell")
		runs      = flag.Int("runs", 5, "runs per cell; medians are reported")
		out       = flag.String("out", "", "directory for results.md, chart.png and raw.txt (default $BENCH_OUT if set, else "+fullRunDir+", or "+partialRunDir+" for a run narrowed by -stores, -datasets or -cells, so that it does not replace the full run's files)")
		only      = flag.String("stores", "", "comma-separated stores to run (default all)")
		onlyData  = flag.String("datasets", "", "comma-separated datasets to run (default all: 1M-64B,100k-1KiB)")
		onlyCells = flag.String("cells", "", "comma-separated cells to run, e.g. get-uniform-g1,put-uniform-p2 (default all)")
		workerArg = flag.String("worker", "", "internal: run as a worker process")
		footArg   = flag.String("footprint", "", "internal: measure one store's footprint in this process")
		profile   = flag.String("cpuprofile", "", "write a CPU profile of this process for the whole run (loads included; the worker processes of p cells are not in it) to this file, for go tool pprof; narrow the run with -stores and -cells")
	)
	flag.StringVar(&keyMode, "keys", keysScript, "where each operation's key comes from: "+
		keysScript+" ("+keyModes[keysScript]+") or "+keysTable+" ("+keyModes[keysTable]+")")
	flag.Parse()
	if code, ok := scaleDispatch(*only, *out, *duration, *runs); ok {
		os.Exit(code)
	}
	if _, ok := keyModes[keyMode]; !ok {
		fmt.Fprintf(os.Stderr, "bench: -keys %q: want %s or %s\n", keyMode, keysScript, keysTable)
		os.Exit(2)
	}
	if *workerArg == "" && *footArg == "" {
		// Workers and footprint processes use directories the run made,
		// which the run removes.
		removeStoreDirsOnSignal()
	}
	if err := checkNames(*only, *onlyData, *onlyCells); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *onlyCells != "" {
		cellFilter = strings.Split(*onlyCells, ",")
	}
	if *workerArg != "" {
		os.Exit(runWorker(*workerArg))
	}
	if *footArg != "" {
		os.Exit(runFootprint(*footArg))
	}
	*out = outDir(*out, os.Getenv("BENCH_OUT"), *only, *onlyData, *onlyCells)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fatal(err)
			}
		}()
	}
	var res results
	res.init()
	for _, d := range datasets {
		if *onlyData != "" && !slices.Contains(strings.Split(*onlyData, ","), d.name) {
			continue
		}
		keys := makeKeys(d.keys)
		for run := range *runs {
			// Each run starts with the next store, so that no store always
			// runs first (right after another's load) or last.
			for k := range stores {
				s := stores[(k+run)%len(stores)]
				if *only != "" && !slices.Contains(strings.Split(*only, ","), s.name) {
					continue
				}
				if err := measureStore(&res, s, d, keys, run, *duration); err != nil {
					res.skip(s.name, d.name, err)
					fmt.Fprintf(os.Stderr, "%s %s: %v\n", s.name, d.name, err)
				}
			}
		}
	}
	if err := res.write(*out); err != nil {
		fatal(err)
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		dir = *out
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", strings.Join([]string{filepath.Join(dir, "results.md"), "chart.png", "raw.txt"}, ", "))
}

// checkNames rejects a name in -stores, -datasets or -cells that names
// nothing, which would otherwise run nothing without a word.
func checkNames(storeList, datasetList, cellList string) error {
	var storeNames, datasetNames, cellNames []string
	for _, s := range stores {
		storeNames = append(storeNames, s.name)
		for _, c := range cellsFor(s) {
			if !slices.Contains(cellNames, c.String()) {
				cellNames = append(cellNames, c.String())
			}
		}
	}
	for _, d := range datasets {
		datasetNames = append(datasetNames, d.name)
	}
	for _, f := range []struct {
		flag, list string
		known      []string
	}{{"-stores", storeList, storeNames}, {"-datasets", datasetList, datasetNames}, {"-cells", cellList, cellNames}} {
		if f.list == "" {
			continue
		}
		for name := range strings.SplitSeq(f.list, ",") {
			if !slices.Contains(f.known, name) {
				return fmt.Errorf("%s: no %q; choose from %s", f.flag, name, strings.Join(f.known, ","))
			}
		}
	}
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func makeKeys(n int) [][]byte {
	keys := make([][]byte, n)
	flat := make([]byte, n*keySize)
	for i := range keys {
		keys[i] = flat[i*keySize : (i+1)*keySize : (i+1)*keySize]
		copy(keys[i], fmt.Sprintf("k%015d", i))
	}
	return keys
}

// newValueBuf returns a buffer for valueFor: a pattern of n bytes (at
// least 8), which valueFor keeps but for the index.
func newValueBuf(n int) []byte {
	buf := make([]byte, n)
	for j := range buf {
		buf[j] = byte(j)
	}
	return buf
}

// valueFor stores key i's value in buf, from newValueBuf: its index in the
// first 8 bytes, then the pattern. Only the index is written per call, to
// keep the harness's own work out of the timed Puts: filling the whole value
// byte by byte took 340 ns for 1 KiB (20 ns for 64 B), a quarter of a
// sharedmap Put in the 100k-1KiB cells, added alike to every store's time.
func valueFor(buf []byte, i int) []byte {
	binary.LittleEndian.PutUint64(buf, uint64(i))
	return buf
}

// errWrongValue is a Get's answer that is not the value the key was given:
// the wrong length or another key's index. A store that answered so would
// be measured doing less than the work asked, so the run stops.
var errWrongValue = errors.New("a store returned a value that is not its key's")

// checkValue is the same check of every value read, for every store: its
// length and the key's index in its first 8 bytes (a few nanoseconds,
// inside the timed loop for all alike).
func checkValue(v []byte, size, i int) error {
	if len(v) != size || binary.LittleEndian.Uint64(v) != uint64(i) {
		return fmt.Errorf("%w: key %d: %d bytes, index %d", errWrongValue, i, len(v), binary.LittleEndian.Uint64(append(v[:len(v):len(v)], make([]byte, 8)...)))
	}
	return nil
}

// cellFilter, when set (-cells), names the only cells to run.
var cellFilter []string

func cellsFor(s storeSpec) []cell {
	var cs []cell
	add := func(c cell) {
		if cellFilter == nil || slices.Contains(cellFilter, c.String()) {
			cs = append(cs, c)
		}
	}
	for _, w := range workloads {
		for _, z := range []bool{false, true} {
			for _, g := range []int{1, 2} {
				if w.batch > 0 && (z || g != 1) {
					continue // batches: uniform keys, one goroutine (enough to compare batch reads)
				}
				add(cell{workload: w, zipf: z, workers: g})
				if w.batch > 0 {
					continue
				}
				if s.multiProcess {
					add(cell{workload: w, zipf: z, workers: g, procs: true})
				}
			}
		}
	}
	return cs
}

// storeDirs are the directories of the stores being measured, removed on
// SIGINT or SIGTERM (a 1M-key store's files are hundreds of MB).
var storeDirs struct {
	sync.Mutex
	m map[string]bool
}

// removeStoreDirsOnSignal removes storeDirs and exits when the run is
// interrupted or terminated; the run's worker processes die with it.
func removeStoreDirsOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		storeDirs.Lock()
		for dir := range storeDirs.m {
			os.RemoveAll(dir)
		}
		fmt.Fprintf(os.Stderr, "bench: %v: stopped, store files removed\n", sig)
		os.Exit(3)
	}()
}

// newStoreDir makes a directory for a store's files, removed on SIGINT or
// SIGTERM until done is called, which removes it.
func newStoreDir() (dir string, done func(), err error) {
	dir, err = os.MkdirTemp(storeDir(), "sharedmap-bench-")
	if err != nil {
		return "", nil, err
	}
	storeDirs.Lock()
	if storeDirs.m == nil {
		storeDirs.m = map[string]bool{}
	}
	storeDirs.m[dir] = true
	storeDirs.Unlock()
	return dir, func() {
		storeDirs.Lock()
		delete(storeDirs.m, dir)
		storeDirs.Unlock()
		os.RemoveAll(dir)
	}, nil
}

// measureStore measures run number run of store spec with dataset d: its
// cells, then its footprint in a process of its own (in this one the heap
// holds what earlier stores left, and off-heap caches keep their freed
// chunks for the next store to reuse), with this run's store closed and
// removed by then, so that the two copies do not share the machine.
func measureStore(res *results, spec storeSpec, d dataset, keys [][]byte, run int, dur time.Duration) error {
	if err := measureCells(res, spec, d, keys, run, dur); err != nil {
		return err
	}
	fp, err := measureFootprint(spec, d)
	if err != nil {
		return fmt.Errorf("footprint: %w", err)
	}
	res.addFootprint(spec.name, d.name, fp)
	return nil
}

// measureCells loads a fresh store of spec with dataset d and runs its
// cells.
func measureCells(res *results, spec storeSpec, d dataset, keys [][]byte, run int, dur time.Duration) error {
	dir, done, err := newStoreDir()
	if err != nil {
		return err
	}
	defer done()
	st, err := spec.open(dir, d)
	if err != nil {
		return err
	}
	defer st.Close()
	// Load phase: every key, in index order, into the fresh store.
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	if err := load(st, d, keys); err != nil {
		return err
	}
	loadNs := float64(time.Since(start).Nanoseconds()) / float64(len(keys))
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	res.addStatic(spec.name, d.name, run, staticFigures{loadNs: loadNs,
		loadAllocs: float64(m1.Mallocs-m0.Mallocs) / float64(len(keys))})
	if dr, ok := st.(dropper); ok {
		res.addDropped(spec.name, d.name, dr.Dropped())
	}
	found := 0
	for i := 0; i < len(keys); i += 97 {
		if _, ok, _ := st.Get(nil, keys[i]); ok {
			found++
		}
	}
	res.addHitRatio(spec.name, d.name, float64(found)/float64((len(keys)+96)/97))
	cellDur := dur
	if spec.slow {
		cellDur = dur / 4 // tens of µs per op: fewer ops suffice
	}
	for _, c := range cellsFor(spec) {
		// A collection the load (or the last cell) of an allocating store
		// set off must not fall into this cell's timing.
		runtime.GC()
		var ops uint64
		var allocs float64
		var elapsed time.Duration
		hitRatio := -1.0 // not counted: a cell without Gets, or the workers'
		if c.procs {
			ops, elapsed, err = runProcesses(spec, d, dir, c, cellDur, st)
		} else {
			var t tally
			t, allocs, elapsed, err = runGoroutines(st, d, keys, c, cellDur)
			ops, hitRatio = t.ops, t.hitRatio()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		ns := float64(elapsed.Nanoseconds()) / float64(max(ops, 1))
		line := fmt.Sprintf("BenchmarkStore/%s/%s/%s %d %.1f ns/op", spec.name, d.name, c, ops, ns)
		if c.procs {
			// Allocations are counted in this process only, and the work
			// was the workers': there is no figure to print.
			allocs = math.NaN()
		} else {
			line += fmt.Sprintf(" %.2f allocs/op", allocs)
		}
		if hitRatio >= 0 {
			line += fmt.Sprintf(" %.3f hits/get", hitRatio)
			res.addCellHits(spec.name, d.name, c.String(), hitRatio)
		}
		fmt.Println(line)
		res.add(spec.name, d.name, c.String(), run, ns, allocs)
		res.raw = append(res.raw, line)
	}
	return nil
}

// picker draws key indices, uniformly or Zipf-distributed (s = 1.1, the
// hot keys spread over the key space so they do not share segments).
type picker struct {
	r    *rand.Rand
	z    *rand.Zipf
	n    int
	perm uint64
}

func newPicker(seed int64, n int, zipf bool) *picker {
	r := rand.New(rand.NewSource(seed))
	p := &picker{r: r, n: n}
	if zipf {
		p.z = rand.NewZipf(r, 1.1, 1, uint64(n-1))
	}
	return p
}

func (p *picker) next() int {
	if p.z == nil {
		return p.r.Intn(p.n)
	}
	return int((p.z.Uint64() * 2654435761) % uint64(p.n))
}

// keyMode says where a worker finds each operation's key (-keys).
var keyMode = keysScript

// The key modes. keysScript: a worker's script holds the bytes of its
// operations' keys in the order it uses them (4 MiB a worker), read in
// sequence, so the hardware prefetcher has each key in cache before its
// operation needs it, and only the stores' own work is timed. keysTable:
// with 1M keys, a random walk through 24 MB of slice headers and 16 MB of
// key bytes, which pulls every ratio towards 1; the only mode until
// 2026-11-26.
const (
	keysScript = "script"
	keysTable  = "table"
)

// keyModes says what each key mode does, for -help and results.md.
var keyModes = map[string]string{
	keysScript: "each worker reads its operations' keys in sequence from its pre-drawn script, so a key is in cache as one just parsed from a request is",
	keysTable:  "each operation looks its key up at random in a table of every key: two cache misses per operation that are the harness's own and the same for every store",
}

// script is a worker's pre-drawn sequence of operations, so that drawing
// random keys costs nothing inside the measurement: key indices, whether
// each operation is a Get, and (keysScript) the keys' bytes in order.
type script struct {
	idx  []uint32
	get  []bool
	keys []byte // keysScript: operation j's key is keys[j*keySize:][:keySize]; nil for keysTable
	mask int    // len(idx) - 1: a worker goes round the script
}

// scriptLen is a script's length for n keys: a power of two, at least 4n,
// so that a uniform script draws all but 2% of the keys (1 - e^-4). With
// 2^18 operations whatever n, as until 2026-11-27, a uniform script over
// 1M keys went round 23% of them, and the stores whose writes miss more
// on a larger working set (the Go map) looked faster than they are.
func scriptLen(n int) int {
	l := 1 << 18
	for l < 4*n {
		l <<= 1
	}
	return l
}

func newScript(keys [][]byte, c cell, seed int64) script {
	p := newPicker(seed, len(keys), c.zipf)
	n := scriptLen(len(keys))
	s := script{idx: make([]uint32, n), get: make([]bool, n), mask: n - 1}
	for i := range s.idx {
		s.idx[i] = uint32(p.next())
		s.get[i] = p.r.Intn(100) < c.workload.getPct
	}
	if keyMode == keysScript {
		s.keys = make([]byte, n*keySize)
		for j, i := range s.idx {
			copy(s.keys[j*keySize:], keys[i])
		}
	}
	return s
}

// key is operation j's key: from the script's own bytes, or from the table
// of every key.
func (s *script) key(keys [][]byte, j int) []byte {
	if s.keys != nil {
		return s.keys[j*keySize : (j+1)*keySize : (j+1)*keySize]
	}
	return keys[s.idx[j]]
}

// tally is what a worker did: operations, and of its Gets how many found
// their key. Every key was loaded, so a miss is a key the store lost (a
// cache evicting or dropping), and a cell whose Gets miss measures misses.
type tally struct{ ops, gets, hits uint64 }

func (t *tally) add(o tally) { t.ops, t.gets, t.hits = t.ops+o.ops, t.gets+o.gets, t.hits+o.hits }

// hitRatio is hits over gets, or -1 for a cell without Gets.
func (t tally) hitRatio() float64 {
	if t.gets == 0 {
		return -1
	}
	return float64(t.hits) / float64(t.gets)
}

// work runs the script on st, round and round, until stop.
func work(st store, d dataset, keys [][]byte, s script, w workload, stop *atomic.Bool) (tally, error) {
	if w.batch > 0 {
		return workBatches(st, d, keys, s, w, stop)
	}
	dst := make([]byte, 0, d.valueSize)
	val := newValueBuf(d.valueSize)
	var t tally
	for j := 0; !stop.Load(); {
		for range 64 {
			i := int(s.idx[j])
			if s.get[j] {
				var err error
				var found bool
				if dst, found, err = st.Get(dst[:0], s.key(keys, j)); err != nil {
					return t, err
				}
				t.gets++
				if found {
					t.hits++
					if err := checkValue(dst, d.valueSize, i); err != nil {
						return t, err
					}
				}
			} else if err := st.Put(s.key(keys, j), valueFor(val, i)); err != nil {
				return t, err
			}
			t.ops++
			j = (j + 1) & s.mask
		}
	}
	return t, nil
}

// workBatches is work for batched Gets: batch keys of the script a call,
// through the store's batch read when it has one (batchGetter), else a
// loop of Gets.
func workBatches(st store, d dataset, keys [][]byte, s script, w workload, stop *atomic.Bool) (tally, error) {
	batch := w.batch
	if w.getPct == 0 {
		return workPutBatches(st, d, keys, s, batch, stop)
	}
	bg, ok := st.(batchGetter)
	if !ok {
		bg = loopGetter{st}
	}
	ks, vs, idx := make([][]byte, batch), make([][]byte, batch), make([]int, batch)
	for i := range vs {
		vs[i] = make([]byte, 0, d.valueSize)
	}
	var t tally
	for j := 0; !stop.Load(); {
		for i := range ks {
			ks[i], idx[i] = s.key(keys, j), int(s.idx[j])
			j = (j + 1) & s.mask
		}
		if err := bg.GetMany(ks, vs); err != nil {
			return t, err
		}
		for i, v := range vs {
			if v != nil {
				t.hits++
				if err := checkValue(v, d.valueSize, idx[i]); err != nil {
					return t, err
				}
			}
		}
		t.ops += uint64(batch)
		t.gets += uint64(batch)
	}
	return t, nil
}

// workPutBatches is workBatches for Puts: each batch's values in buffers
// of their own, since a batch write may keep them until it commits.
func workPutBatches(st store, d dataset, keys [][]byte, s script, batch int, stop *atomic.Bool) (tally, error) {
	bp, ok := st.(batchPutter)
	if !ok {
		bp = loopPutter{st}
	}
	ks, vs := make([][]byte, batch), make([][]byte, batch)
	for i := range vs {
		vs[i] = newValueBuf(d.valueSize)
	}
	var t tally
	for j := 0; !stop.Load(); {
		for i := range ks {
			idx := int(s.idx[j])
			ks[i], vs[i] = s.key(keys, j), valueFor(vs[i], idx)
			j = (j + 1) & s.mask
		}
		if err := bp.PutMany(ks, vs); err != nil {
			return t, err
		}
		t.ops += uint64(batch)
	}
	return t, nil
}

func runGoroutines(st store, d dataset, keys [][]byte, c cell, dur time.Duration) (tally, float64, time.Duration, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	counts := make([]tally, c.workers)
	errs := make([]error, c.workers)
	scripts := make([]script, c.workers)
	for g := range scripts {
		scripts[g] = newScript(keys, c, int64(g+1))
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	for g := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[g], errs[g] = work(st, d, keys, scripts[g], c.workload, &stop)
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&m1)
	var t tally
	for _, n := range counts {
		t.add(n)
	}
	for _, err := range errs {
		if err != nil {
			return tally{}, 0, 0, err
		}
	}
	return t, float64(m1.Mallocs-m0.Mallocs) / float64(max(t.ops, 1)), elapsed, nil
}

// workerGrace is how long beyond its cell's duration a worker process may
// take (opening the store, making its keys, collecting its garbage, and
// printing) before runProcesses gives up on it.
const workerGrace = 2 * time.Minute

// runProcesses runs the cell in worker processes on the same file. The
// parent's own handle stays open but idle. The workers start measuring
// together: each says when it is ready (store open, keys made, its
// garbage collected), and the parent starts them all at once, so that no
// worker's measured time overlaps another's set-up.
func runProcesses(spec storeSpec, d dataset, dir string, c cell, dur time.Duration, _ store) (uint64, time.Duration, error) {
	args := make([][]string, c.workers)
	for i := range args {
		arg := strings.Join([]string{spec.name, d.name, dir, c.workload.name, strconv.FormatBool(c.zipf),
			dur.String(), strconv.Itoa(i + 1)}, ",")
		args[i] = []string{"-keys", keyMode, "-worker", arg}
	}
	return runWorkerProcs(args, dur)
}

// runWorkerProcs runs this program once per element of args, with those
// arguments, as worker processes that each print "ready", wait for "go" on
// their standard input, run for dur and print "ops elapsed-ns". It returns
// the operations of all and the longest elapsed time.
func runWorkerProcs(args [][]string, dur time.Duration) (uint64, time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmds := make([]*exec.Cmd, len(args))
	outs := make([]*bufio.Reader, len(args))
	starts := make([]io.WriteCloser, len(args))
	defer func() {
		for i, cmd := range cmds {
			if cmd != nil && cmd.Process != nil && cmd.ProcessState == nil {
				_ = starts[i].Close()
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}
	}()
	for i := range cmds {
		cmd := exec.Command(self, args[i]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the run
		cmd.Stderr = os.Stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return 0, 0, err
		}
		if starts[i], err = cmd.StdinPipe(); err != nil {
			return 0, 0, err
		}
		outs[i] = bufio.NewReader(pipe)
		if err := cmd.Start(); err != nil {
			return 0, 0, err
		}
		cmds[i] = cmd
	}
	// A worker hung in set-up or in its cell would hang the whole run: past
	// the deadline every worker is killed, which ends the reads below.
	var timedOut atomic.Bool
	watchdog := time.AfterFunc(dur+workerGrace, func() {
		timedOut.Store(true)
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
		}
	})
	defer watchdog.Stop()
	hung := func(err error) error {
		if timedOut.Load() {
			return fmt.Errorf("workers killed after %v without an answer: %w", dur+workerGrace, err)
		}
		return err
	}
	for i := range cmds {
		if line, _ := outs[i].ReadString('\n'); line != "ready\n" {
			return 0, 0, hung(fmt.Errorf("worker %d said %q instead of ready", i, line))
		}
	}
	for i := range cmds {
		if _, err := io.WriteString(starts[i], "go\n"); err != nil {
			return 0, 0, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	var ops uint64
	var longest time.Duration
	for i, cmd := range cmds {
		line, _ := outs[i].ReadString('\n')
		var n uint64
		var ns int64
		if _, err := fmt.Sscanf(line, "%d %d", &n, &ns); err != nil {
			_ = cmd.Wait()
			return 0, 0, hung(fmt.Errorf("worker %d said %q", i, line))
		}
		if err := cmd.Wait(); err != nil {
			return 0, 0, hung(fmt.Errorf("worker %d: %w", i, err))
		}
		ops += n
		longest = max(longest, time.Duration(ns))
	}
	return ops, longest, nil
}

// runWorker is one worker process: it opens the store the parent loaded,
// prints "ready", waits for "go" on its standard input (see runProcesses;
// run by hand, type it), and runs the cell for the duration, printing
// "ops elapsed-ns".
func runWorker(arg string) int {
	f := strings.Split(arg, ",")
	if len(f) != 7 {
		fmt.Fprintln(os.Stderr, "bad worker argument", arg)
		return 2
	}
	spec, _ := findStore(f[0])
	d, _ := findDataset(f[1])
	var w workload
	for _, x := range workloads {
		if x.name == f[3] {
			w = x
		}
	}
	zipf, _ := strconv.ParseBool(f[4])
	dur, _ := time.ParseDuration(f[5])
	seed, _ := strconv.Atoi(f[6])
	if spec.open == nil || d.keys == 0 {
		fmt.Fprintln(os.Stderr, "unknown store or dataset", arg)
		return 2
	}
	st, err := spec.open(f[2], d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	keys := makeKeys(d.keys)
	s := newScript(keys, cell{workload: w, zipf: zipf, workers: 1}, int64(seed*7919))
	runtime.GC()
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		fmt.Fprintln(os.Stderr, "worker: no start signal:", line, err)
		return 1
	}
	var stop atomic.Bool
	start := time.Now()
	time.AfterFunc(dur, func() { stop.Store(true) })
	t, err := work(st, d, keys, s, w, &stop)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%d %d\n", t.ops, time.Since(start).Nanoseconds())
	return 0
}

// storeDir is where file-backed stores (sharedmap, bbolt, LMDB) live:
// $BENCH_DIR, else the temp directory. Where /tmp is a disk filesystem
// that caches files in 2 MiB folios (ext4 on Linux 6.18, for one), sharedmap
// maps its file with huge pages, as it would for a user; /dev/shm's tmpfs
// gives small pages unless mounted with huge=within_size. results.md names
// the directory and its filesystem, and how much of each process was in
// huge pages.
func storeDir() string { return os.Getenv("BENCH_DIR") }

func rssMB() float64 { return procMB("/proc/self/status", "VmRSS") }

// load puts every key, in index order, into the fresh store st: through
// its batch write if it has one, as a user loading it would.
func load(st store, d dataset, keys [][]byte) error {
	buf := newValueBuf(d.valueSize)
	var err error
	if bl, ok := st.(batchLoader); ok {
		err = bl.LoadBatch(keys, func(i int) []byte { return valueFor(buf, i) })
	} else {
		for i, k := range keys {
			if err = st.Put(k, valueFor(buf, i)); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// footprint is what holding a loaded store costs a process.
type footprint struct {
	// memMB is what opening and loading the store added to the resident
	// set (freed heap given back to the OS before and after), plus a
	// server's resident memory; hugeMB is how much of that is in huge
	// pages.
	memMB, hugeMB float64
	// gcMs is a full collection's time with the store loaded less its
	// time just before the store was opened, the key set on the heap both
	// times (the least of several each); gcNoiseMs is how far apart the
	// collections before the open were, below which gcMs says nothing.
	gcMs, gcNoiseMs float64
}

func (f footprint) String() string {
	return fmt.Sprintf("%g %g %g %g", f.memMB, f.hugeMB, f.gcMs, f.gcNoiseMs)
}

// footprintDeadline bounds a footprint process: the slowest store here
// loads in seconds.
const footprintDeadline = 5 * time.Minute

// measureFootprint loads a fresh store of spec with dataset d in a new
// process (this program with -footprint), in a directory this process
// makes and removes (so that a stopped run removes it too), and returns
// what that process measured.
func measureFootprint(spec storeSpec, d dataset) (footprint, error) {
	self, err := os.Executable()
	if err != nil {
		return footprint{}, err
	}
	dir, done, err := newStoreDir()
	if err != nil {
		return footprint{}, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), footprintDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-footprint", strings.Join([]string{spec.name, d.name, dir}, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the run
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return footprint{}, fmt.Errorf("footprint process killed after %v", footprintDeadline)
	}
	if err != nil {
		return footprint{}, err
	}
	var f footprint
	if _, err := fmt.Sscan(string(out), &f.memMB, &f.hugeMB, &f.gcMs, &f.gcNoiseMs); err != nil {
		return footprint{}, fmt.Errorf("footprint process said %q: %w", out, err)
	}
	return f, nil
}

// findStore is the store named name, if there is one.
func findStore(name string) (storeSpec, bool) {
	i := slices.IndexFunc(stores, func(s storeSpec) bool { return s.name == name })
	if i < 0 {
		return storeSpec{}, false
	}
	return stores[i], true
}

// findDataset is the dataset named name, if there is one.
func findDataset(name string) (dataset, bool) {
	i := slices.IndexFunc(datasets, func(d dataset) bool { return d.name == name })
	if i < 0 {
		return dataset{}, false
	}
	return datasets[i], true
}

// runFootprint is the process measureFootprint starts: it loads a fresh
// store of the store and dataset arg names ("store,dataset,dir", the store's
// files in dir) and prints its footprint.
func runFootprint(arg string) int {
	f := strings.Split(arg, ",")
	if len(f) != 3 {
		fmt.Fprintln(os.Stderr, "bench: -footprint: want store,dataset,dir, not", arg)
		return 2
	}
	spec, sok := findStore(f[0])
	d, dok := findDataset(f[1])
	if !sok || !dok {
		fmt.Fprintln(os.Stderr, "bench: -footprint: unknown store or dataset", arg)
		return 2
	}
	dir := f[2]
	keys := makeKeys(d.keys)
	debug.FreeOSMemory()
	rss0, huge0 := rssMB(), hugeMB()
	gcLeast, gcMost := timedGC()
	st, err := spec.open(dir, d)
	if err == nil {
		err = load(st, d, keys)
	}
	var fp footprint
	if err == nil {
		loaded, _ := timedGC()
		fp.gcMs, fp.gcNoiseMs = loaded-gcLeast, gcMost-gcLeast
		debug.FreeOSMemory()
		fp.memMB, fp.hugeMB = rssMB()-rss0, hugeMB()-huge0
		if sm, ok := st.(serverMemory); ok {
			var server float64
			if server, err = sm.ServerMB(); err == nil {
				fp.memMB += server
			}
		}
	}
	if st != nil {
		st.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	runtime.KeepAlive(keys)
	fmt.Println(fp)
	return 0
}

// timedGC times gcRounds forced full collections and returns the least
// and the most, in ms: one collection of a small heap can take a few ms
// more than the next on a busy VM.
func timedGC() (least, most float64) {
	least = math.Inf(1)
	for range gcRounds {
		start := time.Now()
		runtime.GC()
		ms := float64(time.Since(start).Microseconds()) / 1000
		least, most = min(least, ms), max(most, ms)
	}
	return least, most
}

const gcRounds = 5

// hugeMB is how much of the process is mapped with huge pages: its heap
// (AnonHugePages) and its file mappings (FilePmdMapped, ShmemPmdMapped).
func hugeMB() float64 {
	return procMB("/proc/self/smaps_rollup", "AnonHugePages", "FilePmdMapped", "ShmemPmdMapped")
}

// procMB sums the named kB fields of a /proc file, in MB; 0 when it cannot
// be read.
func procMB(path string, fields ...string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var kb float64
	for _, l := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(l, ":")
		if ok && slices.Contains(fields, name) {
			n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			kb += n
		}
	}
	return kb / 1024
}
