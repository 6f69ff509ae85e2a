//go:build linux

package hashmap

import (
	"fmt"
	"path/filepath"
	"testing"
)

// An Open of an existing map maps in its segment headers and counters,
// not its first tiers: those are most of the file, and an Open that
// mapped them in took time in proportion to the map (the whole of it read
// from the disk when the file was not in the page cache). The Open that
// creates the map maps them in, writable, as before.
func TestOpenExistingMapsInNoTiers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.map")
	opts := &Options{Entries: 1 << 18, AverageKeySize: 16, AverageValueSize: 64}
	m, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	l := *m.layout
	tiers := l.Segments * l.TierSize // the first tiers
	res, err := m.file.Region.Residency()
	if err != nil {
		t.Fatal(err)
	}
	if res.Resident < tiers {
		t.Errorf("the creating Open mapped in %d bytes, want at least the first tiers' %d", res.Resident, tiers)
	}
	for i := range 1000 {
		if err := m.Put(fmt.Appendf(nil, "key-%d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    *Options
	}{{"writable", nil}, {"read-only", &Options{ReadOnly: true}}} {
		m, err := Open(path, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.file.Region.Residency()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Resident > tiers/4 {
			t.Errorf("a %s Open of the existing map mapped in %d bytes; the first tiers are %d", tc.name, res.Resident, tiers)
		}
	}
}
