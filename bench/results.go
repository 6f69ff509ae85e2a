package main

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
	"golang.org/x/sys/unix"
)

type staticFigures struct {
	loadNs, loadAllocs float64
}

// sample is one run's figures of one cell; run is the run's number, by
// which a store's sample is paired with another store's of the same run (a
// store that failed a run has no sample for it, so positions would pair
// samples of different runs).
type sample struct {
	run        int
	ns, allocs float64
}

// results holds every run's figures, by store, dataset and cell.
type results struct {
	cells   map[string]map[string]map[string][]sample // store, dataset, cell
	static  map[string]map[string][]staticFigures
	foot    map[string]map[string][]footprint
	dropped map[string]map[string]uint64
	hits    map[string]map[string]float64
	// cellHits: store, dataset, cell, the lowest share of a run's Gets in
	// the cell that found their key.
	cellHits map[string]map[string]map[string]float64
	skipped  map[string]string
	order    []string // cells in first-seen order
	raw      []string // every sample as a line of Go benchmark format, for raw.txt
}

func (r *results) init() {
	r.cells = map[string]map[string]map[string][]sample{}
	r.static = map[string]map[string][]staticFigures{}
	r.foot = map[string]map[string][]footprint{}
	r.dropped = map[string]map[string]uint64{}
	r.hits = map[string]map[string]float64{}
	r.cellHits = map[string]map[string]map[string]float64{}
	r.skipped = map[string]string{}
}

func nested[T any](m map[string]map[string]T, a, b string) map[string]T {
	if m[a] == nil {
		m[a] = map[string]T{}
	}
	return m[a]
}

func (r *results) add(st, ds, c string, run int, ns, allocs float64) {
	byDS := nested(r.cells, st, ds)
	if byDS[ds] == nil {
		byDS[ds] = map[string][]sample{}
	}
	byDS[ds][c] = append(byDS[ds][c], sample{run, ns, allocs})
	if !slices.Contains(r.order, c) {
		r.order = append(r.order, c)
	}
}

func (r *results) addStatic(st, ds string, _ int, f staticFigures) {
	m := nested(r.static, st, ds)
	m[ds] = append(m[ds], f)
}

func (r *results) addFootprint(st, ds string, f footprint) {
	m := nested(r.foot, st, ds)
	m[ds] = append(m[ds], f)
}

// footprintCells is the memory, huge pages and full GC columns of store st
// with dataset ds: medians over the runs; a GC figure no larger than the
// spread of the collections timed before the store was opened reads as
// below that spread.
func (r *results) footprintCells(st, ds string) string {
	fs := r.foot[st][ds]
	if len(fs) == 0 {
		return "- | - | -" // no run of this store measured one: stderr says why
	}
	var mem, huge, gc, noise []float64
	for _, f := range fs {
		mem, huge, gc, noise = append(mem, f.memMB), append(huge, f.hugeMB), append(gc, f.gcMs), append(noise, f.gcNoiseMs)
	}
	gcText := fmt.Sprintf("%.1f", median(gc))
	if n := median(noise); median(gc) <= n {
		gcText = fmt.Sprintf("< %.1f", n)
	}
	return fmt.Sprintf("%.0f | %.0f | %s", median(mem), median(huge), gcText)
}

// addDropped keeps the most sets a store's load dropped over the runs, and
// addHitRatio the lowest share of keys it held after its load: the worst
// run is what a reader must hear of, not the last.
func (r *results) addDropped(st, ds string, n uint64) {
	m := nested(r.dropped, st, ds)
	m[ds] = max(m[ds], n)
}
func (r *results) addHitRatio(st, ds string, x float64) {
	m := nested(r.hits, st, ds)
	if old, ok := m[ds]; !ok || x < old {
		m[ds] = x
	}
}
func (r *results) skip(st, ds string, err error) { r.skipped[st+" "+ds] = err.Error() }

// addCellHits keeps the lowest hit ratio a store's cell had over the runs.
func (r *results) addCellHits(st, ds, c string, x float64) {
	byDS := nested(r.cellHits, st, ds)
	if byDS[ds] == nil {
		byDS[ds] = map[string]float64{}
	}
	if old, ok := byDS[ds][c]; !ok || x < old {
		byDS[ds][c] = x
	}
}

