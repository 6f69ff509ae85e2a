package main

// The scale run (-scale): how each store's cost grows with the number of
// keys, from 100 thousand to 100 million. Each (store, set) pair runs in a
// fresh process of its own (-scale-cell, scale_cell.go), so that its memory
// figures are its own and its memory goes back to the system before the
// next; this process decides what runs, skips what the machine cannot
// hold, and rewrites results.md, chart.png and raw.txt after every pair, so
// that a run of hours is readable while it runs.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var (
	scaleOn     = flag.Bool("scale", false, "run the scale run: each store's cost from 100k to 100M keys (see scale.sh)")
	scaleSets   = flag.String("scale-sets", defaultScaleSets, "comma-separated key sets of the scale run, each KEYS-VALUESIZE (100k-64B, 10M-1KiB)")
	scaleBudget = flag.Duration("scale-load-budget", 20*time.Minute, "scale run: a load (and its first-write Puts) running longer is stopped and reported as unfinished")
	scaleMapctl = flag.String("mapctl", "", "scale run: the mapctl binary to time check, recover and dump with (scale.sh builds it)")
	scaleResume = flag.Bool("resume", true, "scale run: skip (store, set) pairs that the out directory's raw.txt has already; false re-runs them, replacing only their rows")
	scaleCell   = flag.String("scale-cell", "", "internal: run one (store, set) pair of the scale run")
	scaleWorker = flag.String("scale-worker", "", "internal: a worker process of a scale run's p2 cell")
	scaleOpen   = flag.String("scale-open", "", "internal: time opening a loaded store")
	scaleFloor  = flag.String("floor", "", "scale run: the floor binary (bench/floor) that measures a dependent random load over as much memory as sharedmap's resident set at each set: the \"floor\" store's row (scale.sh builds it)")
)

// floorStore is the scale run's pseudo-store whose get ns is the latency
// of one dependent random load over as much memory as sharedmap's
// resident set at that set (bench/floor's chase): what the memory
// hierarchy alone charges a lookup that waits for one miss.
const floorStore = "floor"

const (
	defaultScaleSets   = "100k-64B,1M-64B,10M-64B,50M-64B,100M-64B,1M-1KiB,10M-1KiB"
	defaultScaleStores = "sharedmap,lmdb,rwmutex-map,fastcache,bbolt," + floorStore
	scaleFullDir       = "results/scale"
	scalePartialDir    = "results/scale/partial"
	// The scale run's defaults where -duration and -runs are not given:
	// each cell runs twice (ns/op, then latency), so a pair takes about
	// 2*runs*cells*duration besides its load.
	scaleDuration = 2 * time.Second
	scaleRuns     = 3
)

// scaleConfig is what the scale run was asked for.
type scaleConfig struct {
	stores []string
	sets   []dataset
	dur    time.Duration
	runs   int
	out    string
	budget time.Duration
	mapctl string
	floor  string // the floor binary
	resume bool
}

// scaleDispatch runs the scale run or one of its child processes if the
// command line asks for one, and says so. stores, out, dur and runs are
// the full run's flags, which the scale run shares with other defaults.
func scaleDispatch(stores, out string, dur time.Duration, runs int) (int, bool) {
	switch {
	case *scaleCell != "":
		return runScaleCell(*scaleCell), true
	case *scaleWorker != "":
		return runScaleWorker(*scaleWorker), true
	case *scaleOpen != "":
		return runScaleOpen(*scaleOpen), true
	case !*scaleOn:
		return 0, false
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg := scaleConfig{dur: dur, runs: runs, budget: *scaleBudget, mapctl: *scaleMapctl, floor: *scaleFloor, resume: *scaleResume,
		out: scaleOutDir(out, set["stores"] || set["scale-sets"])}
	if !set["duration"] {
		cfg.dur = scaleDuration
	}
	if !set["runs"] {
		cfg.runs = scaleRuns
	}
	if stores == "" {
		stores = defaultScaleStores
	}
	cfg.stores = strings.Split(stores, ",")
	var err error
	if cfg.sets, err = parseSets(*scaleSets); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -scale-sets:", err)
		return 2, true
	}
	if err := runScale(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1, true
	}
	return 0, true
}

