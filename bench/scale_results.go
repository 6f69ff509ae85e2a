package main

// The scale run's results: raw.txt's lines read back into figures, and
// results.md and chart.png made from them. They are rewritten after every
// (store, set) pair from the whole raw.txt, which keeps the rows of pairs
// an earlier run measured and this one did not.

import (
	"cmp"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// scaleResults is raw.txt's figures: for each set, store and cell, each
// unit's values (one a run).
type scaleResults struct {
	figs   map[[3]string]map[string][]float64
	skips  map[[2]string]string   // set, store: why it did not run
	notes  map[[2]string][]string // set, store: what its row must say
	sets   []dataset              // by value size, then keys
	stores []string
}

// parseScale reads raw.txt's lines.
func parseScale(lines []string) *scaleResults {
	r := &scaleResults{figs: map[[3]string]map[string][]float64{}, skips: map[[2]string]string{},
		notes: map[[2]string][]string{}}
	for _, l := range lines {
		st, set, ok := pairOf(l)
		if !ok {
			continue
		}
		r.addPair(st, set)
		f := strings.Fields(l)
		switch f[0] {
		case "SKIP":
			r.skips[[2]string{set, st}] = strings.Join(f[3:], " ")
		case "NOTE":
			r.notes[[2]string{set, st}] = append(r.notes[[2]string{set, st}], strings.Join(f[3:], " "))
		default:
			_, c, _ := strings.Cut(f[0], "/cell=")
			key := [3]string{set, st, c}
			if r.figs[key] == nil {
				r.figs[key] = map[string][]float64{}
			}
			for i := 2; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					r.figs[key][f[i+1]] = append(r.figs[key][f[i+1]], v)
				}
			}
		}
	}
	order := strings.Split(defaultScaleStores, ",")
	rank := func(s string) int {
		if i := slices.Index(order, s); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(r.stores, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	slices.SortStableFunc(r.sets, func(a, b dataset) int {
		return cmp.Or(cmp.Compare(a.valueSize, b.valueSize), cmp.Compare(a.keys, b.keys))
	})
	return r
}

func (r *scaleResults) addPair(st, set string) {
	if !slices.Contains(r.stores, st) {
		r.stores = append(r.stores, st)
	}
	if d, err := parseSet(set); err == nil && !slices.ContainsFunc(r.sets, func(x dataset) bool { return x.name == set }) {
		r.sets = append(r.sets, d)
	}
}

// fig is the median over the runs of a figure, and whether there is one.
func (r *scaleResults) fig(set, st, c, unit string) (float64, bool) {
	xs := r.figs[[3]string{set, st, c}][unit]
	return median(xs), len(xs) > 0
}

// cellText formats a figure for the table, "-" if there is none.
func (r *scaleResults) cellText(set, st, c, unit string, format func(float64) string) string {
	if x, ok := r.fig(set, st, c, unit); ok {
		return format(x)
	}
	return "-"
}

func fmtRate(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.0fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

func fmtSeconds(ns float64) string { return fmt.Sprintf("%.2f s", ns/1e9) }

// fmtTime is fmtNs, in ms from 1 ms up.
func fmtTime(ns float64) string {
	if ns >= 1e6 {
		return fmt.Sprintf("%.1f ms", ns/1e6)
	}
	return fmtNs(ns)
}

// scaleColumns are results.md's columns after the set and the store.
var scaleColumns = []string{"get ns", "get p50 / p99 / p99.9", "put ns", "put p50 / p99 / p99.9", "get p2", "put p2",
	"batched load keys/s (wall)", "first-write Put ns", "file B/entry (apparent)", "resident B/entry", "in 2 MiB pages",
	"open ms", "check s (GB/s)", "recover s (GB/s)", "dump s (GB/s)", "mapctl load keys/s"}

// row is the table row of store st with set, after its first two columns.
func (r *scaleResults) row(set, st string) []string {
	ns := func(c string) string { return r.cellText(set, st, c, "ns/op", fmtTime) }
	lat := func(c string) string {
		var parts []string
		for _, u := range []string{"p50-ns", "p99-ns", "p99.9-ns"} {
			parts = append(parts, r.cellText(set, st, c, u, fmtTime))
		}
		return strings.Join(parts, " / ")
	}
	load := r.cellText(set, st, "load", "keys/s", fmtRate)
	if w, ok := r.fig(set, st, "load", "wall-s"); ok {
		load += fmt.Sprintf(" (%.3g s)", w)
	}
	file := r.cellText(set, st, "footprint", "file-B/entry", func(x float64) string { return fmt.Sprintf("%.0f", x) })
	if a, ok := r.fig(set, st, "footprint", "apparent-B/entry"); ok {
		file += fmt.Sprintf(" (%.0f)", a)
	}
	tool := func(c string) string {
		s := r.cellText(set, st, c, "ns/op", fmtSeconds)
		if g, ok := r.fig(set, st, c, "GB/s"); ok {
			s += fmt.Sprintf(" (%.2f)", g)
		}
		return s
	}
	return []string{ns("get-uniform-g1"), lat("get-uniform-g1"), ns("put-uniform-g1"), lat("put-uniform-g1"),
		ns("get-uniform-p2"), ns("put-uniform-p2"), load, ns("first-put"), file,
		r.cellText(set, st, "footprint", "resident-B/entry", func(x float64) string { return fmt.Sprintf("%.0f", x) }),
		r.cellText(set, st, "footprint", "huge-frac", func(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }),
		r.cellText(set, st, "open", "ns/op", func(x float64) string { return fmt.Sprintf("%.1f", x/1e6) }),
		tool("check"), tool("recover"), tool("dump"), r.cellText(set, st, "mapctl-load", "keys/s", fmtRate)}
}

// valueSizes are the value sizes of the sets, ascending.
func (r *scaleResults) valueSizes() []int {
	var vs []int
	for _, d := range r.sets {
		if !slices.Contains(vs, d.valueSize) {
			vs = append(vs, d.valueSize)
		}
	}
	slices.Sort(vs)
	return vs
}

// tables is results.md's tables, one per value size, and the notes.
func (r *scaleResults) tables() string {
	var b strings.Builder
	var notes []string
	for _, vs := range r.valueSizes() {
		fmt.Fprintf(&b, "## Values of %d B (keys of %d B)\n\n| keys | store | %s |\n|---|---|%s\n",
			vs, keySize, strings.Join(scaleColumns, " | "), strings.Repeat("---:|", len(scaleColumns)))
		for _, d := range r.sets {
			if d.valueSize != vs {
				continue
			}
			for _, st := range r.stores {
				pair := [2]string{d.name, st}
				for _, n := range r.notes[pair] {
					notes = append(notes, fmt.Sprintf("- %s, %s: %s", d.name, st, n))
				}
				if why, ok := r.skips[pair]; ok {
					fmt.Fprintf(&b, "| %s | %s | skipped: %s |\n", d.name, st, strings.ReplaceAll(why, "|", "/"))
				} else if r.hasPair(d.name, st) {
					name := st
					if len(r.notes[pair]) > 0 {
						name += " (see the notes)"
					}
					fmt.Fprintf(&b, "| %s | %s | %s |\n", d.name, name, strings.Join(r.row(d.name, st), " | "))
				}
			}
		}
		b.WriteString("\n")
	}
	if len(notes) > 0 {
		b.WriteString("Notes:\n\n" + strings.Join(notes, "\n") + "\n\n")
	}
	return b.String()
}

func (r *scaleResults) hasPair(set, st string) bool {
	for k := range r.figs {
		if k[0] == set && k[1] == st {
			return true
		}
	}
	return false
}

// scaleTarget is one row of the Targets table.
type scaleTarget struct {
	name  string
	x     float64
	ok    bool // x was measured
	met   bool
	sense string // how x reads
	info  bool   // not a target: a figure of the machine that one is judged against
}

// ratioOf is figure a over figure b, each (set, store, cell, unit).
func (r *scaleResults) ratioOf(a, b [4]string) (float64, bool) {
	x, xok := r.fig(a[0], a[1], a[2], a[3])
	y, yok := r.fig(b[0], b[1], b[2], b[3])
	return x / y, xok && yok && y > 0
}

// targetList is the targets, as this run's figures decide them.
func (r *scaleResults) targetList() []scaleTarget {
	var ts []scaleTarget
	add := func(name, sense string, x float64, ok bool, met func(float64) bool) {
		ts = append(ts, scaleTarget{name: name, x: x, ok: ok, met: ok && met(x), sense: sense})
	}
	const sm, lm = "sharedmap", "lmdb"
	big := ""
	for _, d := range r.sets {
		if d.valueSize == 64 && d.keys > 1_000_000 && r.hasPair(d.name, sm) {
			big = d.name // the largest measured
		}
	}
	if big != "" {
		x, ok := r.ratioOf([4]string{big, sm, "get-uniform-g1", "ns/op"}, [4]string{"1M-64B", sm, "get-uniform-g1", "ns/op"})
		add(fmt.Sprintf("sharedmap Get at %s within 1.5x of its Get at 1M-64B", big), "x the time", x, ok, func(x float64) bool { return x <= 1.5 })
		if x, ok := r.ratioOf([4]string{big, floorStore, "get-uniform-g1", "ns/op"}, [4]string{"1M-64B", floorStore, "get-uniform-g1", "ns/op"}); ok {
			ts = append(ts, scaleTarget{name: fmt.Sprintf("(the machine) a dependent random load over sharedmap's resident set at %s against at 1M-64B", big),
				x: x, ok: true, sense: "x the time", info: true})
		}
	}
	x, ok := r.ratioOf([4]string{"10M-64B", sm, "load", "keys/s"}, [4]string{"10M-64B", lm, "load", "keys/s"})
	add("sharedmap batched load at 10M-64B at least LMDB's rate", "x LMDB's rate", x, ok, func(x float64) bool { return x >= 1 })
	x, ok = r.ratioOf([4]string{"10M-64B", sm, "mapctl-load", "keys/s"}, [4]string{"10M-64B", lm, "load", "keys/s"})
	add("mapctl load of 10M lines at least LMDB's batched load rate", "x LMDB's rate", x, ok, func(x float64) bool { return x >= 1 })
	for _, d := range r.sets {
		x, ok := r.ratioOf([4]string{d.name, sm, "first-put", "ns/op"}, [4]string{d.name, sm, "put-uniform-g1", "ns/op"})
		add("sharedmap first write of a key no dearer than a rewrite, "+d.name, "x a rewrite's time", x, ok, func(x float64) bool { return x <= 1.1 })
	}
	for _, d := range r.sets {
		x, ok := r.ratioOf([4]string{d.name, lm, "get-uniform-g1", "ns/op"}, [4]string{d.name, sm, "get-uniform-g1", "ns/op"})
		add("Get at least 4x faster than LMDB's, "+d.name, "x (LMDB ns / sharedmap ns)", x, ok, func(x float64) bool { return x >= 4 })
		x, ok = r.ratioOf([4]string{d.name, lm, "put-uniform-g1", "ns/op"}, [4]string{d.name, sm, "put-uniform-g1", "ns/op"})
		add("Put at least 3x faster than LMDB's, "+d.name, "x (LMDB ns / sharedmap ns)", x, ok, func(x float64) bool { return x >= 3 })
	}
	for _, set := range []string{"1M-64B", "10M-64B"} {
		for _, u := range []string{"file-B/entry", "resident-B/entry"} {
			x, ok := r.ratioOf([4]string{set, sm, "footprint", u}, [4]string{set, lm, "footprint", u})
			add(fmt.Sprintf("%s bytes per entry at %s no more than LMDB's", strings.TrimSuffix(u, "-B/entry"), set),
				"x LMDB's", x, ok, func(x float64) bool { return x <= 1 })
		}
	}
	return ts
}

// targets is results.md's Targets table: the measured ones.
func (r *scaleResults) targets() string {
	var b strings.Builder
	b.WriteString("## Targets\n\n| target | figure | verdict |\n|---|---:|---|\n")
	rows := 0
	for _, t := range r.targetList() {
		if !t.ok {
			continue
		}
		verdict := "unmet"
		switch {
		case t.info:
			verdict = "what the memory forces"
		case t.met:
			verdict = "met"
		}
		fmt.Fprintf(&b, "| %s | %.2f %s | %s |\n", t.name, t.x, t.sense, verdict)
		rows++
	}
	if rows == 0 {
		return ""
	}
	return b.String() + "\n"
}

// scaleHeader is results.md's title and the machine it ran on.
func scaleHeader() string {
	var uts unix.Utsname
	kernel := "unknown kernel"
	if unix.Uname(&uts) == nil {
		kernel = "Linux " + unix.ByteSliceToString(uts.Release[:])
	}
	return fmt.Sprintf("# How each store's cost grows with its keys\n\n"+
		"Machine: %d CPUs (%s), %.1f GB of RAM, %s, %s; stores' files in %s. Last written %s by `%s` (rows of pairs it did not run are kept from raw.txt).\n\n",
		runtime.NumCPU(), cpuModel(), procMB("/proc/meminfo", "MemTotal")*(1<<20)/1e9, runtime.Version(), kernel,
		storeDirName(), time.Now().UTC().Format("2006-01-02 15:04 MST"), scaleCommand(os.Args[1:]))
}

// scaleCommand is the scale.sh command line that runs bench with args:
// args without -scale and the -mapctl that scale.sh adds.
func scaleCommand(args []string) string {
	cmd := []string{"./scale.sh"}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-scale" || a == "--scale" || strings.HasPrefix(a, "-mapctl="):
		case a == "-mapctl" || a == "--mapctl":
			i++
		default:
			cmd = append(cmd, a)
		}
	}
	return strings.Join(cmd, " ")
}

