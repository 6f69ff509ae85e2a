//go:build linux

package segment

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestCounters: puts and deletes count what was stored and removed (not a
// PutIfAbsent that kept the old value, nor a delete of an absent key), a
// writer that found the lock taken counts a wait, and the counters survive
// reopening.
func TestCounters(t *testing.T) {
	tb, path := newTable(t, Params{Entries: 100, AverageKeySize: 4, AverageValueSize: 4, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	put := func(k string, mode PutMode) {
		if _, err := s.put(hashOf([]byte(k)), []byte(k), []byte("v"), mode); err != nil {
			t.Fatal(err)
		}
	}
	put("a", Replace)
	put("a", Replace)
	put("a", IfAbsent) // kept: not a put
	put("b", IfAbsent)
	if _, err := s.Delete(hashOf([]byte("a")), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(hashOf([]byte("zz")), []byte("zz")); err != nil {
		t.Fatal(err)
	}
	if err := s.compute(hashOf([]byte("c")), []byte("c"), func([]byte, bool) ([]byte, bool) { return []byte("x"), true }); err != nil {
		t.Fatal(err)
	}
	if err := s.compute(hashOf([]byte("b")), []byte("b"), func([]byte, bool) ([]byte, bool) { return nil, false }); err != nil {
		t.Fatal(err)
	}
	if !s.Lock().TryUpdateLock() {
		t.Fatal("lock busy")
	}
	done := make(chan struct{})
	go func() { put("d", Replace); close(done) }()
	time.Sleep(20 * time.Millisecond)
	_ = s.Lock().UpdateUnlock()
	<-done
	c := s.Counters()
	want := Counters{Puts: 5, Deletes: 2, LockWaits: 1}
	if c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
	again := openTable(t, path, tb.layout, false)
	if c := again.Segment(0).Counters(); c != want {
		t.Fatalf("after reopening: %+v", c)
	}
}

// TestMoveCounters: files made by this version count compactions and
// relocations in the segment's counters line, for every process and across
// reopening; files from before (no MoveCounters flag) keep those words at
// zero, as the older build that may open them again checks.
func TestMoveCounters(t *testing.T) {
	p := Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 8, MaxBloatFactor: 1, Segments: 1}
	l, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if !l.MoveCounters {
		t.Fatal("a new layout does not count moves")
	}
	old := l
	old.MoveCounters = false
	for _, tc := range []struct {
		name string
		l    Layout
		want Counters
	}{
		{"new file", l, Counters{Puts: 3, Compactions: 1, Relocations: 1}},
		{"file from before", old, Counters{Puts: 3}},
	} {
		path := filepath.Join(t.TempDir(), "map")
		tb := openTable(t, path, tc.l, true)
		s := tb.Segment(0)
		k := []byte("moving!!")
		blocker := keyWithHome(t, tb, homeChunk(tb, k)+tb.chunksFor(len(k), 1), k)
		for _, kv := range [][2][]byte{{k, []byte("v")}, {blocker, []byte("b")}} {
			if _, err := s.put(hashOf(kv[0]), kv[0], kv[1], Replace); err != nil {
				t.Fatal(err)
			}
		}
		// k's value outgrows its run, which the blocker, right after it,
		// keeps from growing in place: k moves.
		if _, err := s.put(hashOf(k), k, bytes.Repeat([]byte("x"), 40), Replace); err != nil {
			t.Fatal(err)
		}
		tv := tb.tier(0)
		if err := s.compact(&tv); err != nil {
			t.Fatal(err)
		}
		got := s.Counters()
		if tb.Relocations.Load() != 1 || tb.Compactions.Load() != 1 {
			t.Fatalf("%s: this process counted %d relocations, %d compactions; the test lost its point", tc.name, tb.Relocations.Load(), tb.Compactions.Load())
		}
		if got != tc.want {
			t.Errorf("%s: counters %+v, want %+v", tc.name, got, tc.want)
		}
		if n := s.Check(func(err error) { t.Errorf("%s: %v", tc.name, err) }); n != 2 {
			t.Errorf("%s: Check counted %d entries", tc.name, n)
		}
		again := openTable(t, path, tc.l, false)
		if c := again.Segment(0).Counters(); c.Compactions != tc.want.Compactions || c.Relocations != tc.want.Relocations {
			t.Errorf("%s: after reopening %+v", tc.name, c)
		}
	}
}

// TestMoveCountersFlag: the flag survives encoding, and a record that sets
// it without the counters line is rejected.
func TestMoveCountersFlag(t *testing.T) {
	l, err := NewLayout(Params{Entries: 1000, AverageKeySize: 8, AverageValueSize: 8, MaxBloatFactor: 1}, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeLayout(l.Encode(), 4096, l.End)
	if err != nil || !got.MoveCounters || !got.Stats {
		t.Fatalf("decoded %v, %v: moves counted %v", err, got.Stats, got.MoveCounters)
	}
	old := l
	old.MoveCounters = false
	if got, err := DecodeLayout(old.Encode(), 4096, l.End); err != nil || got.MoveCounters {
		t.Fatalf("a record without the flag: %v, moves counted %v", err, got.MoveCounters)
	}
	bad := l
	bad.Stats = false
	if _, err := DecodeLayout(bad.Encode(), 4096, l.End); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("move counters without the counters line: %v, want ErrBadLayout", err)
	}
}