// missingHits lists, for results.md, the cells in which a store's Gets did
// not all find their keys: every key was loaded, so such a cell measured a
// store that had lost keys (a cache evicting, a ring wrapped by the cells
// before), misses being cheaper than hits.
func (r *results) missingHits() string {
	var lines []string
	for _, st := range slices.Sorted(maps.Keys(r.cellHits)) {
		for _, ds := range slices.Sorted(maps.Keys(r.cellHits[st])) {
			for _, c := range slices.Sorted(maps.Keys(r.cellHits[st][ds])) {
				if x := r.cellHits[st][ds][c]; x < 0.99 {
					lines = append(lines, fmt.Sprintf("%s %s %s %.3f", st, ds, c, x))
				}
			}
		}
	}
	if len(lines) == 0 {
		return "Every Get of every cell found its key.\n\n"
	}
	return "Cells in which a store's Gets did not all find their keys (the lowest share over the runs): its figure there is partly misses, which cost less than hits, so it flatters that store. " +
		strings.Join(lines, "; ") + ".\n\n"
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func (r *results) medianNs(st, ds, c string) (ns, allocs float64, ok bool) {
	ss := r.cells[st][ds][c]
	if len(ss) == 0 {
		return 0, 0, false
	}
	var a, b []float64
	for _, s := range ss {
		a, b = append(a, s.ns), append(b, s.allocs)
	}
	return median(a), median(b), true
}

func storeNames() []string {
	var names []string
	for _, s := range stores {
		names = append(names, s.name)
	}
	return names
}

// headline cells, in table order.
var headline = []string{"get-uniform-g1", "getmany-uniform-g1", "get-zipf-g1", "put-uniform-g1", "putmany-uniform-g1", "mix95-uniform-g1", "mix50-uniform-g1",
	"get-uniform-g2", "put-uniform-g2", "mix95-zipf-g2", "get-uniform-p2", "put-uniform-p2"}

// write writes the run's files to dir: results.md (the tables and the
// targets), chart.png and raw.txt (every sample, for benchstat). A run
// that ends early (a bad flag, a fatal error) writes none of them, so the
// files of the last whole run stay.
func (r *results) write(dir string) error {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# sharedmap against its peers\n\nMeasured %s on %s: %d CPUs (%s), %s, %s/%s. ",
		time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), cpuModel(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "ns/op is wall time over all operations of all workers (g2: 2 goroutines, p2: 2 processes on one file), median of the runs; (xN) is the median over the runs of the ratio to sharedmap's time in the same run. allocs/op counts the whole process. File-backed stores (sharedmap, bbolt, LMDB) live in %s. %s\n\n", storeDirName(), keyModeText())
	for _, d := range datasets {
		if !r.hasDataset(d.name) {
			continue
		}
		fmt.Fprintf(&b, "## %s (%d keys of %d B, values of %d B)\n\n| store |", d.name, d.keys, keySize, d.valueSize)
		for _, c := range headline {
			fmt.Fprintf(&b, " %s |", c)
		}
		b.WriteString(" allocs/op (get, put g1) | load ns/key | memory MB | of it in huge pages | full GC ms | hits after load |\n|---|")
		b.WriteString(strings.Repeat("---:|", len(headline)+6) + "\n")
		for _, st := range storeNames() {
			if r.cells[st][d.name] == nil {
				if why, ok := r.skipped[st+" "+d.name]; ok {
					fmt.Fprintf(&b, "| %s | skipped: %s |\n", st, strings.ReplaceAll(why, "|", "/"))
				}
				continue
			}
			fmt.Fprintf(&b, "| %s |", st)
			for _, c := range headline {
				ns, _, ok := r.medianNs(st, d.name, c)
				if !ok {
					b.WriteString(" - |")
					continue
				}
				if x, ok := r.medianRatio(st, d.name, c); ok && st != "sharedmap" {
					fmt.Fprintf(&b, " %s (x%.2f) |", fmtNs(ns), x)
				} else {
					fmt.Fprintf(&b, " %s |", fmtNs(ns))
				}
			}
			allocs := func(c string) string {
				if _, a, ok := r.medianNs(st, d.name, c); ok {
					return fmt.Sprintf("%.2f", a)
				}
				return "-" // not in this run (-cells)
			}
			var load []float64
			for _, f := range r.static[st][d.name] {
				load = append(load, f.loadNs)
			}
			fp := r.footprintCells(st, d.name)
			hit := fmt.Sprintf("%.3f", r.hits[st][d.name])
			if n, ok := r.dropped[st][d.name]; ok {
				hit += fmt.Sprintf(" (%d sets dropped)", n)
			}
			fmt.Fprintf(&b, " %s, %s | %s | %s | %s |\n", allocs("get-uniform-g1"), allocs("put-uniform-g1"), fmtNs(median(load)), fp, hit)
		}
		b.WriteString("\n")
	}
	b.WriteString(r.targets())
	b.WriteString(r.missingHits())
	b.WriteString("Memory is what opening and loading the store added to the resident set of a fresh process that did nothing else (freed heap given back to the OS before and after; a file-backed store's mapped pages count, the page cache its writes went through does not), plus, for Redis, the server's resident memory; of it in huge pages counts the heap's transparent huge pages and file mappings mapped with 2 MiB pages (sharedmap asks for them; the others get what the kernel gives unasked). Full GC is what a forced runtime.GC() took with the store loaded less what it took just before opening it, the same key set on the heap both times (the least of five each): the collector's cost of the store, which is where on-heap stores pay; \"< N\" where it was no more than N, the spread of the five before the open, which is this machine's noise. Both measured after each run's cells, medians over the runs.\n\n")
	b.WriteString("Every cell: ")
	b.WriteString(strings.Join(r.order, ", "))
	b.WriteString(" (all in the raw output, in Go benchmark format).\n")
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	raw := strings.Join(r.raw, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "raw.txt"), []byte(raw), 0o644); err != nil {
		return err
	}
	return r.chart(filepath.Join(dir, "chart.png"))
}