// scaleOutDir is where the scale run writes: out if given, else
// scaleFullDir, or scalePartialDir for a run narrowed by -stores or
// -scale-sets, so that it does not replace the full run's files.
func scaleOutDir(out string, narrowed bool) string {
	switch {
	case out != "":
		return out
	case narrowed:
		return scalePartialDir
	}
	return scaleFullDir
}

// parseSet reads a set's name, KEYS-VALUESIZE: 100k-64B, 50M-64B, 1M-1KiB.
func parseSet(name string) (dataset, error) {
	n, v, ok := strings.Cut(name, "-")
	if !ok {
		return dataset{}, fmt.Errorf("%q: want KEYS-VALUESIZE, e.g. 10M-64B", name)
	}
	keys, err := parseCount(n, []unit{{"k", 1e3}, {"M", 1e6}, {"G", 1e9}})
	if err != nil {
		return dataset{}, fmt.Errorf("%q: %w", name, err)
	}
	size, err := parseCount(v, []unit{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"B", 1}})
	if err != nil || size < 8 {
		return dataset{}, fmt.Errorf("%q: a value size of at least 8 B, e.g. 64B or 1KiB", name)
	}
	return dataset{name: name, keys: keys, valueSize: size}, nil
}

// unit is a suffix of a count and what it multiplies by.
type unit struct {
	suffix string
	mult   int
}

// parseCount reads a whole number with the first of units whose suffix it
// has (so a longer suffix goes before one it ends in: KiB before B), or
// none.
func parseCount(s string, units []unit) (int, error) {
	mult := 1
	for _, u := range units {
		if t, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = t, u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("not a count: %q", s)
	}
	return n * mult, nil
}

// parseSets reads -scale-sets, in ascending order of their bytes.
func parseSets(list string) ([]dataset, error) {
	var sets []dataset
	for name := range strings.SplitSeq(list, ",") {
		d, err := parseSet(name)
		if err != nil {
			return nil, err
		}
		sets = append(sets, d)
	}
	slices.SortStableFunc(sets, func(a, b dataset) int {
		return cmp.Compare(a.keys*(a.valueSize+keySize), b.keys*(b.valueSize+keySize))
	})
	return sets, nil
}

// scaleKey stores key i in buf (16 bytes): a 64-bit mix of i (splitmix64's
// finalizer, a bijection), then i. The keys are unique, spread like hashes
// over the key space of an ordered store, and computed where they are
// needed: 100M keys held as [][]byte would take 4 GB of heap.
func scaleKey(buf []byte, i int) []byte {
	binary.LittleEndian.PutUint64(buf, mix64(uint64(i)))
	binary.LittleEndian.PutUint64(buf[8:], uint64(i))
	return buf[:keySize]
}

// mix64 is splitmix64's finalizer: each step (xor with a shift, multiply
// by an odd constant) is invertible, so distinct inputs give distinct
// outputs.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fileStores keep their data in a file under the store directory.
var fileStores = []string{"sharedmap", "lmdb", "bbolt"}

// scaleNeed estimates the memory and the disk store st needs for set d, in
// bytes: a file of about key+value+64 bytes an entry (held in the page
// cache while measured); the Go map's heap, twice its entries' bytes
// (strings, slices and buckets, and the growth that doubles it); fastcache
// 30% over its entries.
func scaleNeed(st string, d dataset) (mem, disk float64) {
	n, kv := float64(d.keys), float64(keySize+d.valueSize)
	switch {
	case slices.Contains(fileStores, st):
		return n * (kv + 64), n * (kv + 64)
	case st == "rwmutex-map":
		return n * (kv + 120) * 2, 0
	default:
		return n * (kv + 8) * 1.3, 0
	}
}

// guard says why store st cannot run set d here, or "" if it can: it
// needs more than 80% of the memory available (avail) or of the disk's
// free bytes (free). The need is scaleNeed's estimate, or if more, the
// bytes per entry the store took with the largest smaller set of the same
// value size measured before (in prev), times d's keys: the smallest
// sets' fixed costs would overstate it.
func guard(st string, d dataset, prev *scaleResults, avail, free float64) string {
	mem, disk := scaleNeed(st, d)
	var resident, file float64
	for _, p := range prev.sets { // ascending
		if p.valueSize == d.valueSize && p.keys < d.keys {
			if x, ok := prev.fig(p.name, st, "footprint", "resident-B/entry"); ok {
				resident = x
			}
			if x, ok := prev.fig(p.name, st, "footprint", "file-B/entry"); ok {
				file = x
			}
		}
	}
	mem, disk = max(mem, resident*float64(d.keys)), max(disk, file*float64(d.keys))
	if mem > avail*0.8 {
		return fmt.Sprintf("needs ~%.1f GB of memory, %.1f GB available", mem/1e9, avail/1e9)
	}
	if disk > free*0.8 {
		return fmt.Sprintf("needs ~%.1f GB of disk, %.1f GB free in %s", disk/1e9, free/1e9, scaleStoreDir())
	}
	return ""
}