// scaleExplained says what the columns mean.
const scaleExplained = "Each store and set ran in a fresh process: keys [0, N-m) loaded in batches of 10,000 (the store's batch load or write, else a Put each; the keys are 16 B computed from their index, random-looking), then the last m = min(N/10, 1M) keys by single Puts into the almost full store (first-write Put ns). " +
	"get and put are one goroutine on uniformly random loaded keys (each value read checked; a put rewrites a key's own value), ns/op from an untimed loop; p50/p99/p99.9 from a second loop that reads the clock around each operation, so they include a clock read. " +
	"p2 is two processes on the same file, wall time over the operations of both. Medians over the runs. " +
	"File B/entry is the store's files' allocated blocks over the keys (apparent size in brackets); resident B/entry is what opening and loading added to the process's resident set (file pages it mapped included); in 2 MiB pages is the share of that mapped with huge pages. " +
	"open, check, recover and dump (sharedmap) each ran as a process of its own on the closed file, which was in the page cache; GB/s is the file's apparent size over the time. mapctl load is the dump's lines (one per key) loaded into a fresh map of the same size by mapctl load, timed from start to exit, against the other stores' batched loads. The floor row is not a store: its get ns is one dependent random load over as much memory (huge pages) as sharedmap's resident set at that set (bench/floor's chase), what the memory hierarchy alone charges a lookup that waits for one miss.\n\n"

