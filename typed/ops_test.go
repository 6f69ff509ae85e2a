//go:build linux

package typed

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
)

// TestTypedTouchAndGetTTL: Touch and GetTTL on typed keys do what the raw
// map's do, and a near-cache does not serve an entry Touch extended with
// its old expiry: once the old expiry passes, Get still finds it.
func TestTypedTouchAndGetTTL(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	raw, err := hashmap.Open(filepath.Join(t.TempDir(), "c"), &hashmap.Options{Entries: 100, Cache: true, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m, err := NewCached(raw, String(), Int64(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.PutWithTTL("a", 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get("a"); err != nil || v != 1 { // now in the near-cache
		t.Fatalf("Get(a) = %d %v", v, err)
	}
	if ok, err := m.Touch("a", time.Minute); !ok || err != nil {
		t.Fatalf("Touch(a) = %v %v", ok, err)
	}
	if d, found, err := m.GetTTL("a"); !found || err != nil || d != time.Minute {
		t.Fatalf("GetTTL(a) = %v %v %v", d, found, err)
	}
	advance(30 * time.Second)
	if v, err := m.Get("a"); err != nil || v != 1 {
		t.Fatalf("Get(a) past its first expiry, within the touched one: %d %v", v, err)
	}
	if ok, err := m.Touch("b", time.Minute); ok || err != nil {
		t.Fatalf("Touch(b), absent = %v %v", ok, err)
	}
	if _, found, err := m.GetTTL("b"); found || err != nil {
		t.Fatalf("GetTTL(b), absent = %v %v", found, err)
	}
}

// TestTypedClearAndDeleteFunc: Clear empties the map for every typed view
// (a near-cache serves none of the old values); DeleteFunc decodes each
// entry for fn, removes what fn chose, and leaves entries that do not
// decode, reporting them with ErrDecode after the rest.
func TestTypedClearAndDeleteFunc(t *testing.T) {
	raw, plain, cached := openStringCounts(t)
	for i := range 100 {
		if err := plain.Put(fmt.Sprint("k", i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Put([]byte("odd"), []byte("not an int64")); err != nil {
		t.Fatal(err)
	}
	if v, err := cached.Get("k3"); err != nil || v != 3 {
		t.Fatalf("Get(k3) = %d %v", v, err)
	}
	n, err := plain.DeleteFunc(func(k string, v int64) bool { return v%2 == 1 })
	if n != 50 || !errors.Is(err, ErrDecode) {
		t.Fatalf("DeleteFunc = %d %v, want 50 and ErrDecode", n, err)
	}
	if _, err := cached.Get("k3"); !errors.Is(err, hashmap.ErrNotFound) {
		t.Fatalf("Get(k3) through the near-cache after DeleteFunc: %v", err)
	}
	if v, err := cached.Get("k4"); err != nil || v != 4 {
		t.Fatalf("Get(k4) = %d %v", v, err)
	}
	if ok, _ := raw.Contains([]byte("odd")); !ok {
		t.Fatal("DeleteFunc removed an entry that does not decode")
	}
	if err := cached.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, err := cached.Get("k4"); !errors.Is(err, hashmap.ErrNotFound) {
		t.Fatalf("Get(k4) through the near-cache after Clear: %v", err)
	}
	if plain.Len() != 0 {
		t.Fatalf("Len %d after Clear", plain.Len())
	}
	if _, err := plain.DeleteFunc(nil); !errors.Is(err, hashmap.ErrBadOptions) {
		t.Fatalf("DeleteFunc(nil): %v", err)
	}
}
