//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"math"
	"testing"
)

// TestHomeRunsLieInTheTier: every lock-free probe reads words of the key's
// home run before it knows whether anything is there, so for every tag the
// run must lie in the tier's entry space, whatever the sizes the map was
// made for.
func TestHomeRunsLieInTheTier(t *testing.T) {
	for _, p := range []Params{
		{Entries: 100, AverageKeySize: 8, AverageValueSize: 0, MaxBloatFactor: 1},
		{Entries: 100, AverageKeySize: 16, AverageValueSize: 64, MaxBloatFactor: 1},
		{Entries: 1000, AverageKeySize: 8, AverageValueSize: 100000, MaxBloatFactor: 1},
		{Entries: 100, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 2, Cache: true},
		{Entries: 1 << 20, AverageKeySize: 1, AverageValueSize: 1, MaxBloatFactor: 1, Segments: 1},
	} {
		l, err := NewLayout(p, 4096, true)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		g := newGeometry(&l)
		if l.homeChunks < 1 || l.homeRuns < 1 {
			t.Errorf("%+v: %d home runs of %d chunks", p, l.homeRuns, l.homeChunks)
		}
		space := uint64(l.Chunks * l.ChunkSize)
		// The last tag scrambles to MaxUint32 (inverse undoes
		// secondHomeByte's multiplication; 0 scrambles to 0): the second
		// home run at the tier's end.
		inverse := uint32(0x144cbc89)
		if inverse*secondHomeMultiplier != 1 {
			t.Fatal("not the multiplier's inverse")
		}
		for _, tag := range []uint32{0, 1, 1 << 31, math.MaxUint32 - 1, math.MaxUint32, math.MaxUint32 * inverse} {
			for _, home := range []uint64{g.homeByte(tag), g.secondHomeByte(tag)} {
				if home%uint64(l.ChunkSize) != 0 || home+g.homeBytes > space {
					t.Errorf("%+v: tag %#x: home run at byte %d (+%d) of a %d-byte entry space", p, tag, home, g.homeBytes, space)
				}
			}
		}
		// Lookups request the run's first two lines at most: of an entry
		// of a megabyte, the rest is streamed by the copy.
		if g.homeLast+8 > g.homeBytes || g.homeLast >= 128 {
			t.Errorf("%+v: lookups request up to byte %d of a %d-byte home run", p, g.homeLast+8, g.homeBytes)
		}
		// Put requests a large value's first home run to its end at most.
		if g.homeTail != 0 && 64+g.homeTail > g.homeBytes {
			t.Errorf("%+v: Put requests up to byte %d of a %d-byte home run", p, 64+g.homeTail, g.homeBytes)
		}
	}
}

// TestNewEntriesGoHome: a new entry takes its first home run when the run
// is free, so that a lookup finds it in the lines it requested with the
// slot; when another entry holds the run, it takes its second; and every
// entry stays readable either way.
func TestNewEntriesGoHome(t *testing.T) {
	tb, s, put := previewTable(t)
	chunkOf := func(k []byte) int64 { t.Helper(); return entryChunk(t, tb, k) }
	k1 := []byte("key-one!")
	k2 := sameHome(t, tb, k1)
	k3 := sameHome(t, tb, k2)
	put(k1, []byte("value one"))
	put(k2, []byte("value two"))
	if c := chunkOf(k1); c != homeChunk(tb, k1) {
		t.Errorf("k1 at chunk %d, its home run starts at %d", c, homeChunk(tb, k1))
	}
	if secondHomeChunk(tb, k2) == homeChunk(tb, k1) {
		t.Fatal("k2's second home is k1's: the test lost its point")
	}
	if c := chunkOf(k2); c != secondHomeChunk(tb, k2) {
		t.Errorf("k2 at chunk %d, not its second home run (%d; k1 holds its first)", c, secondHomeChunk(tb, k2))
	}
	if _, err := s.Delete(hashOf(k1), k1); err != nil {
		t.Fatal(err)
	}
	put(k3, []byte("value three"))
	if c := chunkOf(k3); c != homeChunk(tb, k3) {
		t.Errorf("k3 at chunk %d, its home run (freed by k1) starts at %d", c, homeChunk(tb, k3))
	}
	for k, want := range map[string]string{string(k2): "value two", string(k3): "value three"} {
		if v, found, err := s.get(hashOf([]byte(k)), []byte(k), nil); err != nil || !found || string(v) != want {
			t.Errorf("%s = %q, %v, %v; want %q", k, v, found, err, want)
		}
	}
	if n := s.Check(func(err error) { t.Error(err) }); n != 2 {
		t.Errorf("Check counted %d entries, want 2", n)
	}

	// A value that outgrows its run moves to its first home run when that
	// is free: k2 (at its second) is blocked from growing in place by an
	// entry right after it, and its first home run is freed.
	after := chunkOf(k2) + tb.chunksFor(len(k2), len("value two"))
	blocker := keyWithHome(t, tb, after, nil)
	put(blocker, []byte("blocks k2"))
	if c := chunkOf(blocker); c != after {
		t.Fatalf("blocker at chunk %d, not right after k2 (%d): the test lost its point", c, after)
	}
	if _, err := s.Delete(hashOf(k3), k3); err != nil {
		t.Fatal(err)
	}
	long := []byte("k2's value, now longer than its run")
	relocations := tb.Relocations.Load()
	put(k2, long)
	if tb.Relocations.Load() == relocations {
		t.Fatal("k2 did not move: the test lost its point")
	}
	if c := chunkOf(k2); c != homeChunk(tb, k2) {
		t.Errorf("k2 moved to chunk %d, its home run (free) starts at %d", c, homeChunk(tb, k2))
	}
	if v, found, err := s.get(hashOf(k2), k2, nil); err != nil || !found || string(v) != string(long) {
		t.Errorf("k2 = %q, %v, %v after its move", v, found, err)
	}
	if n := s.Check(func(err error) { t.Error(err) }); n != 2 {
		t.Errorf("Check counted %d entries, want 2", n)
	}
}

