package segment

import (
	"bytes"
	"testing"
)

// TestPutPreviewGoneStale: a Put finds its key before it takes the lock;
// if another writer changes the segment in between, that finding must not
// be used. Here the other writer deletes the key and stores a different
// one, which takes over the deleted entry's chunks: a Put that trusted its
// preview would overwrite the other key's value.
func TestPutPreviewGoneStale(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	k1, k2 := []byte("key-one!"), []byte("key-two!")
	put := func(k, v []byte) {
		t.Helper()
		if _, err := s.Put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k []byte) ([]byte, bool) {
		t.Helper()
		v, found, err := s.Get(hashOf(k), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v, found
	}
	put(k1, []byte("first value of k1"))
	chunkOf := func(k []byte) int64 {
		tv := tb.tier(0)
		pos, slot, _, found, _ := tb.lookupHome(0, hashOf(k), k)
		if !found || tv.slots[pos] != slot {
			t.Fatalf("%s not in the home tier", k)
		}
		return slotChunk(slot)
	}
	c1 := chunkOf(k1)

	testAfterPreview = func(*Segment) {
		testAfterPreview = nil
		if _, err := s.Delete(hashOf(k1), k1); err != nil {
			t.Fatal(err)
		}
		put(k2, []byte("value of key two!"))
		if chunkOf(k2) != c1 {
			t.Fatalf("k2 at chunk %d, not in k1's old chunk %d: the test lost its point", chunkOf(k2), c1)
		}
	}
	defer func() { testAfterPreview = nil }()
	put(k1, []byte("second value k1!!"))

	if v, found := get(k2); !found || !bytes.Equal(v, []byte("value of key two!")) {
		t.Errorf("k2 = %q (found %v): the stale preview's write landed on it", v, found)
	}
	if v, found := get(k1); !found || !bytes.Equal(v, []byte("second value k1!!")) {
		t.Errorf("k1 = %q (found %v), want the second value", v, found)
	}
	if n := s.Check(func(err error) { t.Error(err) }); n != 2 {
		t.Errorf("Check counted %d entries, want 2", n)
	}
}
