//go:build linux

package hashmap

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// opsFill puts n keys "<prefix>%05d" with values of several sizes.
func opsFill(t *testing.T, m *Map, prefix string, n int) map[string]string {
	t.Helper()
	want := map[string]string{}
	for i := range n {
		k := fmt.Sprintf("%s%05d", prefix, i)
		v := strings.Repeat(k, 1+i%7)
		if err := m.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	return want
}

// rangeAll is every entry of m by Range, failing the test on an error.
func rangeAll(t *testing.T, m *Map) map[string]string {
	t.Helper()
	got := map[string]string{}
	var err error
	for k, v := range m.Range(&err) {
		got[string(k)] = string(v)
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestClearMap: Clear empties every segment (Len, Range, Get), counts the
// removed entries as deletes, keeps the overflow tiers it had (the refill
// takes none from the pool) and leaves the map consistent; a read-only or
// closed map refuses it.
func TestClearMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	// No splits: Clear's handling of overflow tiers is what it tests.
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 8, AverageValueSize: 16, Segments: 4, MaxBloatFactor: 4, NoSplits: true})
	defer m.Close()
	want := opsFill(t, m, "k", 4000) // past Entries: overflow tiers linked
	extra := m.table.ExtraTiersInUse()
	if extra == 0 {
		t.Fatal("no overflow tier linked: the test lost its point")
	}
	before := m.Stats().Deletes
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 0 || len(rangeAll(t, m)) != 0 {
		t.Fatalf("after Clear: Len %d", m.Len())
	}
	if _, err := m.Get([]byte("k00001")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Clear: %v", err)
	}
	if d := m.Stats().Deletes - before; d != int64(len(want)) {
		t.Fatalf("Clear counted %d deletes, want %d", d, len(want))
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("check after Clear: %v %v", problems, err)
	}
	opsFill(t, m, "k", 4000)
	if got := m.table.ExtraTiersInUse(); got != extra {
		t.Fatalf("the refill took overflow tiers from the pool: %d, %d before", got, extra)
	}
	ro := mustOpen(t, path, &Options{ReadOnly: true})
	defer ro.Close()
	if err := ro.Clear(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Clear on a read-only map: %v", err)
	}
	m.Close()
	if err := m.Clear(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Clear after Close: %v", err)
	}
}

// TestClearWithConcurrentWriters: writers that go on putting during a
// Clear lose nothing written after its segment was cleared: once Clear
// returns, every key of the fill is gone and every key written after
// Clear returned is there. Run with -race.
func TestClearWithConcurrentWriters(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 4000, AverageKeySize: 8, AverageValueSize: 16, Segments: 8})
	defer m.Close()
	opsFill(t, m, "old", 2000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := map[string]bool{}
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-%d", g, i%500)
				if err := m.Put([]byte(k), []byte(k)); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				written[k] = true
				mu.Unlock()
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	got := rangeAll(t, m)
	for k := range got {
		if strings.HasPrefix(k, "old") {
			t.Fatalf("%s survived the Clear", k)
		}
		if !written[k] {
			t.Fatalf("%s present, never written", k)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) != 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
}
