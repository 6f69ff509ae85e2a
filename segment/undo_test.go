//go:build linux

package segment

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
)

// TestUndoLayout: new files have an undo record per segment, between the
// counters and the tiers, recorded by a flag; a record from before the
// flag decodes without them, places the tiers where it always did, and
// rewrites any value that fits in place (nothing to save it to); a record
// whose flag and offsets disagree is refused.
func TestUndoLayout(t *testing.T) {
	p := Params{Entries: 1000, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Segments: 64}
	l, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Undo || l.UndoOff != l.StatsOff+l.Segments*statsLineSize || l.UndoSize != undoHeaderSize+minUndoBytes || l.TiersOff < l.UndoOff+l.Segments*l.UndoSize {
		t.Fatalf("undo records: %v at %d, %d bytes each; counters at %d, tiers at %d", l.Undo, l.UndoOff, l.UndoSize, l.StatsOff, l.TiersOff)
	}
	if got, err := DecodeLayout(l.Encode(), 4096, l.End); err != nil || !got.Undo || got.UndoOff != l.UndoOff || got.UndoSize != l.UndoSize {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	noUndo := p
	noUndo.NoUndo = true
	old, err := NewLayout(noUndo, 4096, true) // as files from before the records are
	if err != nil || old.Undo || old.UndoSize != 0 {
		t.Fatalf("a layout asked for without undo records: %+v, %v", old, err)
	}
	got, err := DecodeLayout(old.Encode(), 4096, old.End)
	if err != nil || got.Undo || !got.NoUndo || got.TiersOff != roundUp(l.StatsOff+l.Segments*statsLineSize, 4096) {
		t.Fatalf("a record from before undo records: %+v, %v", got, err)
	}
	forged := old
	forged.Undo = true // the flag, with the old offsets
	if _, err := DecodeLayout(forged.Encode(), 4096, l.End); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("the undo flag with the offsets of a file without records: %v, want ErrBadLayout", err)
	}

	// A file from before: a value larger than any record rewritten in place.
	tb := openTable(t, filepath.Join(t.TempDir(), "map"), got, true)
	k := []byte("key")
	s := tb.For(hashOf(k))
	for _, v := range [][]byte{bytes.Repeat([]byte{'o'}, 600), bytes.Repeat([]byte{'n'}, 600)} {
		if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
	}
	if n := tb.Relocations.Load(); n != 0 {
		t.Errorf("a file without undo records moved a value that fits: %d relocations", n)
	}
	// A new file saves what fits its record and moves what does not.
	tb = openTable(t, filepath.Join(t.TempDir(), "map"), l, true)
	s = tb.For(hashOf(k))
	for i, v := range [][]byte{bytes.Repeat([]byte{'o'}, 600), bytes.Repeat([]byte{'n'}, 600), []byte("short"), []byte("SHORT")} {
		if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
		if want := int64(min(i, 1)); tb.Relocations.Load() != want {
			t.Errorf("Put %d: %d relocations, want %d", i, tb.Relocations.Load(), want)
		}
		if s.undoActive() {
			t.Errorf("Put %d left the undo record active", i)
		}
	}
	checkClean(t, tb)
}

// TestUndoRecordDamage: an undo record left active with no writer inside
// (damage: writers clear it before the sequence is even again) is reported
// by Check and cleared by Repair, which puts back nothing: the entries are
// as they were.
func TestUndoRecordDamage(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	model := map[string][]byte{"a": []byte("value a"), "b": []byte("value b")}
	for k, v := range model {
		if _, err := s.put(hashOf([]byte(k)), []byte(k), v, Replace); err != nil {
			t.Fatal(err)
		}
	}
	loc, found, ok := s.find(hashOf([]byte("a")), []byte("a"))
	if !found || !ok {
		t.Fatal("a not found")
	}
	at := tb.layout.entryByte(loc.tier.index, loc.chunk)
	clear(s.undoData) // what it would put back: zeros
	s.undoHead[udLen], s.undoHead[udSeq], s.undoHead[udAt] = 32, 1, uint64(at)+1
	var problems []error
	s.Check(func(err error) { problems = append(problems, err) })
	if len(problems) != 1 {
		t.Fatalf("Check found %v, want the undo record", problems)
	}
	rep, rebuilt, err := s.Repair()
	if err != nil || !rebuilt || rep.Restored {
		t.Fatalf("Repair = %+v, %v, %v; want a rebuild that restores nothing", rep, rebuilt, err)
	}
	checkClean(t, tb)
	checkTable(t, tb, model)
}

