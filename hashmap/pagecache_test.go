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

// Check of a new map reads no overflow tier the pool has not handed out:
// those are holes of the file, and its look at every tier's header
// (segment.Table.CheckGlobal) skips them (offheap.File.DataAt). Read
// through the mapping, each hole's pages came into the page cache, zeros,
// about half the file at the default bloat.
func TestCheckReadsNoHoles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.map")
	m, err := Open(path, &Options{Entries: 1 << 18, AverageKeySize: 16, AverageValueSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	l := *m.layout
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m, err = Open(path, &Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatal(problems, err)
	}
	res, err := m.file.Region.Residency()
	if err != nil {
		t.Fatal(err)
	}
	first := l.TiersOff + l.Segments*l.TierSize // up to the end of the first tiers
	if pool := (l.Tiers - l.Segments) * l.TierSize; res.Resident > first+pool/8 {
		t.Errorf("after Check, %d bytes of the file are mapped in: the first tiers end at %d, the pool's %d bytes are holes", res.Resident, first, pool)
	}
}
