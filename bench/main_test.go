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
