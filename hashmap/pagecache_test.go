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
// about half the file at the default bloat. In a map that splits, the
// first tiers of the segments not split into yet are holes too.
func TestCheckReadsNoHoles(t *testing.T) {
	for _, splits := range []bool{false, true} {
		t.Run(fmt.Sprintf("splits=%v", splits), func(t *testing.T) { testCheckReadsNoHoles(t, splits) })
	}
}

func testCheckReadsNoHoles(t *testing.T, splits bool) {
	path := filepath.Join(t.TempDir(), "m.map")
	m, err := Open(path, &Options{Entries: 1 << 18, AverageKeySize: 16, AverageValueSize: 64, NoSplits: !splits})
	if err != nil {
		t.Fatal(err)
	}
	l := *m.layout
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Splits != splits {
		t.Fatalf("the map splits: %v, want %v", l.Splits, splits)
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
	// Up to the end of the first tiers of the segments in use and the one
	// split into next: those of segments not split into yet (in a map
	// that splits) are holes, as the pool is.
	first := l.TiersOff + min(l.Segments+1, l.MaxSegments)*l.TierSize
	if pool := (l.Tiers - l.MaxSegments) * l.TierSize; res.Resident > first+pool/8 {
		t.Errorf("after Check, %d bytes of the file are mapped in: the first tiers in use end at %d; the %d first tiers not in use and the pool's %d bytes are holes",
			res.Resident, first, l.MaxSegments-l.Segments, pool)
	}
}
