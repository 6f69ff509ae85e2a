//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/offheap"
)

// salvageAll salvages the map at path and reports how Range differs from
// want ("" if it does not), with the notes Salvage gave.
func salvageAll(t *testing.T, path string, want map[string]string) (string, Salvaged) {
	t.Helper()
	m, sv, err := Salvage(path, nil)
	if err != nil {
		t.Fatalf("Salvage: %v (notes %q)", err, sv.Notes)
	}
	defer m.Close()
	return dumpAll(m, want), sv
}

// TestSalvageWithoutHeader: a map whose header page is wiped (zeros) or
// overwritten (random bytes) is refused by Open, and Salvage gets every
// entry out with its value, from the layout it finds in the file, for
// maps of several shapes: plain and cache, with and without checksums
// and undo records, one segment or many, a lock table or a larger one.
func TestSalvageWithoutHeader(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		name string
		opts Options
		n    int
		get  bool // Get every key first (in a cache map, that sets reference bits)
		// splits: the map splits (the default for a store map that
		// grows); else it is made with NoSplits.
		splits bool
	}{
		{"default", Options{Entries: 3000, AverageKeySize: 8, AverageValueSize: 40}, 2000, false, true},
		{"no splits", Options{Entries: 3000, AverageKeySize: 8, AverageValueSize: 40, NoSplits: true}, 2000, false, false},
		{"one segment", Options{Entries: 200, AverageKeySize: 16, AverageValueSize: 100, Segments: 1}, 150, false, false},
		{"many segments, overflow tiers", Options{Entries: 4096, AverageKeySize: 8, AverageValueSize: 8, Segments: 64, MaxBloatFactor: 3}, 6000, false, false},
		{"no checksums", Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 30, NoChecksums: true}, 800, false, false},
		{"no undo", Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 300, NoUndo: true}, 600, false, false},
		{"ticket-awn, locks", Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 20, LockAlgorithm: "ticket-awn", Locks: 100}, 500, false, false},
		{"cache, read", Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 40, Cache: true}, 700, true, false},
		{"cache, never read", Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 40, Cache: true}, 700, false, false},
		{"large values", Options{Entries: 100, AverageKeySize: 8, AverageValueSize: 20000}, 60, false, false},
		{"splits, split", Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 40, Segments: 4}, 20000, false, true},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			opts := tc.opts
			opts.MaxProcesses = 4
			opts.NoSplits = opts.NoSplits || !tc.splits
			want := filledMap(t, path, &opts, tc.n)
			if tc.splits {
				m, err := Open(path, &Options{ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				st := m.Stats()
				m.Close()
				if !m.layout.Splits || (tc.n > tc.opts.Entries) != (st.Segments > tc.opts.Segments && tc.opts.Segments > 0) {
					t.Fatalf("a map that splits: %v, %d segments of %d: not the map the case wants", m.layout.Splits, st.Segments, st.MaxSegments)
				}
			}
			if tc.get {
				m, err := Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				for k := range want {
					if _, err := m.Get([]byte(k)); err != nil {
						t.Fatal(err)
					}
				}
				m.Close()
			}
			clean, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			random := make([]byte, offheap.HeaderSize)
			for i := range random {
				random[i] = byte(rng.Uint32())
			}
			for _, page := range []struct {
				name  string
				bytes []byte
			}{{"zeroed", make([]byte, offheap.HeaderSize)}, {"randomised", random}} {
				writeAt(t, path, page.bytes, 0)
				if _, err := Open(path, &Options{ReadOnly: true}); err == nil {
					t.Fatalf("%s header: Open succeeded", page.name)
				}
				before, _ := os.ReadFile(path)
				msg, sv := salvageAll(t, path, want)
				if msg != "" {
					t.Fatalf("%s header: %s (notes %q)", page.name, msg, sv.Notes)
				}
				if !sv.Inferred {
					t.Fatalf("%s header: the layout was not inferred: %q", page.name, sv.Notes)
				}
				if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
					t.Fatalf("%s header: Salvage wrote the file", page.name)
				}
				if testing.Verbose() {
					t.Logf("%s header: %d entries; notes: %s", page.name, len(want), strings.Join(sv.Notes, "; "))
				}
			}
			writeAt(t, path, clean[:offheap.HeaderSize], 0)
		})
	}
}

// TestSalvageOfAWrongSize: a file cut short or extended is refused by
// Open; Salvage reads it by its header, every entry of a file extended,
// and of a file cut short every entry whose tier is still whole (the
// map's last tiers are the overflow pool's, which this one does not use).
func TestSalvageOfAWrongSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	opts := &Options{Entries: 1000, AverageKeySize: 8, AverageValueSize: 40, MaxProcesses: 4}
	want := filledMap(t, path, opts, 500)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		size int64
		want error
		note string
	}{
		{"one byte appended", st.Size() + 1, offheap.ErrSize, "past the"},
		{"4 KiB cut", st.Size() - 4096, offheap.ErrTruncated, "short of the"},
	} {
		if err := os.Truncate(path, tc.size); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path, nil); !errors.Is(err, tc.want) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Open = %v, want %v", tc.name, err, tc.want)
		}
		msg, sv := salvageAll(t, path, want)
		if msg != "" || sv.Inferred || !strings.Contains(strings.Join(sv.Notes, ";"), tc.note) {
			t.Fatalf("%s: %s; notes %q", tc.name, msg, sv.Notes)
		}
		if err := os.Truncate(path, st.Size()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSalvageNeverPanics: a header page of garbage over files cut at
// various places, and files that are not maps, give an error or a map
// whose every entry read is one that was put: never a panic.
func TestSalvageNeverPanics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m")
	want := filledMap(t, path, &Options{Entries: 500, AverageKeySize: 8, AverageValueSize: 20, MaxProcesses: 4}, 300)
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 40 {
		b := bytes.Clone(clean)
		clear(b[:offheap.HeaderSize])
		switch trial % 4 {
		case 1: // the lock arena's header too
			for i := offheap.HeaderSize; i < offheap.HeaderSize+64; i++ {
				b[i] = byte(rng.Uint32())
			}
		case 2: // random bytes over part of the rest
			at := offheap.HeaderSize + rng.IntN(len(b)-offheap.HeaderSize-256)
			for i := at; i < at+1+rng.IntN(256); i++ {
				b[i] = byte(rng.Uint32())
			}
		case 3: // cut short
			b = b[:offheap.HeaderSize+1+rng.IntN(len(b)-offheap.HeaderSize-1)]
		}
		p := filepath.Join(dir, fmt.Sprintf("t%d", trial))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("trial %d: panic: %v", trial, r)
				}
			}()
			m, _, err := Salvage(p, &Options{LockTimeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			defer m.Close()
			var rerr error
			for k, v := range m.Range(&rerr) {
				if w, ok := want[string(k)]; !ok || w != string(v) {
					t.Fatalf("trial %d: salvaged %q = %q, which was never put", trial, k, v)
				}
			}
		}()
	}
	for _, data := range [][]byte{nil, []byte("hello"), make([]byte, 3*offheap.HeaderSize), bytes.Repeat([]byte("not a map "), 2000)} {
		p := filepath.Join(dir, "other")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if m, _, err := Salvage(p, nil); err == nil {
			m.Close()
			t.Fatalf("Salvage of %d bytes that are no map succeeded", len(data))
		}
	}
}
