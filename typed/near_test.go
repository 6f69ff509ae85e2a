//go:build linux

package typed

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/hashmap"
	"github.com/sharedmap/sharedmap/internal/testutil"
)

// TestHelperProcess is the body of the helper processes of this package's
// cross-process tests; in a normal run it does nothing.
func TestHelperProcess(t *testing.T) {
	if testutil.Role() != "flip-writer" {
		t.Skip("runs only as a helper process")
	}
	m, err := hashmap.Open(os.Getenv("TYPED_MAP"), nil)
	if err != nil {
		testutil.Report("error %v", err)
		return
	}
	defer m.Close()
	w := New(m, String(), Int64())
	n, _ := strconv.Atoi(os.Getenv("TYPED_WRITES"))
	for i := 1; i <= n; i++ {
		if err := w.Put("value", int64(i)); err != nil {
			testutil.Report("error %v", err)
			return
		}
		if err := w.Put("flag", int64(i)); err != nil {
			testutil.Report("error %v", err)
			return
		}
		if i%10 == 0 {
			// Pauses let the reader's cached values live long enough to be
			// served, so that the test exercises hits as well as misses.
			time.Sleep(200 * time.Microsecond)
		}
	}
	testutil.Report("done")
}

// TestNearCacheNeverStale: a writer process sets "value" to i and then
// "flag" to i, for i = 1..n; this process reads both through a near-cache
// as fast as it can. Having seen flag f, it must never get a value below f
// on its next Get: the near-cache serves only values whose segment did not
// change since. The cache must also actually serve values (hits), or the
// test shows nothing.
func TestNearCacheNeverStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "near.map")
	raw, err := hashmap.Open(path, &hashmap.Options{Entries: 1000, Segments: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	r, err := NewCached(raw, String(), Int64(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const writes = 3000
	writer := testutil.Command("flip-writer", "TYPED_MAP="+path, "TYPED_WRITES="+strconv.Itoa(writes))
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Process.Kill(); _ = writer.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	reads := 0
	for {
		flag, err := r.Get("flag")
		if errors.Is(err, hashmap.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := r.Get("value")
		if err != nil {
			t.Fatal(err)
		}
		reads++
		if v < flag {
			t.Fatalf("read %d: flag %d seen, then value %d: a stale value from the near-cache", reads, flag, v)
		}
		if flag == writes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer did not finish (flag %d)", flag)
		}
	}
	hits, misses := r.NearStats()
	if hits == 0 {
		t.Fatalf("the near-cache served nothing (%d misses): the test cannot tell", misses)
	}
	t.Logf("%d reads of flag then value; near-cache hits %d, misses %d", reads, hits, misses)
}

// TestNearCacheSeesOwnAndTTL: a value written through the same or another
// handle, and an entry's expiry, are seen at once.
func TestNearCacheSeesOwnAndTTL(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), "near.map")
	raw, err := hashmap.Open(path, &hashmap.Options{Entries: 100, Cache: true, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c, err := NewCached(raw, String(), String(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put("k", "one"); err != nil {
		t.Fatal(err)
	}
	get := func(want string) {
		t.Helper()
		for range 3 { // the first Get fills the cache, the next ones hit it
			v, err := c.Get("k")
			if want == "" {
				if !errors.Is(err, hashmap.ErrNotFound) {
					t.Fatalf("Get = %q, %v; want ErrNotFound", v, err)
				}
				continue
			}
			if err != nil || v != want {
				t.Fatalf("Get = %q, %v; want %q", v, err, want)
			}
			time.Sleep(time.Millisecond) // ristretto's Set is buffered
		}
	}
	get("one")
	if err := c.Put("k", "two"); err != nil {
		t.Fatal(err)
	}
	get("two")
	if err := raw.PutWithTTL([]byte("k"), []byte("three"), time.Second); err != nil {
		t.Fatal(err)
	}
	get("three")
	now = now.Add(time.Second)
	get("")
	hits, misses := c.NearStats()
	if hits == 0 {
		t.Fatal("the near-cache served nothing")
	}
	// Close keeps the final counts (it used to leave zeros).
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if h, m := c.NearStats(); h != hits || m != misses {
		t.Fatalf("NearStats after Close: %d, %d; before: %d, %d", h, m, hits, misses)
	}
	for _, n := range []int64{0, -1, MaxNearEntries + 1, 1 << 31, 1 << 62} {
		if _, err := NewCached(raw, String(), String(), n); err == nil {
			t.Fatalf("a near-cache of %d entries was accepted", n)
		}
	}
}

// TestTypedTTL: PutWithTTL through the typed layer expires like the raw
// one, and is refused on a map that is not a cache.
func TestTypedTTL(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	raw, err := hashmap.Open(filepath.Join(t.TempDir(), "ttl.map"), &hashmap.Options{Entries: 100, Cache: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	m := New(raw, Int64(), String())
	if err := m.PutWithTTL(1, "one", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get(1); err != nil || v != "one" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	now = now.Add(time.Minute)
	if _, err := m.Get(1); !errors.Is(err, hashmap.ErrNotFound) {
		t.Fatalf("after the TTL: %v", err)
	}
	plain := New(openRaw(t, 10), Int64(), String())
	if err := plain.PutWithTTL(1, "x", time.Minute); !errors.Is(err, hashmap.ErrNotCache) {
		t.Fatalf("PutWithTTL on a plain map: %v", err)
	}
}
