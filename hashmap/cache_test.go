package hashmap

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// testClock is a clock tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestCacheTTL: entries expire at their TTL, for this handle and for
// another opened on the same file; DefaultTTL applies to Put, PutIfAbsent
// and Compute; bad TTLs and TTLs on plain maps are refused.
func TestCacheTTL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	clock := &testClock{t: time.Unix(1_700_000_000, 0)}
	m, err := Open(path, &Options{Entries: 1000, Cache: true, DefaultTTL: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	other, err := Open(path, &Options{Now: clock.Now}) // another handle, as another process would
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !m.Stats().Cache || !other.Stats().Cache {
		t.Fatal("the map does not say it is a cache")
	}
	if err := m.PutWithTTL([]byte("short"), []byte("s"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("default"), []byte("d")); err != nil {
		t.Fatal(err)
	}
	if err := m.Compute([]byte("computed"), func([]byte, bool) ([]byte, bool) { return []byte("c"), true }); err != nil {
		t.Fatal(err)
	}
	expect := func(when string, want map[string]bool) {
		t.Helper()
		for _, h := range []*Map{m, other} {
			for k, present := range want {
				v, err := h.Get([]byte(k))
				switch {
				case present && err != nil:
					t.Fatalf("%s: %s missing: %v", when, k, err)
				case !present && !errors.Is(err, ErrNotFound):
					t.Fatalf("%s: %s = %q, %v; want ErrNotFound", when, k, v, err)
				}
			}
		}
	}
	expect("at once", map[string]bool{"short": true, "default": true, "computed": true})
	clock.Advance(time.Second)
	expect("after 1s", map[string]bool{"short": false, "default": true, "computed": true})
	if ok, err := m.PutIfAbsent([]byte("short"), []byte("again")); err != nil || !ok {
		t.Fatalf("PutIfAbsent over an expired entry: %v %v", ok, err)
	}
	clock.Advance(time.Minute)
	expect("after a minute more", map[string]bool{"short": false, "default": false, "computed": false})
	n := 0
	var rerr error
	for range m.Range(&rerr) {
		n++
	}
	if rerr != nil || n != 0 {
		t.Fatalf("Range after expiry: %d entries, %v", n, rerr)
	}

	if err := m.PutWithTTL([]byte("k"), nil, 0); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("zero TTL: %v", err)
	}
	plain, err := Open(filepath.Join(t.TempDir(), "plain"), &Options{Entries: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.PutWithTTL([]byte("k"), nil, time.Second); !errors.Is(err, ErrNotCache) {
		t.Fatalf("PutWithTTL on a plain map: %v", err)
	}
	if _, err := Open(plain.Path(), &Options{DefaultTTL: time.Second}); !errors.Is(err, ErrNotCache) {
		t.Fatalf("DefaultTTL on a plain map: %v", err)
	}
	if _, err := Open(plain.Path(), &Options{Cache: true}); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Cache on a plain map's file: %v", err)
	}
}

// TestCacheNeverFull: a cache map written far past its size evicts instead
// of failing, counts what it evicted, keeps the latest writes, and checks
// clean; the same writes to a plain map end in ErrFull.
func TestCacheNeverFull(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 1.5, Segments: 4}
	plain, err := Open(filepath.Join(dir, "plain"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	copts := *opts
	copts.Cache = true
	cache, err := Open(filepath.Join(dir, "cache"), &copts)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	const puts = 50_000
	var plainErr error
	for i := range puts {
		k, v := fmt.Appendf(nil, "k%d", i), make([]byte, 32)
		if plainErr == nil {
			plainErr = plain.Put(k, v)
		}
		if err := cache.Put(k, v); err != nil {
			t.Fatalf("cache put %d: %v", i, err)
		}
	}
	if !errors.Is(plainErr, ErrFull) {
		t.Fatalf("the plain map took %d entries sized for 2000: %v", puts, plainErr)
	}
	st := cache.Stats()
	if st.Evictions == 0 || int64(st.Entries)+st.Evictions != puts {
		t.Fatalf("entries %d + evictions %d != %d puts", st.Entries, st.Evictions, puts)
	}
	for i := puts - 100; i < puts; i++ {
		if _, err := cache.Get(fmt.Appendf(nil, "k%d", i)); err != nil {
			t.Fatalf("recent key k%d: %v", i, err)
		}
	}
	if problems, err := cache.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
	t.Logf("%d puts into a cache sized for %d: %d entries, %d evicted", puts, opts.Entries, st.Entries, st.Evictions)
}
