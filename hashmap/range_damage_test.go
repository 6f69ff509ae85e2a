//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// TestRangeLeavesOutDamagedEntries: an entry whose bytes changed on disk
// after it was written fails its checksum, and Range and RangeView leave it
// out, yield the rest, and end with ErrCorrupt naming it, so that a copy
// made by ranging never stores damaged bytes under a fresh checksum. A map
// without checksums cannot tell, and yields it.
func TestRangeLeavesOutDamagedEntries(t *testing.T) {
	for _, tc := range []struct {
		noChecksums, cache bool
		at                 int // where the damage is, from the value's start
	}{{false, false, 0}, {true, false, 0}, {false, true, 0}, {false, true, -8}} {
		noChecksums := tc.noChecksums
		// In a cache map the value follows its expiry (8 bytes, 0 here):
		// damage there makes the entry look expired, which must not hide
		// it.
		m, path := openTemp(t, &Options{Entries: 1000, NoChecksums: noChecksums, Cache: tc.cache})
		want := map[string]string{"alpha": "first-value", "beta": "VALUE-TO-DAMAGE", "gamma": "third-value"}
		for k, v := range want {
			if err := m.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		m.Close()
		flipInFile(t, path, "VALUE-TO-DAMAGE", tc.at)
		m, err := Open(path, &Options{Cache: tc.cache})
		if err != nil {
			t.Fatal(err)
		}
		for name, rng := range map[string]func(*error) func(func([]byte, []byte) bool){
			"Range":     func(e *error) func(func([]byte, []byte) bool) { return m.Range(e) },
			"RangeView": func(e *error) func(func([]byte, []byte) bool) { return m.RangeView(e) },
		} {
			var rerr error
			got := map[string]string{}
			for k, v := range rng(&rerr) {
				got[string(k)] = string(v)
			}
			if noChecksums {
				if rerr != nil || len(got) != 3 {
					t.Errorf("no checksums, %s: %d entries, %v; want all 3, no error", name, len(got), rerr)
				}
				continue
			}
			if !errors.Is(rerr, ErrCorrupt) || !strings.Contains(rerr.Error(), `key "beta"`) || !strings.Contains(rerr.Error(), "1 entry") {
				t.Errorf("%s ended with %v; want ErrCorrupt naming beta", name, rerr)
			}
			if len(got) != 2 || got["alpha"] != want["alpha"] || got["gamma"] != want["gamma"] {
				t.Errorf("%s yielded %q; want alpha and gamma only", name, got)
			}
		}
		m.Close()
	}
}

// TestRangeGoesPastABrokenChain: a segment whose chain of tiers cannot be
// followed (its first tier's next word names no tier) is left out whole,
// and Range yields every entry of the other segments before it ends with
// ErrCorrupt saying so. Before, Range stopped at that segment, and a dump
// lost every segment after it.
func TestRangeGoesPastABrokenChain(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 400, Segments: 4})
	want := map[string]bool{} // keys outside the damaged segment
	const damaged = 1
	for i := range 300 {
		k := []byte(fmt.Sprintf("key-%d", i))
		if err := m.Put(k, []byte("value")); err != nil {
			t.Fatal(err)
		}
		if m.table.For(xxhash.Sum64(k)).Index() != damaged {
			want[string(k)] = true
		}
	}
	l := *m.layout
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	writeWord(t, path, l.TiersOff+damaged*l.TierSize, uint64(l.Tiers)+5) // the tier header's first word: next tier + 1
	m, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var rerr error
	got := map[string]bool{}
	for k := range m.RangeView(&rerr) {
		got[string(k)] = true
	}
	if !errors.Is(rerr, ErrCorrupt) || !strings.Contains(rerr.Error(), "segment 1") || !strings.Contains(rerr.Error(), "left out") {
		t.Errorf("RangeView ended with %v; want ErrCorrupt naming segment 1 as left out", rerr)
	}
	if len(got) != len(want) || len(want) < 200 {
		t.Errorf("yielded %d entries, want the %d of the other segments", len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s not yielded", k)
			break
		}
	}
}

