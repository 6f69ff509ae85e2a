//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testutil"
	"golang.org/x/sys/unix"
)

// putAllKeys is keys i in [from, to) of the PutAll tests, with their
// values (one per round, so that a rewrite shows).
func putAllKeys(from, to, round int) (keys, values [][]byte) {
	for i := from; i < to; i++ {
		keys = append(keys, fmt.Appendf(nil, "pa-%07d", i))
		values = append(values, fmt.Appendf(nil, "v%d-%d-%s", round, i, strings.Repeat("x", i%40)))
	}
	return keys, values
}

// TestPutAllStoresEveryKeyAndCountsExactly: PutAll stores every key of
// small and large batches (large ones in parts on several goroutines):
// a key given twice keeps its last value, within a round and across
// rounds, and the added count is exact with keys present before and keys
// repeated in the batch.
func TestPutAllStoresEveryKeyAndCountsExactly(t *testing.T) {
	for _, n := range []int{1, 17, 1000, 3 * putAllParallel, roundKeys + 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 2 * n, AverageKeySize: 10, AverageValueSize: 40})
			defer m.Close()
			// A third of the keys present before.
			pk, pv := putAllKeys(0, n/3, 0)
			if _, err := m.PutMany(pk, pv); err != nil {
				t.Fatal(err)
			}
			// Every key of [0, n), and again every odd one, later in the
			// batch with another value.
			keys, values := putAllKeys(0, n, 1)
			ok, ov := putAllKeys(0, n, 2)
			for i := 1; i < n; i += 2 {
				keys, values = append(keys, ok[i]), append(values, ov[i])
			}
			stored, added, err := m.PutAll(keys, values)
			if err != nil || stored != len(keys) || added != n-n/3 {
				t.Fatalf("PutAll: %d stored, %d added, %v; want %d, %d", stored, added, err, len(keys), n-n/3)
			}
			if m.Len() != n {
				t.Fatalf("Len %d, want %d", m.Len(), n)
			}
			for i := range n {
				want := keys[i]
				wantV := values[i]
				if i%2 == 1 {
					wantV = ov[i]
				}
				if v, err := m.Get(want); err != nil || !bytes.Equal(v, wantV) {
					t.Fatalf("Get(%s) = %q, %v; want %q (the last value the batch gave)", want, v, err, wantV)
				}
			}
			if problems, err := m.Check(); err != nil || len(problems) != 0 {
				t.Fatalf("Check: %v %v", problems, err)
			}
		})
	}
}

// TestPutAllSortsBySlotStably: the order PutAll stores a batch in is by
// segment, then slot tag, and keeps the batch's order among equal keys.
func TestPutAllSortsBySlotStably(t *testing.T) {
	for _, n := range []int{5, 300, 70000} {
		keys, _ := putAllKeys(0, n, 0)
		keys = append(keys, keys[:n/2]...) // repeated: equal hashes
		var sc putAllScratch
		sc.sorted = make([]putAllItem, len(keys))
		const segments = 64
		items := sc.sortBySlot(keys, segments)
		seen := make([]bool, len(keys))
		for i, it := range items {
			seen[it.index] = true
			if it.hash != keyHash(keys[it.index]) {
				t.Fatalf("n=%d: item %d has the hash of another key", n, i)
			}
			if i == 0 {
				continue
			}
			a, b := slotOrder(items[i-1].hash, 6), slotOrder(it.hash, 6)
			if a > b || a == b && items[i-1].index > it.index {
				t.Fatalf("n=%d: items %d and %d out of order: %#x/%d, %#x/%d", n, i-1, i, a, items[i-1].index, b, it.index)
			}
		}
		for i, s := range seen {
			if !s {
				t.Fatalf("n=%d: key %d missing from the order", n, i)
			}
		}
	}
}

// TestPutAllErrorNamesTheKey: a value too large for a tier, under a key too
// long for a large value, fails with ErrTooLarge naming its index, in a
// small batch, in one split among goroutines and in a later round, and
// every other key it stored reads back.
func TestPutAllErrorNamesTheKey(t *testing.T) {
	for _, n := range []int{100, 3 * putAllParallel, roundKeys * 3 / 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 2 * n, AverageKeySize: 10, AverageValueSize: 40})
			defer m.Close()
			keys, values := putAllKeys(0, n, 0)
			bad := n * 2 / 3
			values[bad] = make([]byte, 1<<24)
			// Stored in parts, but not under a key that long.
			keys[bad] = append(make([]byte, MaxLargeKeyBytes), keys[bad]...)
			stored, _, err := m.PutAll(keys, values)
			var be *BatchError
			if !errors.Is(err, ErrTooLarge) || !errors.As(err, &be) || be.Index != bad || !strings.Contains(err.Error(), fmt.Sprintf("key %d:", bad)) {
				t.Fatalf("PutAll with key %d too large: %v", bad, err)
			}
			if stored >= n || stored != m.Len() {
				t.Fatalf("PutAll said %d stored; the map holds %d of %d", stored, m.Len(), n)
			}
			// Storing the batch again, the bad key left out, stores all.
			keys, values = append(keys[:bad], keys[bad+1:]...), append(values[:bad], values[bad+1:]...)
			if stored, _, err := m.PutAll(keys, values); err != nil || stored != n-1 {
				t.Fatalf("PutAll again: %d, %v", stored, err)
			}
			if m.Len() != n-1 {
				t.Fatalf("Len %d, want %d", m.Len(), n-1)
			}
		})
	}
}

