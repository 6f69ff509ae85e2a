//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sharedmap/sharedmap/internal/testutil"
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

// openClockedCache opens a fresh cache map of entries with defaultTTL,
// timed by a test clock it returns; the map is closed when the test ends.
func openClockedCache(t *testing.T, entries int, defaultTTL time.Duration) (*Map, *testClock) {
	t.Helper()
	clock := &testClock{t: time.Unix(1_700_000_000, 0)}
	m, err := Open(filepath.Join(t.TempDir(), "cache"), &Options{Entries: entries, Cache: true, DefaultTTL: defaultTTL, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, clock
}

// TestCacheTTL: entries expire at their TTL, for this handle and for
// another opened on the same file; DefaultTTL applies to Put, PutIfAbsent
// and the entries Compute creates; bad TTLs and TTLs on plain maps are refused.
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
	opts := &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 1.5, Segments: 4, MaxSize: NoGrowth}
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

// TestStatsAcrossProcesses: hits, misses and puts counted by other
// processes are readable here while they run, stay counted after one closes
// the map and after one is killed, and read-only handles count nothing.
func TestStatsAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, helperOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Put([]byte("present"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	dones := func() int {
		n := 0
		var rerr error
		for k := range ro.Range(&rerr) {
			if len(k) > 5 && string(k[:5]) == "done-" {
				n++
			}
		}
		return n
	}
	staying := helperCmd("lookups", path, "1000", "300", "1")
	if err := staying.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = staying.Process.Kill(); _ = staying.Wait() }()
	leaving := helperCmd("lookups", path, "500", "200", "0")
	if out, err := leaving.Output(); err != nil || !bytes.Contains(out, []byte("@ done")) {
		t.Fatalf("leaving helper: %v %s", err, out)
	}
	if !testutil.WaitFor(10*time.Second, func() bool { return dones() == 2 }) {
		t.Fatal("the staying helper never finished its lookups")
	}
	want := func(when string) {
		t.Helper()
		for _, h := range []*Map{m, ro} {
			st := h.Stats()
			if !st.Counters || st.Hits != 1500 || st.Misses != 500 || st.Puts != 3 {
				t.Fatalf("%s: hits %d, misses %d, puts %d; want 1500, 500, 3", when, st.Hits, st.Misses, st.Puts)
			}
		}
	}
	want("one helper running, one closed")
	if _, err := ro.Get([]byte("present")); err != nil {
		t.Fatal(err)
	}
	want("after a read-only Get")
	_ = staying.Process.Kill()
	_ = staying.Wait()
	want("after the running one was killed")
	per := m.Segments()
	var hits int64
	for _, s := range per {
		hits += s.Hits
	}
	if hits != 1500 {
		t.Fatalf("per-segment hits sum to %d", hits)
	}
}

// TestVersions: a version stays current until a write changes or removes a
// value of its segment (from another handle too), or its entry expires;
// inserting another key does not end it.
func TestVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	clock := &testClock{t: time.Unix(1_700_000_000, 0)}
	m, err := Open(path, &Options{Entries: 100, Segments: 1, Cache: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	other, err := Open(path, &Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_ = m.Put([]byte("a"), []byte("1"))
	v, ver, err := m.GetVersioned(nil, []byte("a"))
	if err != nil || string(v) != "1" || !m.Unchanged(ver) {
		t.Fatalf("GetVersioned: %q %v %v", v, m.Unchanged(ver), err)
	}
	_ = other.Put([]byte("b"), []byte("2")) // an insert: no value changed
	if !m.Unchanged(ver) {
		t.Fatal("an insert of another key ended the version")
	}
	_ = other.Put([]byte("a"), []byte("3"))
	if m.Unchanged(ver) {
		t.Fatal("a write of the key by another handle did not end the version")
	}
	_, ver, _ = m.GetVersioned(nil, []byte("a"))
	if _, err := other.Delete([]byte("b")); err != nil || m.Unchanged(ver) {
		t.Fatalf("a delete in the segment did not end the version (%v)", err)
	}
	_ = m.PutWithTTL([]byte("t"), []byte("x"), time.Second)
	_, ver, _ = m.GetVersioned(nil, []byte("t"))
	if !m.Unchanged(ver) {
		t.Fatal("fresh version not current")
	}
	clock.Advance(time.Second)
	if m.Unchanged(ver) {
		t.Fatal("an expired entry's version is current")
	}
	if m.Unchanged(Version{}) {
		t.Fatal("the zero Version is current")
	}
	if _, _, err := m.GetVersioned(nil, []byte("nope")); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
}

// TestUpdate: Update stores, removes, and with an error leaves the entry
// exactly as it was (no write: the segment's sequence does not move), and
// allocates nothing when it stores.
func TestUpdate(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 100, Segments: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	k := []byte("k")
	if err := m.Update(k, func(old []byte, found bool) ([]byte, bool, error) {
		if found {
			t.Error("found an absent key")
		}
		return []byte("one"), true, nil
	}); err != nil {
		t.Fatal(err)
	}
	seq := m.table.Segment(0).Seq()
	boom := errors.New("boom")
	if err := m.Update(k, func(old []byte, found bool) ([]byte, bool, error) {
		return []byte("two"), true, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	if v, _ := m.Get(k); string(v) != "one" || m.table.Segment(0).Seq() != seq {
		t.Fatalf("after an aborted Update: %q, sequence %d -> %d", v, seq, m.table.Segment(0).Seq())
	}
	if err := m.Update(k, func(old []byte, found bool) ([]byte, bool, error) {
		return append(old, '!'), true, nil // a slice of old: allowed
	}); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Get(k); string(v) != "one!" {
		t.Fatalf("after appending to old: %q", v)
	}
	allocs := testing.AllocsPerRun(100, func() {
		_ = m.Update(k, func(old []byte, found bool) ([]byte, bool, error) { return old, true, nil })
	})
	if allocs != 0 {
		t.Fatalf("Update allocated %v times per call", allocs)
	}
	if err := m.Update(k, func([]byte, bool) ([]byte, bool, error) { return nil, false, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after removal: %v", err)
	}
}

// TestRangeView: RangeView yields what Range does, and a whole iteration
// allocates next to nothing once its buffer is pooled.
func TestRangeView(t *testing.T) {
	// Many segments: an allocation per segment shows.
	m, err := Open(filepath.Join(t.TempDir(), "m"), &Options{Entries: 2000, Segments: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := map[string]string{}
	for i := range 1000 {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("value-%d", i*7)
		want[k] = v
		if err := m.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	var rerr error
	n := 0
	for k, v := range m.RangeView(&rerr) {
		if want[string(k)] != string(v) {
			t.Fatalf("RangeView yielded %q=%q", k, v)
		}
		n++
	}
	if rerr != nil || n != len(want) {
		t.Fatalf("RangeView: %d entries, %v", n, rerr)
	}
	allocs := pooledAllocs(20, func() {
		for range m.RangeView(&rerr) {
		}
	})
	t.Logf("%v allocations per iteration of %d entries", allocs, n)
	if allocs > 4 {
		t.Fatalf("a RangeView of %d entries allocated %v times", n, allocs)
	}
}

// pooledAllocs is testing.AllocsPerRun for f that takes a buffer from a
// sync.Pool and puts it back. Under the race detector, which drops a
// quarter of what is put back, it is the fewest allocations of runs single
// runs instead of their mean: one that found its buffer pooled counts
// what f itself allocates, while the mean counts the pool's drops, a
// buffer grown anew each, at random. An allocation f makes on every run
// shows either way.
func pooledAllocs(runs int, f func()) float64 {
	if !raceEnabled {
		return testing.AllocsPerRun(runs, f)
	}
	fewest := testing.AllocsPerRun(1, f)
	for range runs - 1 {
		fewest = min(fewest, testing.AllocsPerRun(1, f))
	}
	return fewest
}

// TestCacheAcrossProcesses: 3 processes write 4.5 times a cache map's
// size at once. None gets ErrFull; every put, eviction and entry is
// accounted for exactly (puts = entries + evictions, counted by each
// process in the file); every entry left holds its key's value; Check is
// clean.
func TestCacheAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := *helperOpts
	opts.Cache, opts.MaxBloatFactor = true, 1
	m, err := Open(path, &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const procs, per = 3, 30_000
	var cmds []*exec.Cmd
	for p := range procs {
		cmds = append(cmds, helperCmd("putrange", path, strconv.Itoa(p*per), strconv.Itoa(per)))
	}
	errorsIn(t, testutil.Run(t, cmds...))
	st := m.Stats()
	if st.Puts != procs*per || int64(st.Entries)+st.Evictions != procs*per || st.Evictions == 0 {
		t.Fatalf("puts %d, entries %d, evictions %d; want %d puts = entries + evictions", st.Puts, st.Entries, st.Evictions, procs*per)
	}
	// Which keys survive depends on how the processes interleaved; what
	// survives must be right.
	var rerr error
	n := 0
	for k, v := range m.Range(&rerr) {
		i, err := strconv.Atoi(strings.TrimPrefix(string(k), "key-"))
		if err != nil || string(v) != strings.Repeat(string(k), 1+i%5) {
			t.Fatalf("entry %q = %q", k, v)
		}
		n++
	}
	if rerr != nil || n != st.Entries {
		t.Fatalf("Range: %d entries (Stats says %d), %v", n, st.Entries, rerr)
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
	t.Logf("%d puts from %d processes into a cache sized for %d: %d entries, %d evicted", st.Puts, procs, opts.Entries, st.Entries, st.Evictions)
}

// TestGetManyInACache: GetMany in a cache map returns live entries and
// nil for expired ones, as Get does.
func TestGetManyInACache(t *testing.T) {
	m, clock := openClockedCache(t, 1000, time.Minute)
	keys := [][]byte{[]byte("short"), []byte("long"), []byte("absent")}
	if err := m.PutWithTTL(keys[0], []byte("s"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Put(keys[1], []byte("l")); err != nil {
		t.Fatal(err)
	}
	values := make([][]byte, len(keys))
	if err := m.GetMany(keys, values); err != nil || string(values[0]) != "s" || string(values[1]) != "l" || values[2] != nil {
		t.Fatalf("GetMany = %q, %v", values, err)
	}
	clock.Advance(2 * time.Second)
	if err := m.GetMany(keys, values); err != nil || values[0] != nil || string(values[1]) != "l" || values[2] != nil {
		t.Fatalf("GetMany after the short TTL = %q, %v", values, err)
	}
}

// TestCachePutThatGrowsNeverFull: in a full cache map (its segment alone
// in its first tier, the overflow pool taken), a key whose value grows
// past its run must move, and room for the new copy was sought beside the
// old one, which eviction keeps: the search evicted everything else in the
// segment and then failed with ErrFull, which a cache's Put never returns
// (61 entries went down to 1). The old copy now goes
// first when no free run is at hand.
func TestCachePutThatGrowsNeverFull(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "c"), &Options{Entries: 128, AverageKeySize: 8, AverageValueSize: 64, MaxBloatFactor: 1, Segments: 2, Cache: true})
	defer m.Close()
	i := 0
	keyIn := func(seg uint64, prefix string) []byte {
		for ; ; i++ {
			if k := fmt.Appendf(nil, "%s%d", prefix, i); xxhash.Sum64(k)&m.segMask == seg {
				i++
				return k
			}
		}
	}
	for m.table.ExtraTiersInUse() < m.layout.Tiers-m.layout.Segments { // segment 1 takes the pool
		if err := m.Put(keyIn(1, "o"), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
	}
	maxEntry := int(m.layout.MaxEntryBytes())
	big := keyIn(0, "big")
	if err := m.Put(big, bytes.Repeat([]byte{1}, maxEntry*45/100)); err != nil {
		t.Fatal(err)
	}
	for range 60 {
		if err := m.Put(keyIn(0, "s"), make([]byte, 32)); err != nil {
			t.Fatal(err)
		}
	}
	before := m.Segments()[0]
	grown := bytes.Repeat([]byte{2}, maxEntry*70/100)
	if err := m.Put(big, grown); err != nil {
		after := m.Segments()[0]
		t.Fatalf("Put in a cache map: %v; segment 0 went from %d entries to %d", err, before.Entries, after.Entries)
	}
	if v, err := m.Get(big); err != nil || !bytes.Equal(v, grown) {
		t.Fatalf("the grown value: %d bytes, %v", len(v), err)
	}
	if after := m.Segments()[0]; after.Entries < before.Entries/2 {
		t.Errorf("segment 0 went from %d entries to %d for one grown value", before.Entries, after.Entries)
	}
	if p, err := m.Check(); err != nil || len(p) != 0 {
		t.Errorf("Check: %v, %v", p, err)
	}
}

// TestComputeKeepsExpiry: Compute and Update change a live entry's value
// and keep its expiry, as a counter in a fixed window needs (they used to
// store it with the DefaultTTL of the calling process, so that a 0 made a
// one-minute counter permanent); an entry they create lives DefaultTTL.
func TestComputeKeepsExpiry(t *testing.T) {
	for _, defaultTTL := range []time.Duration{0, time.Hour} {
		m, clock := openClockedCache(t, 100, defaultTTL)
		incr := func(old []byte, found bool) ([]byte, bool) { return append(old, 'x'), true }
		for _, k := range []string{"computed", "updated"} {
			if err := m.PutWithTTL([]byte(k), nil, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			clock.Advance(10 * time.Second)
			if err := m.Compute([]byte("computed"), incr); err != nil {
				t.Fatal(err)
			}
			if err := m.Update([]byte("updated"), func(old []byte, found bool) ([]byte, bool, error) {
				v, keep := incr(old, found)
				return v, keep, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Compute([]byte("created"), incr); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"computed", "updated"} {
			if v, err := m.Get([]byte(k)); err != nil || string(v) != "xxx" {
				t.Fatalf("DefaultTTL %v: %s after 30 s: %q, %v", defaultTTL, k, v, err)
			}
		}
		clock.Advance(31 * time.Second) // 61 s after the PutWithTTL of 1 minute
		for _, k := range []string{"computed", "updated"} {
			if v, err := m.Get([]byte(k)); !errors.Is(err, ErrNotFound) {
				t.Errorf("DefaultTTL %v: %s outlived its minute: %q, %v", defaultTTL, k, v, err)
			}
		}
		clock.Advance(2 * time.Hour)
		_, err := m.Get([]byte("created"))
		if gone := errors.Is(err, ErrNotFound); gone != (defaultTTL != 0) {
			t.Errorf("DefaultTTL %v: the entry Compute created, 2 h later: %v", defaultTTL, err)
		}
	}
}

// A negative option's error names it: it used to print every field of
// Options and leave the reader to find the one at fault.
func TestNegativeOptionNamed(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "c"), &Options{Cache: true, DefaultTTL: -time.Second})
	if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "DefaultTTL must not be negative") || strings.Contains(err.Error(), "Entries") {
		t.Fatalf("Open with DefaultTTL -1s: %v", err)
	}
}

// TestContainsProtectsFromEviction: a key that Contains keeps looking at
// survives a full cache's evictions, as one that Get reads does (Contains
// did not mark the entry, and the key went within some 1,400 puts).
func TestContainsProtectsFromEviction(t *testing.T) {
	m, err := Open(filepath.Join(t.TempDir(), "c"), &Options{Entries: 512, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 1, Segments: 1, Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Put([]byte("hot"), []byte("H")); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		if ok, err := m.Contains([]byte("hot")); err != nil || !ok {
			t.Fatalf("after %d puts (%d evictions): Contains(hot) = %v, %v", i, m.Stats().Evictions, ok, err)
		}
		if err := m.Put(fmt.Appendf(nil, "k%d", i), make([]byte, 32)); err != nil {
			t.Fatal(err)
		}
	}
	if m.Stats().Evictions == 0 {
		t.Fatal("no evictions: the test did not test eviction")
	}
}

// TestNoExpiry: PutWithTTL with NoExpiry stores an entry that outlives
// any DefaultTTL, and a TTL of 0 is refused with a message that names it.
func TestNoExpiry(t *testing.T) {
	m, clock := openClockedCache(t, 100, time.Minute)
	if err := m.PutWithTTL([]byte("k"), []byte("v"), 0); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "NoExpiry") {
		t.Fatalf("PutWithTTL 0: %v", err)
	}
	if err := m.PutWithTTL([]byte("k"), []byte("v"), NoExpiry); err != nil {
		t.Fatal(err)
	}
	clock.Advance(100 * 365 * 24 * time.Hour)
	if v, err := m.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("a NoExpiry entry 100 years on: %q, %v", v, err)
	}
}