// memAvailable is /proc/meminfo's MemAvailable, in bytes.
func memAvailable() float64 { return procMB("/proc/meminfo", "MemAvailable") * (1 << 20) }

// diskFree is what an unprivileged user may still write in the store
// directory's filesystem, in bytes.
func diskFree() float64 {
	var st unix.Statfs_t
	if err := unix.Statfs(scaleStoreDir(), &st); err != nil {
		return 0
	}
	return float64(st.Bavail) * float64(st.Bsize)
}

// scaleStoreDir is where the stores' directories are made.
func scaleStoreDir() string {
	if d := storeDir(); d != "" {
		return d
	}
	return os.TempDir()
}

// runScale runs every (store, set) pair of cfg, sets in ascending size,
// writing the results after each. SIGINT or SIGTERM kills the running
// pair's process and removes its store directory, and ends the run with
// the results of the pairs before it written.
func runScale(cfg scaleConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	for _, st := range cfg.stores {
		if _, ok := findStore(st); !ok && st != floorStore {
			return fmt.Errorf("-stores: no %q", st)
		}
	}
	raw, err := readRaw(filepath.Join(cfg.out, "raw.txt"))
	if err != nil {
		return err
	}
	for _, d := range cfg.sets {
		for _, st := range cfg.stores {
			if cfg.resume && raw.has(st, d.name) {
				fmt.Fprintf(os.Stderr, "%s %s: in raw.txt already (-resume)\n", st, d.name)
				continue
			}
			lines := runPair(ctx, cfg, raw, st, d)
			if ctx.Err() != nil {
				return errors.New("stopped by a signal; store files removed")
			}
			raw.replace(st, d.name, lines)
			if err := writeScale(cfg.out, raw); err != nil {
				return err
			}
		}
	}
	dir, _ := filepath.Abs(cfg.out)
	fmt.Fprintf(os.Stderr, "wrote %s/{results.md,chart.png,raw.txt}\n", dir)
	return nil
}

// runPair runs store st with set d in a child process, or says why not,
// and returns the lines for raw.txt.
func runPair(ctx context.Context, cfg scaleConfig, raw *rawFile, st string, d dataset) []string {
	if st == floorStore {
		return runFloor(ctx, cfg, raw, d)
	}
	if why := guard(st, d, parseScale(raw.lines), memAvailable(), diskFree()); why != "" {
		fmt.Fprintf(os.Stderr, "%s %s: skipped: %s\n", st, d.name, why)
		return []string{skipLine(st, d.name, why)}
	}
	start := time.Now()
	lines, err := runChild(ctx, cfg, st, d)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", st, d.name, err)
		lines = append(lines, skipLine(st, d.name, err.Error()))
	}
	fmt.Fprintf(os.Stderr, "%s %s: done in %v\n", st, d.name, time.Since(start).Round(time.Second))
	return lines
}

func skipLine(st, set, why string) string {
	return fmt.Sprintf("SKIP set=%s store=%s %s", set, st, strings.ReplaceAll(why, "\n", " "))
}

// childDeadline bounds a pair's process: its load's budget (twice: the
// load, then its first writes), its cells, and time for the rest (the
// sharedmap checks and dump of a 100M-key file take minutes).
func childDeadline(cfg scaleConfig) time.Duration {
	return 2*cfg.budget + time.Duration(cfg.runs)*8*cfg.dur + 30*time.Minute
}

