package hashmap

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Every method of a closed map answers (ErrClosed, or a zero value where
// the method has no error) instead of touching the unmapped file; so does
// a Range whose body closes the map.
func TestClosedMapAnswers(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Segments: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := m.Put([]byte{byte(i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var rerr error
	seen := 0
	for range m.Range(&rerr) {
		if seen++; seen == 1 {
			m.Close()
		}
	}
	if !errors.Is(rerr, ErrClosed) || seen > 100 {
		t.Fatalf("Range closed by its body: %d entries, error %v", seen, rerr)
	}
	if n := m.Len(); n != 0 {
		t.Errorf("Len after Close = %d", n)
	}
	if st := m.Stats(); st != (Stats{}) {
		t.Errorf("Stats after Close = %+v", st)
	}
	if s := m.Segments(); s != nil {
		t.Errorf("Segments after Close = %v", s)
	}
	_ = m.Expvar()()
	if err := m.WritePrometheus(new(nopWriter), "m"); err != nil {
		t.Errorf("WritePrometheus after Close: %v", err)
	}
	if _, err := m.Get([]byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// A TTL too long for the clock's range used to wrap to an expiry in the
// past: Put succeeded and the entry was gone at once.
func TestHugeTTLDoesNotExpire(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, Cache: true, DefaultTTL: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.PutWithTTL([]byte("a"), []byte("1"), 2_500_000*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := m.Get([]byte(k)); err != nil {
			t.Errorf("Get(%q) after a Put with a huge TTL: %v", k, err)
		}
	}
}

// DefaultTTL without Cache is refused before a new file is made, so the
// corrected Open (with Cache) can create the map.
func TestDefaultTTLWithoutCacheLeavesNoFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m")
	if _, err := Open(p, &Options{DefaultTTL: time.Hour}); !errors.Is(err, ErrNotCache) {
		t.Fatalf("Open with DefaultTTL and no Cache: %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Open left a file: %v", err)
	}
	m, err := Open(p, &Options{DefaultTTL: time.Hour, Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}