// A target of the issue: want says whether a per-run figure meets it.
type target struct {
	name   string
	figure func(r *results, ds string, run int) (float64, bool) // the figure of run number run
	unit   string                                               // how the figure reads: "x its time", "x"
	want   func(float64) bool
}

// sampleOf is store st's sample of cell c in run number run, if it has one.
func (r *results) sampleOf(st, ds, c string, run int) (sample, bool) {
	for _, s := range r.cells[st][ds][c] {
		if s.run == run {
			return s, true
		}
	}
	return sample{}, false
}

// runs is how many runs the results hold samples of (the highest run
// number plus one).
func (r *results) runs() int {
	n := 0
	for _, byDS := range r.cells {
		for _, byCell := range byDS {
			for _, ss := range byCell {
				for _, s := range ss {
					n = max(n, s.run+1)
				}
			}
		}
	}
	return n
}

// ratio is the figure of store a's cell ca over store b's cell cb in the
// same run (the runs interleave the stores, so the two were measured
// minutes apart at most).
func ratio(a, ca, b, cb string) func(r *results, ds string, run int) (float64, bool) {
	return func(r *results, ds string, run int) (float64, bool) {
		x, xok := r.sampleOf(a, ds, ca, run)
		y, yok := r.sampleOf(b, ds, cb, run)
		if !xok || !yok || y.ns == 0 {
			return 0, false
		}
		return x.ns / y.ns, true
	}
}

// medianRatio is the median over the runs of store st's time in cell c
// over sharedmap's in the same run, and whether any run had both.
func (r *results) medianRatio(st, ds, c string) (float64, bool) {
	f := ratio(st, c, "sharedmap", c)
	var xs []float64
	for run := range r.runs() {
		if x, ok := f(r, ds, run); ok {
			xs = append(xs, x)
		}
	}
	return median(xs), len(xs) > 0
}

// targets are the performance targets, as the per-run figures
// that decide them.
var targets = []target{
	{"Get no slower than the RWMutex map, 1 goroutine", ratio("sharedmap", "get-uniform-g1", "rwmutex-map", "get-uniform-g1"), "x its time", func(x float64) bool { return x <= 1 }},
	{"Get 5x faster than an LMDB read transaction", ratio("lmdb", "get-uniform-g1", "sharedmap", "get-uniform-g1"), "x", func(x float64) bool { return x >= 5 }},
	{"Put at most half the map's Set, 1 goroutine", ratio("sharedmap", "put-uniform-g1", "rwmutex-map", "put-uniform-g1"), "x its time", func(x float64) bool { return x <= 0.5 }},
	{"Put at most half the map's Set, 2 goroutines", ratio("sharedmap", "put-uniform-g2", "rwmutex-map", "put-uniform-g2"), "x its time", func(x float64) bool { return x <= 0.5 }},
	{"Put 3x faster than an LMDB write transaction", ratio("lmdb", "put-uniform-g1", "sharedmap", "put-uniform-g1"), "x", func(x float64) bool { return x >= 3 }},
	{"two reader processes 1.8x one's throughput", ratio("sharedmap", "get-uniform-p1", "sharedmap", "get-uniform-p2"), "x", func(x float64) bool { return x >= 1.8 }},
	{"zero allocations per operation (Get and Put, 1 goroutine)", func(r *results, ds string, run int) (float64, bool) {
		g, gok := r.sampleOf("sharedmap", ds, "get-uniform-g1", run)
		p, pok := r.sampleOf("sharedmap", ds, "put-uniform-g1", run)
		if !gok || !pok {
			return 0, false
		}
		return max(g.allocs, p.allocs), true
	}, " allocs/op", func(x float64) bool { return x < 0.005 }}, // the count is the whole process's: the harness's own few allocations show as fractions of an op
}