// TestGetCheckedRefusesDamage: GetChecked answers ErrCorrupt, naming the
// key, for an entry whose value changed after it was written, where
// GetInto returns the changed bytes; sound entries, absent keys and a
// cache map's entries (whose checksum covers their expiry) read as with
// GetInto.
func TestGetCheckedRefusesDamage(t *testing.T) {
	for _, cache := range []bool{false, true} {
		m, path := openTemp(t, &Options{Entries: 1000, Cache: cache})
		for _, k := range []string{"alpha", "beta"} {
			if err := m.Put([]byte(k), []byte("VALUE-OF-"+k)); err != nil {
				t.Fatal(err)
			}
		}
		if v, err := m.GetChecked([]byte("x"), []byte("alpha")); err != nil || string(v) != "xVALUE-OF-alpha" {
			t.Errorf("cache %v: GetChecked of a sound entry: %q, %v", cache, v, err)
		}
		m.Close()
		flipInFile(t, path, "VALUE-OF-beta", 0)
		m, err := Open(path, &Options{Cache: cache, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := m.GetInto(nil, []byte("beta")); err != nil || string(v) != "vALUE-OF-beta" {
			t.Errorf("cache %v: GetInto of the damaged entry: %q, %v; want the changed bytes (lookups trust the file)", cache, v, err)
		}
		if v, err := m.GetChecked([]byte("x"), []byte("beta")); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"beta"`) || string(v) != "x" {
			t.Errorf("cache %v: GetChecked of the damaged entry: %q, %v; want ErrCorrupt naming beta, dst unchanged", cache, v, err)
		}
		if v, err := m.GetChecked(nil, []byte("alpha")); err != nil || string(v) != "VALUE-OF-alpha" {
			t.Errorf("cache %v: GetChecked of a sound entry after reopening: %q, %v", cache, v, err)
		}
		if _, err := m.GetChecked(nil, []byte("gamma")); !errors.Is(err, ErrNotFound) {
			t.Errorf("cache %v: GetChecked of an absent key: %v", cache, err)
		}
		m.Close()
	}
}

// TestGetCheckedSeesDamagedExpiry: damage to a cache entry's expiry that
// makes it look expired is damage to GetChecked, as to Range: ErrCorrupt,
// not ErrNotFound. GetChecked verifies the checksum before it decides the
// entry's liveness (before, it answered ErrNotFound and mapctl get "not
// found").
func TestGetCheckedSeesDamagedExpiry(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 1000, Cache: true})
	if err := m.Put([]byte("beta"), []byte("VALUE-OF-beta")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	flipInFile(t, path, "VALUE-OF-beta", -8) // the expiry, 0 (never), becomes 32 ns after 1970
	m, err := Open(path, &Options{Cache: true, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.GetChecked(nil, []byte("beta")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("GetChecked of an entry whose expiry was damaged: %v; want ErrCorrupt", err)
	}
}

// flipInFile flips bit 5 of the byte at from the last copy of marker in
// the file at path (a map's entries lie in its tiers, which come last).
func flipInFile(t *testing.T, path, marker string, at int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(b, []byte(marker))
	if i < 0 || i+at < 0 {
		t.Fatalf("%q not in the file", marker)
	}
	b[i+at] ^= 0x20
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readWord reads the little-endian word at byte off of the file at path.
func readWord(t *testing.T, path string, off int64) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// writeWord sets the little-endian word at byte off of the file at path.
func writeWord(t *testing.T, path string, off int64, v uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint64(nil, v), off); err != nil {
		t.Fatal(err)
	}
}

// TestRangeClearsAReusedError: the error variable a Range reports into is
// set to nil when the iteration starts, so an error it held from an
// earlier call does not read as the Range's.
func TestRangeClearsAReusedError(t *testing.T) {
	m, _ := openTemp(t, &Options{Entries: 100})
	if err := m.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, view := range []bool{false, true} {
		err := errors.New("an earlier call's error")
		seq := m.Range(&err)
		if view {
			seq = m.RangeView(&err)
		}
		n := 0
		for range seq {
			n++
		}
		if err != nil || n != 1 {
			t.Errorf("RangeView %v: %d entries, error %v; want 1, nil", view, n, err)
		}
	}
}

// TestRangeGoesPastAHeldLock: a segment whose lock stays held through the
// whole wait is left out and the iteration goes on to the other segments,
// ending in ErrTimeout that names it. It stopped the iteration there, so a
// dump of a map whose writer died holding a segment's write lock (opened
// read-only, which cannot release it) wrote nothing of the segments after
// it. The dead writer is stood in for by
// this test holding the segment's write lock with the sequence odd.
func TestRangeGoesPastAHeldLock(t *testing.T) {
	m, path := openTemp(t, &Options{Entries: 400, Segments: 4, LockTimeout: 50 * time.Millisecond})
	want := map[string]bool{} // keys outside the held segment
	const held = 1
	for i := range 300 {
		k := []byte(fmt.Sprintf("key-%d", i))
		if err := m.Put(k, []byte("value")); err != nil {
			t.Fatal(err)
		}
		if m.table.For(xxhash.Sum64(k)).Index() != held {
			want[string(k)] = true
		}
	}
	seg := m.table.Segment(held)
	if err := seg.Lock().WriteLock(time.Second); err != nil {
		t.Fatal(err)
	}
	// The sequence odd, as a writer's is in the middle of a change (the
	// segment header's word at byte 16, see segment/layout.go), written
	// through the file: the mapping shares its pages.
	seqOff := m.layout.SegmentsOff + held*64 + 16
	seq := readWord(t, path, seqOff)
	writeWord(t, path, seqOff, seq+1)
	defer func() {
		writeWord(t, path, seqOff, seq+2)
		_ = seg.Lock().WriteUnlock()
	}()
	var rerr error
	got := map[string]bool{}
	for k := range m.Range(&rerr) {
		got[string(k)] = true
	}
	if !errors.Is(rerr, ErrTimeout) || !strings.Contains(rerr.Error(), "segment 1") || !strings.Contains(rerr.Error(), "left out") {
		t.Errorf("Range ended with %v; want ErrTimeout naming segment 1 as left out", rerr)
	}
	if len(got) != len(want) || len(want) < 200 {
		t.Errorf("yielded %d entries, want the %d of the other segments", len(got), len(want))
	}
}