// TestPutAllIntoAFullMap: a batch larger than the map fails with ErrFull,
// and every key PutAll says it stored reads back with its value.
func TestPutAllIntoAFullMap(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, AverageKeySize: 10, AverageValueSize: 40, MaxBloatFactor: 1, MaxSize: NoGrowth})
	defer m.Close()
	n := 5 * putAllParallel
	keys, values := putAllKeys(0, n, 0)
	stored, added, err := m.PutAll(keys, values)
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "key ") {
		t.Fatalf("PutAll of %d keys into a map of 1000: %v", n, err)
	}
	found := 0
	for i, k := range keys {
		v, err := m.Get(k)
		switch {
		case err == nil:
			found++
			if !bytes.Equal(v, values[i]) {
				t.Fatalf("Get(%s) = %q, want %q", k, v, values[i])
			}
		case !errors.Is(err, ErrNotFound):
			t.Fatal(err)
		}
	}
	if found != stored || added != stored || found != m.Len() {
		t.Fatalf("PutAll said %d stored, %d added; %d read back, Len %d", stored, added, found, m.Len())
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check: %v %v", problems, err)
	}
}

// TestPutAllConcurrently: two goroutines' PutAll of overlapping batches,
// each split among goroutines, leave every key with one of the two values
// and the counts add up.
func TestPutAllConcurrently(t *testing.T) {
	n := 3 * putAllParallel
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 2 * n, AverageKeySize: 10, AverageValueSize: 40})
	defer m.Close()
	var wg sync.WaitGroup
	added := make([]int, 2)
	for g := range 2 {
		wg.Go(func() {
			keys, values := putAllKeys(g*n/2, g*n/2+n, g) // the middle half is both's
			_, a, err := m.PutAll(keys, values)
			if err != nil {
				t.Error(err)
			}
			added[g] = a
		})
	}
	wg.Wait()
	total := n/2 + n
	if added[0]+added[1] != total || m.Len() != total {
		t.Fatalf("added %d + %d, Len %d; want %d keys", added[0], added[1], m.Len(), total)
	}
	for i := range total {
		k := fmt.Appendf(nil, "pa-%07d", i)
		v, err := m.Get(k)
		if err != nil || !bytes.HasPrefix(v, fmt.Appendf(nil, "v0-%d-", i)) && !bytes.HasPrefix(v, fmt.Appendf(nil, "v1-%d-", i)) {
			t.Fatalf("Get(%s) = %q, %v", k, v, err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check: %v %v", problems, err)
	}
}

func init() {
	// keys, ms: Put opsKey of [0, keys) over and over for ms, then report
	// "done".
	opsRoles["ops-put-loop"] = func(m *Map, args []string) error {
		n := argInt(args, 0)
		testutil.Report("started")
		for stop := time.Now().Add(time.Duration(argInt(args, 1)) * time.Millisecond); time.Now().Before(stop); {
			for i := range n {
				if err := m.Put(opsKey(i), opsValue(i)); err != nil {
					return err
				}
			}
		}
		testutil.Report("done")
		return nil
	}
}

// TestPutAllWithAnotherProcessWriting: PutAll's parts store their keys
// while another process Puts keys of the same segments; every key of both
// reads back and the map checks clean.
func TestPutAllWithAnotherProcessWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	n := 3 * putAllParallel
	m := mustOpen(t, path, &Options{Entries: 2 * n, AverageKeySize: 10, AverageValueSize: 40, Segments: 16})
	defer m.Close()
	h := startHelper(t, helperCmd("ops-put-loop", path, "2000", "1500"))
	h.expect(t, "started", 30*time.Second)
	for round := range 3 {
		keys, values := putAllKeys(0, n, round)
		if stored, _, err := m.PutAll(keys, values); err != nil || stored != n {
			t.Fatalf("round %d: PutAll: %d, %v", round, stored, err)
		}
	}
	h.expect(t, "done", 60*time.Second)
	keys, values := putAllKeys(0, n, 2)
	for i, k := range keys {
		if v, err := m.Get(k); err != nil || !bytes.Equal(v, values[i]) {
			t.Fatalf("Get(%s) = %q, %v", k, v, err)
		}
	}
	for i := range 2000 {
		if v, err := m.Get(opsKey(i)); err != nil || !bytes.Equal(v, opsValue(i)) {
			t.Fatalf("Get(%s) = %q, %v", opsKey(i), v, err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check: %v %v", problems, err)
	}
}

// TestPutAllInACacheMap: PutAll's entries in a cache map live DefaultTTL.
func TestPutAllInACacheMap(t *testing.T) {
	m, clock := openClockedCache(t, 4000, time.Minute)
	keys, values := putAllKeys(0, 2000, 0)
	if stored, added, err := m.PutAll(keys, values); err != nil || stored != 2000 || added != 2000 {
		t.Fatalf("PutAll: %d, %d, %v", stored, added, err)
	}
	clock.Advance(59 * time.Second)
	for i, k := range keys {
		if v, err := m.Get(k); err != nil || !bytes.Equal(v, values[i]) {
			t.Fatalf("after 59 s: Get(%s) = %q, %v", k, v, err)
		}
	}
	clock.Advance(time.Second)
	for _, k := range keys {
		if _, err := m.Get(k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after DefaultTTL: Get(%s): %v, want ErrNotFound", k, err)
		}
	}
}

// TestAFaultInPutAllIsTheCallers: a fault on the file's pages in the parts
// PutAll stores on goroutines of its own panics in the caller, as a Put's
// does under debug.SetPanicOnFault, once every part has stopped, instead
// of ending the process; after Recover the batch stores again.
func TestAFaultInPutAllIsTheCallers(t *testing.T) {
	n := 3 * putAllParallel
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 2 * n, AverageKeySize: 10, AverageValueSize: 40, LockTimeout: 200 * time.Millisecond})
	defer m.Close()
	keys, values := putAllKeys(0, n, 0)
	if _, _, err := m.PutAll(keys, values); err != nil {
		t.Fatal(err)
	}
	data := m.file.Region.Bytes(0, m.file.Region.Len())
	tiers := data[m.layout.TiersOff:]
	tiers = tiers[:len(tiers)&^(os.Getpagesize()-1)]
	if err := unix.Mprotect(tiers, unix.PROT_READ); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	_, values = putAllKeys(0, n, 1)
	faulted := make(chan any, 1)
	go func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { faulted <- recover() }()
		_, _, _ = m.PutAll(keys, values)
	}()
	r := <-faulted
	if err := unix.Mprotect(tiers, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	if r == nil {
		t.Fatal("PutAll over read-only pages did not fault")
	}
	if _, err := m.Recover(); err != nil {
		t.Logf("Recover: %v", err)
	}
	if stored, _, err := m.PutAll(keys, values); err != nil || stored != n {
		t.Fatalf("PutAll after the fault and Recover: %d, %v", stored, err)
	}
	for i, k := range keys {
		if v, err := m.Get(k); err != nil || !bytes.Equal(v, values[i]) {
			t.Fatalf("Get(%s) = %q, %v", k, v, err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("Check: %v %v", problems, err)
	}
}

// TestPutAllAllocatesPerCallNotPerKey: PutAll's sort works in memory it
// keeps for the next call, so a batch allocates nothing per key.
func TestPutAllAllocatesPerCallNotPerKey(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 4000, AverageKeySize: 10, AverageValueSize: 40})
	defer m.Close()
	keys, values := putAllKeys(0, 2000, 0)
	allocs := testing.AllocsPerRun(20, func() {
		if _, _, err := m.PutAll(keys, values); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Fatalf("PutAll of %d keys allocates %v times", len(keys), allocs)
	}
}

// TestPutAllPartsOfFewSegments: with fewer segments than parts, a part
// moved on to a segment boundary takes the keys of the parts after it,
// which then store nothing.
func TestPutAllPartsOfFewSegments(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, segments := range []int{1, 2} {
		n := 3 * putAllParallel
		m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 2 * n, AverageKeySize: 10, AverageValueSize: 40, Segments: segments})
		keys, values := putAllKeys(0, n, 0)
		if stored, added, err := m.PutAll(keys, values); err != nil || stored != n || added != n {
			t.Fatalf("%d segments: PutAll: %d, %d, %v", segments, stored, added, err)
		}
		for i, k := range keys {
			if v, err := m.Get(k); err != nil || !bytes.Equal(v, values[i]) {
				t.Fatalf("%d segments: Get(%s) = %q, %v", segments, k, v, err)
			}
		}
		m.Close()
	}
}
