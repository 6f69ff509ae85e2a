//go:build linux

package hashmap

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestTouchAndGetTTL: Touch slides a live entry's expiry, for this handle
// and another on the same file; it reports false and brings nothing back
// for an expired, deleted or absent key; GetTTL tells no expiry
// (NoExpiry), time left and absent apart; bad TTLs and plain maps are
// refused as PutWithTTL refuses them.
func TestTouchAndGetTTL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	clock := &testClock{t: time.Unix(1_700_000_000, 0)}
	m := mustOpen(t, path, &Options{Entries: 1000, Cache: true, DefaultTTL: time.Minute, Now: clock.Now})
	defer m.Close()
	other := mustOpen(t, path, &Options{Now: clock.Now})
	defer other.Close()
	if err := m.PutWithTTL([]byte("a"), []byte("va"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.PutWithTTL([]byte("forever"), []byte("vf"), NoExpiry); err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("gone"), []byte("vg")); err != nil {
		t.Fatal(err)
	}
	ttl := func(mm *Map, k string) (time.Duration, bool) {
		t.Helper()
		d, found, err := mm.GetTTL([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return d, found
	}
	if d, found := ttl(other, "a"); !found || d != 10*time.Second {
		t.Fatalf("GetTTL(a) = %v %v", d, found)
	}
	if d, found := ttl(other, "forever"); !found || d != NoExpiry {
		t.Fatalf("GetTTL(forever) = %v %v", d, found)
	}
	if d, found := ttl(other, "absent"); found || d != 0 {
		t.Fatalf("GetTTL(absent) = %v %v", d, found)
	}
	clock.Advance(8 * time.Second)
	if ok, err := other.Touch([]byte("a"), 30*time.Second); !ok || err != nil {
		t.Fatalf("Touch(a) = %v %v", ok, err)
	}
	clock.Advance(20 * time.Second) // past a's first expiry, within the touched one
	if v, err := m.Get([]byte("a")); err != nil || string(v) != "va" {
		t.Fatalf("a after Touch: %q %v", v, err)
	}
	if d, found := ttl(m, "a"); !found || d != 10*time.Second {
		t.Fatalf("GetTTL(a) after Touch = %v %v", d, found)
	}
	clock.Advance(2 * time.Minute) // "gone" (DefaultTTL) and "a" expire
	if ok, err := m.Touch([]byte("gone"), time.Hour); ok || err != nil {
		t.Fatalf("Touch of an expired key = %v %v", ok, err)
	}
	if _, err := other.Get([]byte("gone")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an expired key came back after Touch: %v", err)
	}
	if d, found := ttl(m, "gone"); found {
		t.Fatalf("GetTTL of an expired key = %v %v", d, found)
	}
	if ok, err := m.Touch([]byte("forever"), time.Second); !ok || err != nil {
		t.Fatalf("Touch(forever) = %v %v", ok, err)
	}
	if d, found := ttl(other, "forever"); !found || d != time.Second {
		t.Fatalf("GetTTL(forever) after Touch = %v %v", d, found)
	}
	if ok, err := m.Touch([]byte("forever"), NoExpiry); !ok || err != nil {
		t.Fatalf("Touch(forever, NoExpiry) = %v %v", ok, err)
	}
	clock.Advance(time.Hour)
	if d, found := ttl(other, "forever"); !found || d != NoExpiry {
		t.Fatalf("GetTTL(forever) after Touch to NoExpiry = %v %v", d, found)
	}
	if _, err := m.Delete([]byte("forever")); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Touch([]byte("forever"), time.Hour); ok || err != nil {
		t.Fatalf("Touch of a deleted key = %v %v", ok, err)
	}
	for _, bad := range []time.Duration{0, -time.Second} {
		if _, err := m.Touch([]byte("a"), bad); !errors.Is(err, ErrBadOptions) {
			t.Fatalf("Touch with TTL %v: %v", bad, err)
		}
	}
	plain := mustOpen(t, filepath.Join(t.TempDir(), "plain"), &Options{Entries: 100})
	defer plain.Close()
	if err := plain.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Touch([]byte("k"), time.Second); !errors.Is(err, ErrNotCache) {
		t.Fatalf("Touch on a plain map: %v", err)
	}
	if d, found := ttl(plain, "k"); !found || d != NoExpiry {
		t.Fatalf("GetTTL on a plain map = %v %v", d, found)
	}
	m.Close()
	if _, err := m.Touch([]byte("a"), time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Touch after Close: %v", err)
	}
	if _, _, err := m.GetTTL([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetTTL after Close: %v", err)
	}
}