// runChild runs store st with set d in a child process (-scale-cell) in a
// store directory this process makes and removes (so that a stopped run
// removes it too), and returns the lines it printed.
func runChild(ctx context.Context, cfg scaleConfig, st string, d dataset) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, done, err := newStoreDir()
	if err != nil {
		return nil, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, childDeadline(cfg))
	defer cancel()
	arg := strings.Join([]string{st, d.name, dir, cfg.dur.String(), strconv.Itoa(cfg.runs),
		cfg.budget.String(), cfg.mapctl}, ",")
	cmd := exec.CommandContext(ctx, self, "-scale-cell", arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the run
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		l := sc.Text()
		fmt.Println(l)
		if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "NOTE ") {
			lines = append(lines, l)
		}
	}
	err = cmd.Wait()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return lines, fmt.Errorf("killed after %v", childDeadline(cfg))
	}
	if err != nil {
		return lines, fmt.Errorf("process: %w", err)
	}
	return lines, nil
}

// rawFile is raw.txt's lines, kept in the order the pairs ran.
type rawFile struct{ lines []string }

// readRaw reads an out directory's raw.txt, empty if there is none yet.
func readRaw(path string) (*rawFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &rawFile{}, nil
	}
	if err != nil {
		return nil, err
	}
	r := &rawFile{}
	for l := range strings.SplitSeq(string(b), "\n") {
		if l != "" {
			r.lines = append(r.lines, l)
		}
	}
	return r, nil
}

// pairOf is the (store, set) a line of raw.txt belongs to.
func pairOf(line string) (st, set string, ok bool) {
	for f := range strings.FieldsSeq(strings.ReplaceAll(line, "/", " ")) {
		if v, ok := strings.CutPrefix(f, "set="); ok {
			set = v
		} else if v, ok := strings.CutPrefix(f, "store="); ok {
			st = v
		}
		if st != "" && set != "" {
			return st, set, true
		}
	}
	return "", "", false
}

// has says whether raw.txt has figures of the pair. A pair that was
// skipped (too big for the machine then, or its process failed) runs
// again.
func (r *rawFile) has(st, set string) bool {
	return slices.ContainsFunc(r.lines, func(l string) bool {
		s, d, ok := pairOf(l)
		return ok && s == st && d == set && strings.HasPrefix(l, "Benchmark")
	})
}

// replace drops the pair's lines and appends lines.
func (r *rawFile) replace(st, set string, lines []string) {
	r.lines = slices.DeleteFunc(r.lines, func(l string) bool {
		s, d, ok := pairOf(l)
		return ok && s == st && d == set
	})
	r.lines = append(r.lines, lines...)
}

// runFloor measures the floor store's row for set d: bench/floor's chase
// over as much memory as sharedmap's resident set there (as measured in
// this run, else 160 B a key), and returns its line for raw.txt.
func runFloor(ctx context.Context, cfg scaleConfig, raw *rawFile, d dataset) []string {
	if cfg.floor == "" {
		return []string{skipLine(floorStore, d.name, "no -floor binary")}
	}
	perEntry := 160.0
	if b, ok := parseScale(raw.lines).fig(d.name, "sharedmap", "footprint", "resident-B/entry"); ok && b > 0 {
		perEntry = b
	}
	mib := max(64, int(perEntry*float64(d.keys)/(1<<20)))
	// The chase's order is a permutation of the region's lines: 8 bytes
	// a line besides the region itself.
	if need := float64(mib) * (1 << 20) * 9 / 8; need > 0.8*memAvailable() {
		return []string{skipLine(floorStore, d.name, fmt.Sprintf("needs ~%.1f GB, %.1f GB available", need/1e9, memAvailable()/1e9))}
	}
	cmd := exec.CommandContext(ctx, cfg.floor, "-size", strconv.Itoa(mib), "-runs", strconv.Itoa(cfg.runs), "-chase-only")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return []string{skipLine(floorStore, d.name, "floor: "+err.Error())}
	}
	ns, ok := chaseNs(string(out))
	if !ok {
		return []string{skipLine(floorStore, d.name, fmt.Sprintf("floor said %q", out))}
	}
	fmt.Fprintf(os.Stderr, "floor %s: %.1f ns a dependent load over %d MiB\n", d.name, ns, mib)
	return []string{fmt.Sprintf("BenchmarkScale/set=%s/store=%s/cell=get-uniform-g1 1 %.1f ns/op %d MiB", d.name, floorStore, ns, mib)}
}

// chaseNs is the median of floor's "chase:" line, in ns.
func chaseNs(out string) (float64, bool) {
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(line, "chase:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		for i := 1; i < len(f); i++ {
			if f[i] == "ns" {
				x, err := strconv.ParseFloat(f[i-1], 64)
				return x, err == nil
			}
		}
	}
	return 0, false
}
