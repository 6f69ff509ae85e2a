//go:build linux

package hashmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/segment"
)

// largeValue is n bytes that differ with seed.
func largeValue(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// checkClean fails t if Check reports anything.
func checkClean(t *testing.T, m *Map) {
	t.Helper()
	probs, err := m.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("Check: %v", p.Err)
	}
}

func TestLargeValueRoundTrip(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 10_000, AverageKeySize: 16, AverageValueSize: 100})
	if !m.layout.LargeValues || m.layout.PartSize() == 0 {
		t.Fatalf("a new store map has no large values (part size %d)", m.layout.PartSize())
	}
	key := []byte("large")
	big := largeValue(1<<20+13, 1)
	if err := m.Put(key, big); err != nil {
		t.Fatal(err)
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("Len = %d after one large Put, want 1", n)
	}
	got, err := m.Get(key)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get = %d bytes, %v; want the %d bytes put", len(got), err, len(big))
	}
	if got, err := m.GetChecked(nil, key); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GetChecked = %d bytes, %v", len(got), err)
	}
	vals := make([][]byte, 2)
	if err := m.GetMany([][]byte{key, []byte("absent")}, vals); err != nil || !bytes.Equal(vals[0], big) || vals[1] != nil {
		t.Fatalf("GetMany = %v", err)
	}
	if got, v, err := m.GetVersioned(nil, key); err != nil || !bytes.Equal(got, big) || !m.Unchanged(v) {
		t.Fatalf("GetVersioned = %d bytes, %v", len(got), err)
	}
	if ok, err := m.Contains(key); !ok || err != nil {
		t.Fatalf("Contains = %v, %v", ok, err)
	}
	checkClean(t, m)

	// Replace by another large value, then by a small one, then large again.
	big2 := largeValue(300_000, 2)
	if err := m.Put(key, big2); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(key); err != nil || !bytes.Equal(got, big2) {
		t.Fatalf("Get after a second large Put: %v", err)
	}
	if err := m.Put(key, []byte("small")); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(key); err != nil || string(got) != "small" {
		t.Fatalf("Get after a small Put = %q, %v", got, err)
	}
	var parts int64
	for i := range int(m.layout.Segments) {
		parts += m.table.Segment(i).Parts()
	}
	if parts != 0 {
		t.Fatalf("%d parts left after the large value was replaced", parts)
	}
	if err := m.Put(key, big); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.PutIfAbsent(key, []byte("x")); ok || err != nil {
		t.Fatalf("PutIfAbsent over a large value = %v, %v", ok, err)
	}
	if ok, err := m.PutIfAbsent([]byte("other"), big2); !ok || err != nil {
		t.Fatalf("PutIfAbsent of a large value = %v, %v", ok, err)
	}
	if err := m.Put([]byte("s"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	seen := map[string][]byte{}
	var rerr error
	for k, v := range m.Range(&rerr) {
		seen[string(k)] = bytes.Clone(v)
	}
	if rerr != nil || len(seen) != 3 || !bytes.Equal(seen["large"], big) || !bytes.Equal(seen["other"], big2) || string(seen["s"]) != "v" {
		t.Fatalf("Range saw %d keys, %v", len(seen), rerr)
	}
	checkClean(t, m)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// Another handle reads the same.
	m2, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got, err := m2.Get(key); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get after reopening: %v", err)
	}
	if ok, err := m2.Delete(key); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if _, err := m2.Get(key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
	if n, err := m2.DeleteFunc(func(k, v []byte) bool { return bytes.Equal(v, big2) }); n != 1 || err != nil {
		t.Fatalf("DeleteFunc = %d, %v", n, err)
	}
	if n := m2.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
	parts = 0
	for i := range int(m2.layout.Segments) {
		parts += m2.table.Segment(i).Parts()
	}
	if parts != 0 {
		t.Fatalf("%d parts left after every large value was deleted", parts)
	}
	probs, err := m2.Check()
	if err != nil || len(probs) != 0 {
		t.Fatalf("Check = %v, %v", probs, err)
	}
}

func TestLargeCompute(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 10_000, AverageKeySize: 16, AverageValueSize: 100})
	key := []byte("k")
	big := largeValue(500_000, 3)
	// A small value computed into a large one, appended to, then shrunk.
	if err := m.Compute(key, func(old []byte, found bool) ([]byte, bool) { return big, true }); err != nil {
		t.Fatal(err)
	}
	if err := m.Compute(key, func(old []byte, found bool) ([]byte, bool) {
		if !found || !bytes.Equal(old, big) {
			panic(fmt.Sprintf("Compute got %d bytes, found %v", len(old), found))
		}
		return append(bytes.Clone(old), 'x'), true
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(key); err != nil || !bytes.Equal(got, append(bytes.Clone(big), 'x')) {
		t.Fatalf("Get after Compute: %v", err)
	}
	if err := m.Update(key, func(old []byte, found bool) ([]byte, bool, error) { return []byte("tiny"), true, nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Get(key); err != nil || string(got) != "tiny" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if err := m.Compute(key, func([]byte, bool) ([]byte, bool) { return big, true }); err != nil {
		t.Fatal(err)
	}
	if err := m.Compute(key, func([]byte, bool) ([]byte, bool) { return nil, false }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after a removing Compute = %v", err)
	}
	checkClean(t, m)
}

func TestLargeLimits(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100})
	if err := m.Put(make([]byte, MaxLargeKeyBytes+1), make([]byte, 1<<20)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large value under a key of 64 KiB + 1 = %v, want ErrTooLarge", err)
	}
	if err := m.Put([]byte("k"), make([]byte, MaxValueBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("value of 1 GiB + 1 = %v, want ErrTooLarge", err)
	}
	if m.Len() != 0 {
		t.Fatal("a refused value was stored")
	}
	c, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100, Cache: true})
	if c.layout.LargeValues {
		t.Fatal("a cache map has large values")
	}
	if err := c.Put([]byte("k"), make([]byte, 1<<20)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("1 MiB into a cache map = %v, want ErrTooLarge", err)
	}
}

