package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Keys are computed from their index: distinct indices must give distinct
// keys, and already in their first 8 bytes, which ordered stores sort by.
func TestScaleKeyUnique(t *testing.T) {
	seen := map[uint64]int{}
	buf := make([]byte, keySize)
	check := func(i int) {
		k := scaleKey(buf, i)
		if len(k) != keySize || binary.LittleEndian.Uint64(k[8:]) != uint64(i) {
			t.Fatalf("key %d = %x: want 16 bytes ending in its index", i, k)
		}
		h := binary.LittleEndian.Uint64(k)
		if j, ok := seen[h]; ok {
			t.Fatalf("keys %d and %d share their first 8 bytes %x", j, i, h)
		}
		seen[h] = i
	}
	for i := range 200_000 {
		check(i)
	}
	for i := 100_000_000 - 100_000; i < 100_000_000; i++ {
		check(i)
	}
	if string(scaleKey(buf, 7)) == string(scaleKey(make([]byte, keySize), 8)) {
		t.Fatal("keys 7 and 8 are equal")
	}
}

func TestParseSets(t *testing.T) {
	sets, err := parseSets("10M-1KiB,100k-64B,100M-64B,1M-64B")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range sets {
		names = append(names, d.name)
	}
	if got := strings.Join(names, ","); got != "100k-64B,1M-64B,100M-64B,10M-1KiB" {
		t.Errorf("order %s: want ascending bytes", got)
	}
	if d := sets[3]; d.keys != 10_000_000 || d.valueSize != 1024 {
		t.Errorf("10M-1KiB = %+v", d)
	}
	for name, want := range map[string]int{"1M-1KiB": 1024, "1M-2MiB": 2 << 20, "1M-64B": 64} {
		if d, err := parseSet(name); err != nil || d.valueSize != want || d.keys != 1_000_000 {
			t.Errorf("%s = %+v, %v", name, d, err)
		}
	}
	for _, bad := range []string{"10M", "10X-64B", "1M-4B", "-64B", "0k-64B"} {
		if _, err := parseSets(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The memory and disk guard skips a pair that would not fit, saying why,
// and estimates from what a smaller set of the store took where that is
// more than the formula.
func TestGuard(t *testing.T) {
	const gb = 1e9
	set := func(name string) dataset {
		d, err := parseSet(name)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	none := parseScale(nil)
	for _, tc := range []struct {
		store, set  string
		avail, free float64
		want        string // "" to run
	}{
		{"sharedmap", "1M-64B", 10 * gb, 100 * gb, ""},
		{"sharedmap", "100M-64B", 10 * gb, 100 * gb, "needs ~14.4 GB of memory, 10.0 GB available"},
		{"sharedmap", "100M-64B", 100 * gb, 10 * gb, "needs ~14.4 GB of disk, 10.0 GB free"},
		{"rwmutex-map", "50M-64B", 24 * gb, 100 * gb, "needs ~20.0 GB of memory"},
		{"fastcache", "50M-64B", 24 * gb, 0, ""}, // in memory only
		{"bbolt", "10M-1KiB", 24 * gb, 100 * gb, ""},
	} {
		got := guard(tc.store, set(tc.set), none, tc.avail, tc.free)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: %q, want %q", tc.store, tc.set, got, tc.want)
		}
	}
	oneM := "BenchmarkScale/set=1M-64B/store=sharedmap/cell=footprint 1 0 ns/op 1000 resident-B/entry 150 file-B/entry"
	prev := parseScale([]string{oneM})
	if got := guard("sharedmap", set("10M-64B"), prev, 10*gb, 100*gb); !strings.Contains(got, "needs ~10.0 GB of memory") {
		t.Errorf("10M after 1000 B/entry at 1M: %q, want the measured 10 GB", got)
	}
	prev = parseScale([]string{oneM, "BenchmarkScale/set=100k-64B/store=sharedmap/cell=footprint 1 0 ns/op 5000 resident-B/entry"})
	if got := guard("sharedmap", set("10M-64B"), prev, 13*gb, 100*gb); got != "" {
		t.Errorf("the 100k set's figure was used over the 1M set's: %q", got)
	}
	if got := guard("sharedmap", set("10M-1KiB"), prev, 30*gb, 100*gb); got != "" {
		t.Errorf("another value size's figure was used: %q", got)
	}
}

// rawLines are a made-up raw.txt of two sets.
var rawLines = []string{
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=load 900000 500 ns/op 2000000 keys/s 0.45 wall-s",
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=get-uniform-g1 100 100 ns/op 90 p50-ns 300 p99-ns 900 p99.9-ns",
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=get-uniform-g1 100 120 ns/op 95 p50-ns 310 p99-ns 950 p99.9-ns",
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=get-uniform-g1 100 110 ns/op 92 p50-ns 305 p99-ns 920 p99.9-ns",
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=put-uniform-g1 100 200 ns/op 150 p50-ns 400 p99-ns 2000 p99.9-ns",
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=footprint 1 0 ns/op 150 resident-B/entry 100 huge-MB 0.5 huge-frac 160 file-B/entry 320 apparent-B/entry",
	"BenchmarkScale/set=1M-64B/store=sharedmap/cell=check 1 2000000000 ns/op 0.16 GB/s",
	"BenchmarkScale/set=1M-64B/store=lmdb/cell=load 900000 1000 ns/op 1000000 keys/s 0.9 wall-s",
	"BenchmarkScale/set=1M-64B/store=lmdb/cell=get-uniform-g1 100 1000 ns/op 900 p50-ns 3000 p99-ns 9000 p99.9-ns",
	"BenchmarkScale/set=1M-64B/store=lmdb/cell=put-uniform-g1 100 400 ns/op 300 p50-ns 900 p99-ns 5000 p99.9-ns",
	"BenchmarkScale/set=1M-64B/store=lmdb/cell=footprint 1 0 ns/op 200 resident-B/entry 0 huge-MB 0 huge-frac 190 file-B/entry 570 apparent-B/entry",
	"BenchmarkScale/set=10M-64B/store=sharedmap/cell=get-uniform-g1 100 200 ns/op 150 p50-ns 500 p99-ns 900 p99.9-ns",
	"SKIP set=10M-64B store=lmdb needs ~14.4 GB of memory, 10.0 GB available",
	"NOTE set=10M-64B store=sharedmap load did not finish in 20m0s (5 keys loaded, 1 keys/s)",
}

// results.md's tables and targets come from raw.txt alone: medians of the
// runs, skips and notes in place, targets decided by their ratios.
func TestScaleResults(t *testing.T) {
	r := parseScale(rawLines)
	tables := r.tables()
	for _, want := range []string{
		"| 1M-64B | sharedmap | 110 ns | 92.0 ns / 305 ns / 920 ns | 200 ns |", // medians of three runs
		"| 2.00M (0.45 s) |",
		"| 160 (320) | 150 | 50% |",
		"| 2.00 s (0.16) |",
		"| 10M-64B | lmdb | skipped: needs ~14.4 GB of memory, 10.0 GB available |",
		"- 10M-64B, sharedmap: load did not finish in 20m0s",
		"| 10M-64B | sharedmap (see the notes) | 200 ns |",
	} {
		if !strings.Contains(tables, want) {
			t.Errorf("tables lack %q:\n%s", want, tables)
		}
	}
	targets := r.targets()
	for _, want := range []string{
		"| sharedmap Get at 10M-64B within 1.5x of its Get at 1M-64B | 1.82 x the time | unmet |",
		"| Get at least 4x faster than LMDB's, 1M-64B | 9.09 x (LMDB ns / sharedmap ns) | met |",
		"| Put at least 3x faster than LMDB's, 1M-64B | 2.00 x (LMDB ns / sharedmap ns) | unmet |",
		"| file bytes per entry at 1M-64B no more than LMDB's | 0.84 x LMDB's | met |",
	} {
		if !strings.Contains(targets, want) {
			t.Errorf("targets lack %q:\n%s", want, targets)
		}
	}
	if strings.Contains(targets, "batched load at 10M") {
		t.Errorf("a target without figures is shown:\n%s", targets)
	}
	dir := t.TempDir()
	if err := writeScale(dir, &rawFile{lines: rawLines}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.md", "chart.png", "raw.txt"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// -resume skips the pairs raw.txt has figures of, runs skipped ones again,
// and a re-run pair replaces only its own lines.
func TestResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raw.txt")
	if err := os.WriteFile(path, []byte(strings.Join(rawLines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.lines) != len(rawLines) {
		t.Fatalf("%d lines read, want %d", len(r.lines), len(rawLines))
	}
	for _, tc := range []struct {
		store, set string
		want       bool
	}{{"sharedmap", "1M-64B", true}, {"lmdb", "1M-64B", true}, {"lmdb", "10M-64B", false}, {"bbolt", "1M-64B", false}} {
		if got := r.has(tc.store, tc.set); got != tc.want {
			t.Errorf("has(%s, %s) = %v", tc.store, tc.set, got)
		}
	}
	r.replace("sharedmap", "1M-64B", []string{"BenchmarkScale/set=1M-64B/store=sharedmap/cell=get-uniform-g1 1 50 ns/op"})
	res := parseScale(r.lines)
	if x, _ := res.fig("1M-64B", "sharedmap", "get-uniform-g1", "ns/op"); x != 50 {
		t.Errorf("sharedmap 1M-64B Get after the re-run: %v, want 50", x)
	}
	if _, ok := res.fig("1M-64B", "sharedmap", "load", "keys/s"); ok {
		t.Error("the re-run pair kept its old lines")
	}
	if x, _ := res.fig("1M-64B", "lmdb", "get-uniform-g1", "ns/op"); x != 1000 {
		t.Errorf("lmdb's row was not kept: %v", x)
	}
	if _, err := readRaw(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("no raw.txt yet: %v", err)
	}
}

func TestLatHist(t *testing.T) {
	var h latHist
	for ns := 1; ns <= 100_000; ns++ {
		h.add(time.Duration(ns))
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		got, want := h.quantile(q), q*100_000
		if got < want*0.98 || got > want*1.02 {
			t.Errorf("quantile %v = %v, want %v within 2%%", q, got, want)
		}
	}
	if got := h.quantile(0.5); got == 0 {
		t.Error("no median")
	}
}

// results.md names the run by the command a user types, not the temporary
// paths scale.sh builds into.
func TestScaleCommand(t *testing.T) {
	got := scaleCommand([]string{"-scale", "-mapctl", "/tmp/x/mapctl", "-stores", "sharedmap", "-mapctl=/y", "-runs", "1"})
	if want := "./scale.sh -stores sharedmap -runs 1"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// The load puts every key with its value, which the cells' Gets check;
// a load past its deadline stops and says how far it got.
func TestScaleLoadAndCells(t *testing.T) {
	d := dataset{name: "25k-64B", keys: 25_000, valueSize: 64}
	st := &rwMap{m: map[string][]byte{}}
	n, _, err := scaleLoad(st, d, 20_000, time.Now().Add(time.Minute), "rwmutex-map")
	if err != nil || n != 20_000 {
		t.Fatalf("load: %d keys, %v", n, err)
	}
	if m, _, err := firstWrites(st, d, 20_000, d.keys, time.Now().Add(time.Minute)); err != nil || m != 5_000 {
		t.Fatalf("first writes: %d, %v", m, err)
	}
	if len(st.m) != d.keys {
		t.Fatalf("%d keys stored, want %d", len(st.m), d.keys)
	}
	for _, put := range []bool{false, true} {
		var h latHist
		ops, el, err := opLoop(st, d, put, 1, 20*time.Millisecond, &h, nil)
		if err != nil || ops == 0 || el <= 0 || h.n != ops {
			t.Errorf("put=%v: %d ops in %v, %d timed, %v", put, ops, el, h.n, err)
		}
	}
	delete(st.m, string(scaleKey(make([]byte, keySize), 7)))
	if _, _, err := opLoop(st, dataset{keys: 8, valueSize: 64}, false, 1, 20*time.Millisecond, nil, nil); err == nil {
		t.Error("a missing key went unnoticed")
	}
	var misses uint64
	if ops, _, err := opLoop(st, dataset{keys: 8, valueSize: 64}, false, 1, 20*time.Millisecond, nil, &misses); err != nil || misses == 0 || misses == ops {
		t.Errorf("a cache's missing key: %d misses in %d Gets, %v; want some, counted", misses, ops, err)
	}
	late, _, err := scaleLoad(&rwMap{m: map[string][]byte{}}, d, 20_000, time.Now(), "rwmutex-map")
	if err != nil || late != 0 {
		t.Errorf("a load past its deadline put %d keys, %v", late, err)
	}
}
