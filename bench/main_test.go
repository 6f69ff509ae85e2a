package main

import (
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
		for j := range scriptLen {
			k := s.key(keys, j)
			if string(k) != string(keys[s.idx[j]]) || cap(k) != keySize {
				t.Fatalf("-keys %s: operation %d has key %q (cap %d), want %q", mode, j, k, cap(k), keys[s.idx[j]])
			}
		}
	}
}