// A descriptor never reads as absent on the lock-free paths: they answer
// Unsure, and the slow path reads the value.
func TestLargeFastPathsUnsure(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100})
	for i := range 20 {
		key := fmt.Appendf(nil, "key-%d", i)
		if err := m.Put(key, largeValue(int(m.layout.MaxEntryBytes()), uint64(i))); err != nil {
			t.Fatal(err)
		}
		h := xxhash.Sum64(key)
		if _, answer := m.table.TryGet(h, key, nil); answer != segment.Unsure {
			t.Fatalf("TryGet of a large value's key = %v, want Unsure", answer)
		}
		if _, _, err := m.table.GetConsistent(h, key, nil); !errors.Is(err, segment.ErrLarge) {
			t.Fatalf("GetConsistent of a large value's key = %v, want ErrLarge", err)
		}
	}
}

// Clear removes large values with their parts.
func TestLargeClear(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100})
	for i := range 5 {
		if err := m.Put(fmt.Appendf(nil, "k%d", i), largeValue(int(m.layout.MaxEntryBytes())+i, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Put([]byte("small"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	var parts int64
	for i := range int(m.layout.Segments) {
		parts += m.table.Segment(i).Parts()
	}
	if n := m.Len(); n != 0 || parts != 0 {
		t.Fatalf("after Clear: Len %d, %d parts", n, parts)
	}
	checkClean(t, m)
}

// A large value that lost a part reads as damage, never as another value;
// Check names it and Repair deletes the key with its other parts.
func TestLargeLostPart(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100})
	key := []byte("k")
	if err := m.Put(key, largeValue(3*int(m.layout.MaxEntryBytes()), 9)); err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("other"), largeValue(2*int(m.layout.MaxEntryBytes()), 10)); err != nil {
		t.Fatal(err)
	}
	_, cur, err := m.table.For(xxhash.Sum64(key)).ReadLarge(xxhash.Sum64(key), key, nil)
	if err != nil || !cur.Large {
		t.Fatalf("ReadLarge = %+v, %v", cur, err)
	}
	pk, ph := partKey(nil, &cur.Desc, 1, xxhash.Sum64(key))
	if ok, err := m.table.For(ph).DeletePart(ph, pk); !ok || err != nil {
		t.Fatalf("DeletePart = %v, %v", ok, err)
	}
	if _, err := m.Get(key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a value that lost a part = %v, want ErrCorrupt", err)
	}
	probs, err := m.Check()
	if err != nil || len(probs) != 1 || !errors.Is(probs[0].Err, ErrCorrupt) {
		t.Fatalf("Check = %v, %v; want the damaged value", probs, err)
	}
	rep, err := m.Repair()
	if err != nil || len(rep.BrokenLarge) != 1 {
		t.Fatalf("Repair = %+v, %v", rep, err)
	}
	if _, err := m.Get(key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Repair = %v", err)
	}
	if _, err := m.Get([]byte("other")); err != nil {
		t.Fatalf("the other large value: %v", err)
	}
	checkClean(t, m)
}

// GetOrLoad of a store map stores a loaded value too large for a tier as a
// large value, and a large value Put under the key while the load ran is
// the later write, which stays.
func TestGetOrLoadStoresLargeValues(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 10_000, AverageKeySize: 16, AverageValueSize: 100})
	big := largeValue(1<<20+5, 7)
	got, err := m.GetOrLoad(context.Background(), []byte("loaded"), func(context.Context) ([]byte, error) { return big, nil })
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GetOrLoad = %d bytes, %v", len(got), err)
	}
	if v, err := m.Get([]byte("loaded")); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get after GetOrLoad = %d bytes, %v; want the %d bytes loaded", len(v), err, len(big))
	}
	later := largeValue(1<<20+9, 8)
	for _, loaded := range [][]byte{[]byte("small"), largeValue(1<<20, 9)} {
		key := []byte(fmt.Sprintf("raced-%d", len(loaded)))
		_, err := m.GetOrLoad(context.Background(), key, func(context.Context) ([]byte, error) {
			return loaded, m.Put(key, later) // written while the load runs
		})
		if err != nil {
			t.Fatalf("GetOrLoad with a large Put during the load: %v", err)
		}
		if v, err := m.Get(key); err != nil || !bytes.Equal(v, later) {
			t.Fatalf("Get = %d bytes, %v; want the large value written during the load", len(v), err)
		}
	}
	checkClean(t, m)
}