// TestLargeRewriteWhenFull: an entry too large for the undo record is
// moved when a free run is at hand, and otherwise rewritten in place
// (unsaved) rather than failing with ErrFull in a map with no room left
// for a second copy.
func TestLargeRewriteWhenFull(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 16, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	big := func(c byte) []byte { return bytes.Repeat([]byte{c}, int(tb.undoCap)) }
	model := map[string][]byte{}
	var keys [][]byte
	for i := 0; ; i++ {
		k := []byte{'k', byte('a' + i)}
		if _, err := s.put(hashOf(k), k, big('o'), Replace); errors.Is(err, ErrFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		model[string(k)], keys = big('o'), append(keys, k)
	}
	if len(keys) < 2 {
		t.Fatalf("only %d large entries fit: the test lost its point", len(keys))
	}
	moved := tb.Relocations.Load()
	for _, k := range keys {
		if _, err := s.put(hashOf(k), k, big('n'), Replace); err != nil {
			t.Fatalf("rewriting %s with a value of the same size in a full map: %v", k, err)
		}
		model[string(k)] = big('n')
	}
	if tb.Relocations.Load() != moved {
		t.Errorf("%d entries moved in a full map", tb.Relocations.Load()-moved)
	}
	checkTable(t, tb, model)
	checkClean(t, tb)
	// With room again, the next such rewrite moves the entry.
	if _, err := s.Delete(hashOf(keys[0]), keys[0]); err != nil {
		t.Fatal(err)
	}
	delete(model, string(keys[0]))
	if _, err := s.put(hashOf(keys[1]), keys[1], big('m'), Replace); err != nil {
		t.Fatal(err)
	}
	model[string(keys[1])] = big('m')
	if tb.Relocations.Load() != moved+1 {
		t.Errorf("a large rewrite with a free run at hand was not moved")
	}
	checkTable(t, tb, model)
	checkClean(t, tb)
}

// FuzzUndoRecord: whatever an undo record holds (a damaged file, or a
// record whose sequence matches the segment's, as a writer that died
// inside leaves it), putting it back writes nowhere but its own segment's
// entry space, and afterwards Repair leaves a table that passes Check and
// a record that names nothing.
func FuzzUndoRecord(f *testing.F) {
	f.Add(uint64(100), uint64(1), uint64(40), []byte("saved bytes"), true, uint8(1))
	f.Add(uint64(100), uint64(1), uint64(40), []byte("saved bytes"), true, uint8(2))
	f.Add(uint64(100), uint64(3), uint64(8), []byte("saved bytes"), true, uint8(3))
	f.Add(uint64(1<<40), uint64(3), uint64(1<<20), []byte{}, false, uint8(0))
	f.Add(uint64(0), uint64(0), uint64(0), []byte{1}, true, uint8(0))
	f.Fuzz(func(t *testing.T, at, seq, n uint64, data []byte, matchSeq bool, where uint8) {
		tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 4, AverageValueSize: 8, MaxBloatFactor: 2, Segments: 2})
		for i := range 20 {
			k := []byte{'k', byte(i)}
			if _, err := tb.For(hashOf(k)).put(hashOf(k), k, bytes.Repeat([]byte{byte(i)}, i), Replace); err != nil {
				t.Fatal(err)
			}
		}
		s := tb.Segment(1)
		l := &tb.layout
		lo, hi := uint64(l.TierSize+l.entriesOff), uint64(l.TierSize+l.entriesOff+l.Chunks*l.ChunkSize)
		tierSize := uint64(l.TierSize)
		switch where % 4 {
		case 1: // somewhere in the segment's entry space
			at = lo + at%(hi-lo) + 1
		case 2: // in the entry space of a tier not the segment's
			other := (at / tierSize) % uint64(l.Tiers)
			if other == 1 {
				other = 0
			}
			at = other*tierSize + uint64(l.entriesOff) + at%(hi-lo) + 1
		case 3: // in the segment's tier, before its entry space
			at = tierSize + at%uint64(l.entriesOff) + 1
		}
		copy(s.undoData, data)
		s.undoHead[udAt], s.undoHead[udSeq], s.undoHead[udLen] = at, seq, n
		if matchSeq {
			*s.seq = seq
		}
		before := bytes.Clone(tb.tierBytes)
		restored := s.restoreUndo()
		for i := range before {
			if before[i] != tb.tierBytes[i] && (!restored || uint64(i) < lo || uint64(i) >= hi) {
				t.Fatalf("byte %d of the tiers changed (record at=%d seq=%d len=%d, restored %v)", i, at, seq, n, restored)
			}
		}
		if restored && (seq&1 == 0 || !matchSeq) {
			t.Fatalf("restored a record whose sequence %d is not the segment's odd one", seq)
		}
		if s.undoActive() {
			t.Fatal("the record still names a rewrite")
		}
		s.lock.SetLedger(new(uint64))
		if _, _, err := s.Repair(); err != nil {
			t.Fatalf("Repair: %v", err)
		}
		checkClean(t, tb)
	})
}
