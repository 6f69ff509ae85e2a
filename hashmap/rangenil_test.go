//go:build linux

package hashmap

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestRangeWithoutErrorVariable: Range, RangeView and their closed-map
// case take a nil errp: nothing panics, and the entries are yielded.
func TestRangeWithoutErrorVariable(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 100})
	want := map[string]string{}
	for i := range 20 {
		k, v := fmt.Sprint("k", i), fmt.Sprint("v", i)
		if err := m.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	for _, view := range []bool{false, true} {
		n := 0
		seq := m.Range(nil)
		if view {
			seq = m.RangeView(nil)
		}
		for k, v := range seq {
			if want[string(k)] != string(v) {
				t.Fatalf("%s = %q", k, v)
			}
			n++
		}
		if n != len(want) {
			t.Fatalf("view %v: %d entries, want %d", view, n, len(want))
		}
	}
	m.Close()
	for range m.Range(nil) {
		t.Fatal("an entry from a closed map")
	}
}