// writeScale writes raw.txt, results.md and chart.png to dir.
func writeScale(dir string, raw *rawFile) error {
	if err := os.WriteFile(filepath.Join(dir, "raw.txt"), []byte(strings.Join(raw.lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	r := parseScale(raw.lines)
	md := scaleHeader() + scaleExplained + r.tables() + r.targets()
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	return r.chart(filepath.Join(dir, "chart.png"))
}

// scaleColors are the chart's lines, by store (others grey).
var scaleColors = map[string]color.RGBA{
	"sharedmap": {0x33, 0x66, 0xcc, 0xff}, "lmdb": {0xdd, 0x77, 0x22, 0xff}, "rwmutex-map": {0x33, 0x99, 0x55, 0xff},
	"fastcache": {0xaa, 0x33, 0xaa, 0xff}, "bbolt": {0x88, 0x66, 0x33, 0xff}, floorStore: {0x99, 0x99, 0x99, 0xff},
}

// chart draws Get and Put ns/op (1 goroutine) against keys, both on log
// axes, one line per store, for the 64 B sets.
func (r *scaleResults) chart(path string) error {
	const panelW, panelH, left, top = 440, 320, 60, 50
	img := image.NewRGBA(image.Rect(0, 0, 2*panelW+60, panelH+top+90))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	drawText(img, 10, 20, "ns/op against keys (16 B keys, 64 B values, 1 goroutine, uniform keys); both axes log", color.Black)
	for p, cell := range []string{"get-uniform-g1", "put-uniform-g1"} {
		x0 := left + p*(panelW+20)
		r.panel(img, image.Rect(x0, top, x0+panelW-left, top+panelH), strings.TrimSuffix(cell, "-uniform-g1"), cell)
	}
	for i, st := range r.stores {
		c, ok := scaleColors[st]
		if !ok {
			c = color.RGBA{0x88, 0x88, 0x88, 0xff}
		}
		x := left + i*150
		draw.Draw(img, image.Rect(x, top+panelH+52, x+20, top+panelH+56), image.NewUniform(c), image.Point{}, draw.Src)
		drawText(img, x+25, top+panelH+58, st, color.Black)
	}
	return writePNG(path, img)
}

// panel draws one cell's lines in rect: keys 10^5 to 10^8 across, 10 ns
// to 1 ms up.
func (r *scaleResults) panel(img *image.RGBA, rect image.Rectangle, title, cell string) {
	const kLo, kHi, nsLo, nsHi = 5.0, 8.0, 1.0, 6.0
	grey := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	at := func(keys, ns float64) image.Point {
		fx := (math.Log10(keys) - kLo) / (kHi - kLo)
		fy := (math.Log10(max(ns, 10)) - nsLo) / (nsHi - nsLo)
		return image.Pt(rect.Min.X+int(fx*float64(rect.Dx())), rect.Max.Y-int(fy*float64(rect.Dy())))
	}
	drawText(img, rect.Min.X, rect.Min.Y-8, title, color.Black)
	for p := nsLo; p <= nsHi; p++ {
		a, b := at(1e5, math.Pow(10, p)), at(1e8, math.Pow(10, p))
		drawLine(img, a, b, grey)
		drawText(img, rect.Min.X-50, a.Y+4, []string{"10 ns", "100 ns", "1 us", "10 us", "100 us", "1 ms"}[int(p-nsLo)], color.Black)
	}
	for p := kLo; p <= kHi; p++ {
		a, b := at(math.Pow(10, p), 10), at(math.Pow(10, p), 1e6)
		drawLine(img, a, b, grey)
		drawText(img, a.X-12, rect.Max.Y+16, []string{"100k", "1M", "10M", "100M"}[int(p-kLo)], color.Black)
	}
	for _, st := range r.stores {
		c, ok := scaleColors[st]
		if !ok {
			c = color.RGBA{0x88, 0x88, 0x88, 0xff}
		}
		var last *image.Point
		for _, d := range r.sets {
			ns, ok := r.fig(d.name, st, cell, "ns/op")
			if d.valueSize != 64 || !ok {
				continue
			}
			pt := at(float64(d.keys), ns)
			draw.Draw(img, image.Rect(pt.X-2, pt.Y-2, pt.X+3, pt.Y+3), image.NewUniform(c), image.Point{}, draw.Src)
			if last != nil {
				drawLine(img, *last, pt, c)
			}
			last = &pt
		}
	}
}

// drawLine draws a line from a to b, 2 pixels thick.
func drawLine(img *image.RGBA, a, b image.Point, c color.Color) {
	steps := max(abs(b.X-a.X), abs(b.Y-a.Y), 1)
	for i := 0; i <= steps; i++ {
		x := a.X + (b.X-a.X)*i/steps
		y := a.Y + (b.Y-a.Y)*i/steps
		img.Set(x, y, c)
		img.Set(x, y+1, c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
