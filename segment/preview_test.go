//go:build linux

package segment

import (
	"bytes"
	"testing"
)

// previewTable is a one-segment table for the preview tests, and a Put
// that fails the test on error.
func previewTable(t *testing.T) (*Table, *Segment, func(k, v []byte)) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	return tb, s, func(k, v []byte) {
		t.Helper()
		if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPutPreviewGoneStale: a Put finds its key before it takes the lock;
// if another writer changes the segment in between, that finding must not
// be used. Here the other writer deletes the key and stores a different
// one, which takes over the deleted entry's chunks: a Put that trusted its
// preview would overwrite the other key's value.
func TestPutPreviewGoneStale(t *testing.T) {
	tb, s, put := previewTable(t)
	k1 := []byte("key-one!")
	// k2 shares k1's home run, where a new entry goes when it is free, so
	// that it takes over k1's chunks.
	k2 := sameHome(t, tb, k1)
	get := func(k []byte) ([]byte, bool) {
		t.Helper()
		v, found, err := s.get(hashOf(k), k, nil)
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

// TestPutPreviewMissedAnInsert: a Put's preview finds no key, then another
// writer inserts that key before the Put takes the lock. Inserts do not
// move the segment's sequence (they change no value readers could have
// seen), so "not found" cannot be trusted the way a found entry is: the Put
// must look again and replace the other writer's entry, not add a second.
func TestPutPreviewMissedAnInsert(t *testing.T) {
	_, s, put := previewTable(t)
	k := []byte("the-key!")
	testAfterPreview = func(*Segment) {
		testAfterPreview = nil
		put(k, []byte("the other writer"))
	}
	defer func() { testAfterPreview = nil }()
	inserted, err := s.put(hashOf(k), k, []byte("this put's value"), Replace)
	if err != nil {
		t.Fatal(err)
	}
	if inserted {
		t.Error("the Put reports an insert over the other writer's entry")
	}
	if n := s.Check(func(err error) { t.Error(err) }); n != 1 || s.Len() != 1 {
		t.Errorf("Check counted %d entries, Len %d; want 1 (one key)", n, s.Len())
	}
	if v, found, err := s.get(hashOf(k), k, nil); err != nil || !found || string(v) != "this put's value" {
		t.Errorf("Get = %q, %v, %v; want this put's value", v, found, err)
	}
}

// TestWritersUsePreview: Put, Delete and Compute start with a preview,
// and a writer coming between (here one that moves the key: deletes it,
// stores another key in its chunks, stores it again elsewhere in a longer
// run) is noticed: the operation acts on the key where it is now and leaves
// the other key alone.
func TestWritersUsePreview(t *testing.T) {
	const moved = "k1 moved elsewhere, in a longer run"
	for _, op := range []string{"put", "compute", "delete"} {
		t.Run(op, func(t *testing.T) {
			tb, s, put := previewTable(t)
			k1 := []byte("key-one!")
			// k2 shares k1's home run, where a new entry goes when it is free, so
			// that it takes over k1's chunks.
			k2 := sameHome(t, tb, k1)
			put(k1, []byte("first value of k1"))
			testAfterPreview = func(*Segment) {
				testAfterPreview = nil
				if _, err := s.Delete(hashOf(k1), k1); err != nil {
					t.Fatal(err)
				}
				put(k2, []byte("value of key two!"))
				put(k1, []byte(moved))
			}
			defer func() { testAfterPreview = nil }()

			want := 1 // entries left: k2
			switch op {
			case "put":
				want = 2
				put(k1, []byte("short value k1"))
				if v, _, _ := s.get(hashOf(k1), k1, nil); string(v) != "short value k1" {
					t.Errorf("after Put, k1 = %q", v)
				}
			case "compute":
				want = 2
				if err := s.compute(hashOf(k1), k1, func(old []byte, found bool) ([]byte, bool) {
					if string(old) != moved {
						t.Errorf("Compute saw %q (found %v), want the moved value", old, found)
					}
					return []byte("computed value k1"), true
				}); err != nil {
					t.Fatal(err)
				}
				if v, _, _ := s.get(hashOf(k1), k1, nil); string(v) != "computed value k1" {
					t.Errorf("after Compute, k1 = %q", v)
				}
			case "delete":
				if existed, err := s.Delete(hashOf(k1), k1); err != nil || !existed {
					t.Fatalf("Delete = %v, %v; want true", existed, err)
				}
				if _, found, _ := s.get(hashOf(k1), k1, nil); found {
					t.Error("k1 still present after its Delete")
				}
			}
			if v, found, _ := s.get(hashOf(k2), k2, nil); !found || string(v) != "value of key two!" {
				t.Errorf("k2 = %q (found %v): the stale preview's %s landed on it", v, found, op)
			}
			if n := s.Check(func(err error) { t.Error(err) }); n != int64(want) {
				t.Errorf("Check counted %d entries, want %d", n, want)
			}
		})
	}
}
