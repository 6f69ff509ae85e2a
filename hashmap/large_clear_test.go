//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"github.com/sharedmap/sharedmap/segment"
)

// clearRaceValues are the values the writers of a large Put racing a
// Clear store under key k: large, of several parts, each told apart.
func clearRaceValues(m *Map, k int) [][]byte {
	n := 3 * int(m.layout.MaxEntryBytes())
	return [][]byte{largeValue(n, uint64(2*k)), largeValue(n+7, uint64(2*k+1))}
}

// largeClearKey is the key k of the tests of large Puts racing Clear.
func largeClearKey(k int) []byte { return fmt.Appendf(nil, "large-%d", k) }

// raceLargePutsWithClear has writers (goroutines) Put large values to
// keys while a Clear runs again and again and a reader Gets them, until
// clears Clears are done or more is false; a Get that answers anything but
// absent or a value put fails t. Then each key must read absent or whole,
// and Check find nothing.
func raceLargePutsWithClear(t *testing.T, m *Map, keys, writers, clears int, more func() bool) {
	values := make([][][]byte, keys)
	for k := range keys {
		values[k] = clearRaceValues(m, k)
	}
	key := largeClearKey
	get := func(k int) error {
		v, err := m.Get(key(k))
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("Get %s: %w", key(k), err)
		case !bytes.Equal(v, values[k][0]) && !bytes.Equal(v, values[k][1]):
			return fmt.Errorf("Get %s = %d bytes, not a value put", key(k), len(v))
		}
		return nil
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	run := func(fn func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if err := fn(i); err != nil {
					t.Error(err)
					stop.Store(true)
				}
			}
		}()
	}
	for w := range writers {
		run(func(i int) error { return m.Put(key((i+w)%keys), values[(i+w)%keys][i%2]) })
	}
	run(func(i int) error { return get(i % keys) })
	for c := 0; c < clears && more() && !stop.Load(); c++ {
		if err := m.Clear(); err != nil {
			t.Error(err)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	for k := range keys {
		if err := get(k); err != nil {
			t.Error(err)
		}
	}
	checkClean(t, m)
}

// A large Put racing Clear leaves its key absent or whole, never with
// parts missing: a Clear takes the parts of the values it removes, and no
// other.
func TestLargePutRacingClear(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100, Segments: 8})
	clears := 2000
	if testing.Short() {
		clears = 300
	}
	raceLargePutsWithClear(t, m, 8, 2, clears, func() bool { return true })
}

func init() {
	// keys, ms: Put large values to the keys of the tests of large Puts
	// racing Clear for ms, then report "done" and the count of Puts.
	opsRoles["large-puts"] = func(m *Map, args []string) error {
		keys := argInt(args, 0)
		values := make([][][]byte, keys)
		for k := range keys {
			values[k] = clearRaceValues(m, k)
		}
		n := 0
		for stop := time.Now().Add(time.Duration(argInt(args, 1)) * time.Millisecond); time.Now().Before(stop); n++ {
			if err := m.Put(largeClearKey(n%keys), values[n%keys][n/keys%2]); err != nil {
				return err
			}
		}
		testutil.Report("done %d", n)
		return nil
	}
}

// A large Put in one process racing Clear in another leaves its key
// absent or whole, for readers in either.
func TestLargePutRacingClearAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100, Segments: 8})
	defer m.Close()
	const keys = 8
	ms := 3000
	if testing.Short() {
		ms = 500
	}
	writer := startHelper(t, helperCmd("large-puts", path, strconv.Itoa(keys), strconv.Itoa(ms)))
	var report []string
	raceLargePutsWithClear(t, m, keys, 0, math.MaxInt, func() bool {
		select {
		case report = <-writer.lines:
			return false
		default:
			return true
		}
	})
	if report == nil {
		report = <-writer.lines
	}
	if len(report) != 2 || report[0] != "done" {
		t.Fatalf("writer: %v", report)
	}
	t.Logf("writer: %s Puts", report[1])
}

// Clear deletes the parts a large Put of a process gone left behind, and
// keeps those of a live one (which may yet swap their descriptor in).
func TestClearDropsOrphansOfTheDead(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 1000, AverageKeySize: 16, AverageValueSize: 100, Segments: 8})
	if err := m.Put([]byte("small"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	live := m.newLargeID()
	dead := live ^ 1<<63 // a generation no live slot was claimed with
	for _, id := range []uint64{live, dead} {
		d := segment.Descriptor{PartSize: 8, Length: 24, Parts: 3, ID: id}
		for i := range d.Parts {
			k, h := partKey(nil, &d, i, 42)
			if err := m.table.For(h).InsertPart(h, k, []byte("12345678")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	var parts int64
	for i := range int(m.layout.Segments) {
		parts += m.table.Segment(i).Parts()
	}
	if n := m.Len(); n != 0 || parts != 3 {
		t.Fatalf("after Clear: Len %d, %d parts; want 0, and the 3 parts of the live writer", n, parts)
	}
	x := m.indexLarge()
	x.orphans(func(_ int, _ segment.PartEntry, id, _ uint64) {
		if id != live {
			t.Errorf("part of id %x left, want only the live writer's %x", id, live)
		}
	})
}
