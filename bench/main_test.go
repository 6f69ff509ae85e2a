package main

import (
	"errors"
	"strings"
	"testing"
)

// A misspelt name in a filter flag must stop the run: it used to select
// nothing and end quietly with empty results.
func TestCheckNames(t *testing.T) {
	for _, tc := range []struct {
		stores, datasets, cells string
		wrong                   string // "" if the names are all known
	}{
		{"", "", "", ""},
		{"sharedmap,lmdb", "1M-64B,100k-1KiB", "get-uniform-g1,put-uniform-p2,getmany-uniform-g1", ""},
		{"sharedmap,redis", "", "", `-stores: no "redis"`},
		{"", "100k-1K", "", `-datasets: no "100k-1K"`},
		{"", "", "get-uniform-g3", `-cells: no "get-uniform-g3"`},
		{"sharedmap,", "", "", `-stores: no ""`},
	} {
		err := checkNames(tc.stores, tc.datasets, tc.cells)
		switch {
		case tc.wrong == "" && err != nil:
			t.Errorf("%q %q %q: %v", tc.stores, tc.datasets, tc.cells, err)
		case tc.wrong != "" && (err == nil || !strings.Contains(err.Error(), tc.wrong)):
			t.Errorf("%q %q %q: error %v, want one saying %s", tc.stores, tc.datasets, tc.cells, err, tc.wrong)
		}
	}
}

// Both key modes must hand operation j the key its script drew: a script
// whose key bytes were off by one operation would still run, on keys other
// than the ones drawn (and Zipf's hot keys would not be hot).
func TestScriptKeysAreTheDrawnKeys(t *testing.T) {
	keys := makeKeys(1000)
	defer func(m string) { keyMode = m }(keyMode)
	for _, mode := range []string{keysScript, keysTable} {
		keyMode = mode
		s := newScript(keys, cell{workload: workloads[2], zipf: true, workers: 1}, 7)
		if (s.keys != nil) != (mode == keysScript) {
			t.Fatalf("-keys %s: script key bytes present = %v", mode, s.keys != nil)
		}
		for j := range s.idx {
			k := s.key(keys, j)
			if string(k) != string(keys[s.idx[j]]) || cap(k) != keySize {
				t.Fatalf("-keys %s: operation %d has key %q (cap %d), want %q", mode, j, k, cap(k), keys[s.idx[j]])
			}
		}
	}
}

// TestUniformScriptsCoverTheKeys: a uniform script draws nearly every key
// of its dataset, so that a store is measured on the whole working set,
// not on the part a short script happens to go round.
func TestUniformScriptsCoverTheKeys(t *testing.T) {
	for _, n := range []int{1000, 100_000, 1_000_000} {
		if l := scriptLen(n); l < 4*n || l&(l-1) != 0 {
			t.Fatalf("scriptLen(%d) = %d: want a power of two of at least %d", n, l, 4*n)
		}
	}
	keys := makeKeys(100_000)
	s := newScript(keys, cell{workload: workloads[0], workers: 1}, 3)
	seen := make([]bool, len(keys))
	covered := 0
	for _, i := range s.idx {
		if !seen[i] {
			seen[i] = true
			covered++
		}
	}
	if share := float64(covered) / float64(len(keys)); share < 0.97 {
		t.Fatalf("a uniform script over %d keys draws %.1f%% of them", len(keys), share*100)
	}
}

// TestTargetsDecideByPerRunMedians: results.md's targets come from the
// per-run figures (each run's sample of one store against the same run's
// of the other), their median deciding, and a target whose cells the run
// left out is left out.
func TestTargetsDecideByPerRunMedians(t *testing.T) {
	var r results
	r.init()
	ds := datasets[0].name
	// Three runs: sharedmap's Put against the map's Set is 0.4x, 0.6x and
	// 0.45x: median 0.45x, met. The ratio of the medians, 300 ns against
	// 500, would say 0.6x, unmet: the runs' noise, which moves both stores
	// of a run together, would decide it.
	for i, p := range [][2]float64{{200, 500}, {300, 500}, {450, 1000}} {
		r.add("sharedmap", ds, "put-uniform-g1", i, p[0], 0)
		r.add("rwmutex-map", ds, "put-uniform-g1", i, p[1], 2)
		r.add("sharedmap", ds, "get-uniform-g1", i, 100, 0)
		r.add("lmdb", ds, "get-uniform-g1", i, 480, 1) // 4.8x: unmet
	}
	out := r.targets()
	for _, want := range []string{
		"| Put at most half the map's Set, 1 goroutine | 0.45x its time (0.40-0.60), met |",
		"| Get 5x faster than an LMDB read transaction | 4.80x (4.80-4.80), unmet |",
		"| zero allocations per operation (Get and Put, 1 goroutine) | 0.00 allocs/op (0.00-0.00), met |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "two reader processes") || strings.Contains(out, "2 goroutines") {
		t.Errorf("targets show cells the run left out:\n%s", out)
	}
}

