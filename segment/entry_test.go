//go:build linux

package segment

import (
	"fmt"
	"testing"
)

// A placeholder (expiry Hidden) is absent to every reader and seen only by
// GetEntry and UpdateEntry; any write of its key replaces it, a Delete
// removes it, and storing, removing or replacing one through UpdateEntry
// counts as no put, delete or expired entry.
func TestPlaceholderEntries(t *testing.T) {
	tb, clock := newCacheTable(t, 100)
	s := tb.Segment(0)
	k := []byte("key")
	h := hashOf(k)
	store := func(value []byte, expiry int64) {
		t.Helper()
		if err := s.UpdateEntry(h, k, func([]byte, int64, bool) ([]byte, int64, Outcome) { return value, expiry, Store }); err != nil {
			t.Fatal(err)
		}
	}
	store([]byte("token"), Hidden)
	if c := s.Counters(); c.Puts != 0 || s.Len() != 1 {
		t.Fatalf("a placeholder stored: %d puts, Len %d; want 0 and 1", c.Puts, s.Len())
	}
	if v, found, err := s.get(h, k, nil); found || err != nil {
		t.Fatalf("Get sees a placeholder: %q, %v", v, err)
	}
	if has, err := s.Has(h, k); has || err != nil {
		t.Fatalf("Has sees a placeholder: %v", err)
	}
	if _, found, _, _, err := s.GetVersioned(h, k, nil); found || err != nil {
		t.Fatalf("GetVersioned sees a placeholder: %v", err)
	}
	if _, found, err := s.GetChecked(h, k, nil); found || err != nil {
		t.Fatalf("GetChecked sees a placeholder: %v", err)
	}
	if err := s.Entries(func(key, value []byte) bool { t.Fatalf("Range yields %q=%q", key, value); return false }); err != nil {
		t.Fatal(err)
	}
	if n := s.Check(func(err error) { t.Error(err) }); n != 1 {
		t.Fatalf("Check found %d entries, want 1", n)
	}
	if v, exp, found, err := s.GetEntry(h, k, []byte("x")); !found || err != nil || exp != Hidden || string(v) != "xtoken" {
		t.Fatalf("GetEntry = %q, %d, %v, %v", v, exp, found, err)
	}
	err := s.UpdateEntry(h, k, func(v []byte, exp int64, found bool) ([]byte, int64, Outcome) {
		if !found || exp != Hidden || string(v) != "token" {
			t.Errorf("UpdateEntry sees %q, %d, %v", v, exp, found)
		}
		return nil, 0, Leave
	})
	if err != nil {
		t.Fatal(err)
	}

	// Replaced by UpdateEntry with a value: one put, no expired entry.
	store([]byte("value"), clock.read()+100)
	if c := s.Counters(); c.Puts != 1 || c.Expired != 0 {
		t.Fatalf("a placeholder replaced: %+v", c)
	}
	if v, found, _ := s.get(h, k, nil); !found || string(v) != "value" {
		t.Fatalf("Get = %q, %v", v, found)
	}
	// Removed by UpdateEntry: a live value, one delete.
	if err := s.UpdateEntry(h, k, func([]byte, int64, bool) ([]byte, int64, Outcome) { return nil, 0, Remove }); err != nil {
		t.Fatal(err)
	}
	store([]byte("token"), Hidden)
	if err := s.UpdateEntry(h, k, func([]byte, int64, bool) ([]byte, int64, Outcome) { return nil, 0, Remove }); err != nil {
		t.Fatal(err)
	}
	if c := s.Counters(); c.Deletes != 1 || c.Expired != 0 || s.Len() != 0 {
		t.Fatalf("removals: %+v, Len %d", c, s.Len())
	}

	// Other writers treat it as an expired entry.
	for _, write := range []struct {
		name string
		do   func() error
		want bool // the key has a value after
	}{
		{"Put", func() error { _, err := s.PutExpiring(h, k, []byte("put"), 0, Replace); return err }, true},
		{"PutIfAbsent", func() error { _, err := s.PutExpiring(h, k, []byte("put"), 0, IfAbsent); return err }, true},
		{"Compute", func() error {
			return s.compute(h, k, func(_ []byte, found bool) ([]byte, bool) {
				if found {
					t.Error("Compute sees a placeholder")
				}
				return []byte("computed"), true
			})
		}, true},
		{"Delete", func() error { _, err := s.Delete(h, k); return err }, false},
	} {
		store([]byte("token"), Hidden)
		if err := write.do(); err != nil {
			t.Fatalf("%s: %v", write.name, err)
		}
		_, exp, found, err := s.GetEntry(h, k, nil)
		if err != nil || found != write.want || exp == Hidden {
			t.Fatalf("after %s over a placeholder: found %v, expiry %d, %v", write.name, found, exp, err)
		}
		if _, err := s.Delete(h, k); err != nil {
			t.Fatal(err)
		}
	}
}

// The eviction hand reclaims a placeholder as an expired entry.
func TestPlaceholderEvicted(t *testing.T) {
	tb, _ := newCacheTable(t, 64)
	s := tb.Segment(0)
	k := []byte("key")
	if err := s.UpdateEntry(hashOf(k), k, func([]byte, int64, bool) ([]byte, int64, Outcome) { return []byte("token"), Hidden, Store }); err != nil {
		t.Fatal(err)
	}
	for i := 0; s.expiredCount() == 0; i++ {
		if i > 10000 {
			t.Fatal("the hand never reclaimed the placeholder")
		}
		key := []byte(fmt.Sprintf("fill-%d", i))
		if _, err := s.PutExpiring(hashOf(key), key, make([]byte, 16), 0, Replace); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, found, err := s.GetEntry(hashOf(k), k, nil); found || err != nil {
		t.Fatalf("placeholder still there after the hand reclaimed an expired entry: %v", err)
	}
}

// Outside cache maps UpdateEntry and GetEntry are Update and Get with
// expiry 0.
func TestEntryPlainMap(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 100, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	k := []byte("key")
	h := hashOf(k)
	if err := s.UpdateEntry(h, k, func(_ []byte, _ int64, found bool) ([]byte, int64, Outcome) {
		if found {
			t.Error("found in an empty map")
		}
		return []byte("v"), Hidden, Store // the expiry is ignored
	}); err != nil {
		t.Fatal(err)
	}
	if v, found, err := s.get(h, k, nil); !found || err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v, %v", v, found, err)
	}
	if v, exp, found, err := s.GetEntry(h, k, nil); !found || err != nil || exp != 0 || string(v) != "v" {
		t.Fatalf("GetEntry = %q, %d, %v, %v", v, exp, found, err)
	}
}