// targets writes the targets as this run decides them: the median
// of the per-run figures, their range, and whether the median meets the
// target. Targets whose cells the run left out (-stores, -cells) are left
// out.
func (r *results) targets() string {
	var b strings.Builder
	b.WriteString("## Targets\n\nThe issue's targets, decided by the median of the per-run figures (each run's figure from the stores' samples of that run; range over the runs in brackets).\n\n| target |")
	var shown []string
	for _, d := range datasets {
		if r.hasDataset(d.name) {
			shown = append(shown, d.name)
			fmt.Fprintf(&b, " %s |", d.name)
		}
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(shown)) + "\n")
	rows := 0
	for _, t := range targets {
		line := "| " + t.name + " |"
		seen := false
		for _, ds := range shown {
			var xs []float64
			for run := range r.runs() {
				if x, ok := t.figure(r, ds, run); ok {
					xs = append(xs, x)
				}
			}
			if len(xs) == 0 {
				line += " - |"
				continue
			}
			seen = true
			m := median(xs)
			verdict := "unmet"
			if t.want(m) {
				verdict = "met"
			}
			line += fmt.Sprintf(" %.2f%s (%.2f-%.2f), %s |", m, t.unit, slices.Min(xs), slices.Max(xs), verdict)
		}
		if seen {
			b.WriteString(line + "\n")
			rows++
		}
	}
	if rows == 0 {
		return ""
	}
	return b.String() + "\n"
}

// keyModeText says in results.md where the run's keys came from (-keys).
func keyModeText() string {
	return fmt.Sprintf("Keys (-keys %s): %s.", keyMode, keyModes[keyMode])
}

func (r *results) hasDataset(ds string) bool {
	for _, st := range storeNames() {
		if r.cells[st][ds] != nil {
			return true
		}
	}
	return false
}

// storeDirName names the directory file-backed stores live in and its
// filesystem, on which their page size depends.
func storeDirName() string {
	d := storeDir()
	if d == "" {
		d = os.TempDir()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d, &st); err != nil {
		return d
	}
	fs, ok := map[int64]string{0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs"}[int64(st.Type)]
	if !ok {
		fs = fmt.Sprintf("filesystem type %#x", st.Type)
	}
	return fmt.Sprintf("%s (%s)", d, fs)
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 10000:
		return fmt.Sprintf("%.1f µs", ns/1000)
	case ns >= 100:
		return fmt.Sprintf("%.0f ns", ns)
	default:
		return fmt.Sprintf("%.1f ns", ns)
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
		}
	}
	return "unknown CPU"
}

// chart draws the first dataset's Get, batched Get (per key) and Put (1
// goroutine, uniform) per store as horizontal bars on a log scale; cells
// not in the run are left out.
func (r *results) chart(path string) error {
	ds := ""
	for _, d := range datasets {
		if r.hasDataset(d.name) {
			ds = d.name
			break
		}
	}
	series := []struct {
		cell string
		col  color.RGBA
	}{{"get-uniform-g1", color.RGBA{0x33, 0x66, 0xcc, 0xff}}, {"getmany-uniform-g1", color.RGBA{0x33, 0x99, 0x55, 0xff}},
		{"put-uniform-g1", color.RGBA{0xdd, 0x77, 0x22, 0xff}}}
	names := storeNames()
	const left, top, rowH, barH, width = 120, 40, 52, 14, 900
	img := image.NewRGBA(image.Rect(0, 0, width, top+rowH*len(names)+50))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text := func(x, y int, s string, c color.Color) { drawText(img, x, y, s, c) }
	text(10, 20, fmt.Sprintf("%s: ns/op, log scale (blue: Get; green: Get in batches of %d, per key; orange: Put; 1 goroutine, uniform keys)", ds, getManyBatch), color.Black)
	const lo, hi = 1.0, 6.0 // 10 ns to 1 ms
	scale := func(ns float64) int {
		x := (math.Log10(max(ns, 10)) - lo) / (hi - lo)
		return left + int(x*float64(width-left-80))
	}
	for p := lo; p <= hi; p++ {
		x := scale(math.Pow(10, p))
		for y := top - 5; y < top+rowH*len(names); y++ {
			img.Set(x, y, color.RGBA{0xdd, 0xdd, 0xdd, 0xff})
		}
		text(x-12, top+rowH*len(names)+15, fmtNs(math.Pow(10, p)), color.Black)
	}
	for i, st := range names {
		y := top + i*rowH
		text(10, y+barH+4, st, color.Black)
		for j, s := range series {
			ns, _, ok := r.medianNs(st, ds, s.cell)
			if !ok {
				continue
			}
			by := y + j*(barH+2)
			draw.Draw(img, image.Rect(left, by, scale(ns), by+barH), image.NewUniform(s.col), image.Point{}, draw.Src)
			text(scale(ns)+4, by+barH-2, fmtNs(ns), color.Black)
		}
	}
	return writePNG(path, img)
}

// drawText writes s on img with its baseline at (x, y).
func drawText(img draw.Image, x, y int, s string, c color.Color) {
	s = strings.ReplaceAll(s, "µ", "u") // the 7x13 font has ASCII only
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// writePNG writes img to path as a PNG file.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