// TestBothHomesTaken: an entry whose two home runs are both held goes to
// the first free run, and is read from there.
func TestBothHomesTaken(t *testing.T) {
	tb, s, put := previewTable(t)
	k1 := []byte("key-one!")
	// k2 shares k1's first home run only; k3 holds k2's second.
	k2 := keyWhere(t, "shares k1's first home run only", func(k []byte) bool {
		return homeChunk(tb, k) == homeChunk(tb, k1) && !bytes.Equal(k, k1) && secondHomeChunk(tb, k) != homeChunk(tb, k1)
	})
	k3 := keyWithHome(t, tb, secondHomeChunk(tb, k2), k2)
	put(k1, []byte("value one"))
	put(k3, []byte("value three"))
	put(k2, []byte("value two"))
	chunks := map[string]int64{}
	for _, k := range [][]byte{k1, k2, k3} {
		chunks[string(k)] = entryChunk(t, tb, k)
	}
	if chunks[string(k1)] != homeChunk(tb, k1) || chunks[string(k3)] != homeChunk(tb, k3) {
		t.Fatalf("k1 and k3 not at their first homes (%v): the test lost its point", chunks)
	}
	if c := chunks[string(k2)]; atEitherHome(tb, k2, c) {
		t.Errorf("k2 at chunk %d, one of its homes, which k1 and k3 hold", c)
	}
	for _, k := range [][]byte{k1, k2, k3} {
		if v, found, err := s.get(hashOf(k), k, nil); err != nil || !found || !bytes.HasPrefix(v, []byte("value ")) {
			t.Errorf("%s = %q, %v, %v", k, v, found, err)
		}
	}
	if n := s.Check(func(err error) { t.Error(err) }); n != 3 {
		t.Errorf("Check counted %d entries, want 3", n)
	}
}

// homeChunk is the first chunk of key k's first home run (see
// Segment.allocHome), secondHomeChunk of its second.
func homeChunk(tb *Table, k []byte) int64 {
	return int64(tb.geom.homeByte(uint32(hashOf(k)>>tb.layout.tagShift)) >> tb.geom.chunkShift)
}

func secondHomeChunk(tb *Table, k []byte) int64 {
	return int64(tb.geom.secondHomeByte(uint32(hashOf(k)>>tb.layout.tagShift)) >> tb.geom.chunkShift)
}

// atEitherHome reports whether chunk c starts one of k's home runs.
func atEitherHome(tb *Table, k []byte, c int64) bool {
	return c == homeChunk(tb, k) || c == secondHomeChunk(tb, k)
}

// entryChunk is the first chunk of k's entry in segment 0's first tier.
func entryChunk(t *testing.T, tb *Table, k []byte) int64 {
	t.Helper()
	_, slot, _, found, _ := tb.lookupHome(0, hashOf(k), k)
	if !found {
		t.Fatalf("%s not found", k)
	}
	return slotChunk(slot)
}

// keyWithHome returns an 8-byte key other than except whose home run
// starts at chunk c.
func keyWithHome(t *testing.T, tb *Table, c int64, except []byte) []byte {
	t.Helper()
	return keyWhere(t, fmt.Sprintf("has its home run at chunk %d", c), func(k []byte) bool {
		return homeChunk(tb, k) == c && !bytes.Equal(k, except)
	})
}

// keyWhere returns the first 8-byte key of digits that fits, and fails the
// test (saying what was looked for) if none of 2^20 does.
func keyWhere(t *testing.T, what string, fits func(k []byte) bool) []byte {
	t.Helper()
	for i := range 1 << 20 {
		if k := fmt.Appendf(nil, "%08d", i); fits(k) {
			return k
		}
	}
	t.Fatalf("no key %s", what)
	return nil
}

// sameHome returns an 8-byte key other than k with k's home run.
func sameHome(t *testing.T, tb *Table, k []byte) []byte {
	t.Helper()
	return keyWithHome(t, tb, homeChunk(tb, k), k)
}