// A narrowed run must not replace the full run's files: a profile
// command must leave results.md, which the docs quote, as it was.
func TestNarrowedRunsWriteElsewhere(t *testing.T) {
	for _, tc := range []struct {
		out, env, stores, datasets, cells, want string
	}{
		{"", "", "", "", "", fullRunDir},
		{"", "", "sharedmap", "", "", partialRunDir},
		{"", "", "", "1M-64B", "", partialRunDir},
		{"", "", "", "", "put-uniform-g1", partialRunDir},
		{"/tmp/x", "", "sharedmap", "", "", "/tmp/x"},
		{"results", "", "sharedmap", "", "", "results"},
		{"", "/tmp/env", "sharedmap", "", "", "/tmp/env"},
		{"", "/tmp/env", "", "", "", "/tmp/env"},
		{"/tmp/x", "/tmp/env", "", "", "", "/tmp/x"},
	} {
		if got := outDir(tc.out, tc.env, tc.stores, tc.datasets, tc.cells); got != tc.want {
			t.Errorf("outDir(%q, %q, %q, %q, %q) = %q, want %q", tc.out, tc.env, tc.stores, tc.datasets, tc.cells, got, tc.want)
		}
	}
}

// TestMissingHitsNamesLossyCells: results.md names every cell whose Gets
// missed in some run, with its lowest hit ratio, and says so when none did.
func TestMissingHitsNamesLossyCells(t *testing.T) {
	var r results
	r.init()
	if got := r.missingHits(); !strings.Contains(got, "Every Get") {
		t.Fatalf("no cells: %q", got)
	}
	r.addCellHits("fastcache", "1M-64B", "mix95-uniform-g1", 0.5)
	r.addCellHits("fastcache", "1M-64B", "mix95-uniform-g1", 0.098)
	r.addCellHits("fastcache", "1M-64B", "mix95-uniform-g1", 0.3)
	r.addCellHits("sharedmap", "1M-64B", "get-uniform-g1", 1)
	got := r.missingHits()
	if !strings.Contains(got, "fastcache 1M-64B mix95-uniform-g1 0.098") || strings.Contains(got, "sharedmap") {
		t.Fatalf("missingHits = %q", got)
	}
	if tl := (tally{ops: 10, gets: 0}); tl.hitRatio() != -1 {
		t.Fatalf("hit ratio of a cell without Gets = %v", tl.hitRatio())
	}
}

// A store that failed one run has no sample for it: its later samples must
// still be paired with the other stores' samples of their own runs, not of
// the run at the same position.
func TestRatiosPairSamplesByRun(t *testing.T) {
	var r results
	r.init()
	const ds, c = "1M-64B", "get-uniform-g1"
	for run, ns := range []float64{100, 200, 300} {
		r.add("sharedmap", ds, c, run, ns, 0)
	}
	r.add("lmdb", ds, c, 0, 500, 0) // run 1 failed
	r.add("lmdb", ds, c, 2, 1500, 0)
	f := ratio("lmdb", c, "sharedmap", c)
	for run, want := range map[int]float64{0: 5, 2: 5} {
		if x, ok := f(&r, ds, run); !ok || x != want {
			t.Errorf("run %d: ratio %v %v, want %v", run, x, ok, want)
		}
	}
	if _, ok := f(&r, ds, 1); ok {
		t.Errorf("run 1: a ratio from a run lmdb has no sample of")
	}
	if x, ok := r.medianRatio("lmdb", ds, c); !ok || x != 5 {
		t.Errorf("medianRatio = %v %v, want 5 (by position it would be 500/100 and 1500/200)", x, ok)
	}
}

// A store with nothing on the Go heap must not show the VM's noise as its
// collector cost: its GC figure reads as below the spread measured before
// its open.
func TestFootprintGCBelowNoise(t *testing.T) {
	var r results
	r.init()
	for _, f := range []footprint{{memMB: 148, gcMs: 1.8, gcNoiseMs: 3.9}, {memMB: 150, gcMs: -1.5, gcNoiseMs: 2}, {memMB: 149, gcMs: 0.2, gcNoiseMs: 2.5}} {
		r.addFootprint("sharedmap", "1M-64B", f)
	}
	for _, f := range []footprint{{memMB: 171, gcMs: 44.2, gcNoiseMs: 2}, {memMB: 170, gcMs: 45, gcNoiseMs: 3}} {
		r.addFootprint("rwmutex-map", "1M-64B", f)
	}
	for st, want := range map[string]string{"sharedmap": "149 | 0 | < 2.5", "rwmutex-map": "170 | 0 | 44.6", "lmdb": "- | - | -"} {
		if got := r.footprintCells(st, "1M-64B"); got != want {
			t.Errorf("%s: %q, want %q", st, got, want)
		}
	}
}

// TestCheckValue: the check of every value read takes a value made by
// valueFor for its key and refuses another key's, a short one and an
// empty one (so a store that answered wrongly cannot be timed).
func TestCheckValue(t *testing.T) {
	buf := newValueBuf(64)
	if err := checkValue(valueFor(buf, 7), 64, 7); err != nil {
		t.Errorf("key 7's own value: %v", err)
	}
	for _, tc := range []struct {
		v    []byte
		size int
	}{{valueFor(newValueBuf(64), 8), 64}, {valueFor(newValueBuf(64), 7)[:32], 64}, {nil, 64}} {
		if err := checkValue(tc.v, tc.size, 7); !errors.Is(err, errWrongValue) {
			t.Errorf("checkValue(%d bytes) for key 7 = %v, want errWrongValue", len(tc.v), err)
		}
	}
}
