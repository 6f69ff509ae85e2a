package hashmap

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestGrownMapSplits: a map created for 10,000 entries takes 200,000
// (1,000,000 without -short); every key reads back, Check is clean, the
// segments in use grew and chains stay short.
func TestGrownMapSplits(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 200_000
	}
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 10_000, AverageKeySize: 12, AverageValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	before := m.Stats()
	if before.MaxSegments <= before.Segments {
		t.Fatalf("a new store map splits to %d segments from %d", before.MaxSegments, before.Segments)
	}
	for i := range n {
		if err := m.Put(fmt.Appendf(nil, "key-%09d", i), fmt.Appendf(nil, "value-%09d", i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for i := range n {
		v, err := m.Get(fmt.Appendf(nil, "key-%09d", i))
		if err != nil || string(v) != fmt.Sprintf("value-%09d", i) {
			t.Fatalf("get %d: %q, %v", i, v, err)
		}
	}
	if probs, err := m.Check(); err != nil || len(probs) > 0 {
		t.Fatalf("check: %v %v", probs, err)
	}
	st := m.Stats()
	if st.Entries != n {
		t.Errorf("Entries %d, want %d", st.Entries, n)
	}
	perSeg := float64(st.TiersInUse) / float64(st.Segments)
	t.Logf("segments %d -> %d of %d, tiers in use per segment %.2f, file %d bytes", before.Segments, st.Segments, st.MaxSegments, perSeg, st.FileSize)
	if st.Segments <= before.Segments || perSeg > 2.5 {
		t.Errorf("segments %d -> %d, %.2f tiers per segment: the map did not split", before.Segments, st.Segments, perSeg)
	}
	seen := 0
	for range m.Range(&err) {
		seen++
	}
	if err != nil || seen != n {
		t.Errorf("Range saw %d keys, %v; want %d", seen, err, n)
	}
}

// TestSplitMapCountsLookupsByCreationSegment: a map that splits keeps its
// hit and miss counters per segment it was created with, so that a
// registry slot does not grow with MaxSegments, and loses no lookup to a
// segment split into.
func TestSplitMapCountsLookupsByCreationSegment(t *testing.T) {
	const n = 40_000
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 2_000, AverageKeySize: 12, AverageValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	created := m.Stats().Segments
	if got := m.reg.Layout().Counters; got != 2*created {
		t.Fatalf("%d counter words per registry slot, want 2 x the %d segments the map was created with", got, created)
	}
	for i := range n {
		if err := m.Put(fmt.Appendf(nil, "key-%09d", i), []byte("v")); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for i := range n {
		if _, err := m.Get(fmt.Appendf(nil, "key-%09d", i)); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if _, err := m.Get(fmt.Appendf(nil, "absent-%09d", i)); err == nil {
			t.Fatalf("get absent %d: found", i)
		}
	}
	st := m.Stats()
	if st.Segments <= created {
		t.Fatalf("segments %d -> %d: the map did not split", created, st.Segments)
	}
	if st.Hits != n || st.Misses != n {
		t.Errorf("hits %d, misses %d; want %d each", st.Hits, st.Misses, n)
	}
	var hits, misses int64
	for _, s := range m.Segments() {
		hits, misses = hits+s.Hits, misses+s.Misses
		if s.Index >= created && s.Hits+s.Misses != 0 {
			t.Errorf("segment %d, split into, has %d hits and %d misses of its own", s.Index, s.Hits, s.Misses)
		}
	}
	if hits != n || misses != n {
		t.Errorf("per segment: hits %d, misses %d; want %d each", hits, misses, n)
	}
}
