//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sharedmap/sharedmap/internal/testhook"
	"github.com/sharedmap/sharedmap/segment"
)

// The two copies of N, the segments in use, in the global state of a file
// that splits (docs/FORMAT.md, section 5: words 3968 and 3976).
const (
	segmentCountOff     = 3968
	segmentCountCopyOff = 3976
)

func splitSalvageKey(i int) []byte { return fmt.Appendf(nil, "split-salvage-%06d", i) }

func splitSalvageValue(i, version int) []byte {
	return fmt.Appendf(nil, "value %d of key %d, padded to a length of its own: %s", version, i, bytes.Repeat([]byte{'x'}, i%11))
}

// salvagedEntries salvages the map at path and returns every entry its
// Range yields, failing the test on an error or a key yielded twice.
func salvagedEntries(t *testing.T, path string) map[string]string {
	t.Helper()
	got, rerr := salvagedEntriesAndError(t, path)
	if rerr != nil {
		t.Fatalf("salvage's Range: %v", rerr)
	}
	return got
}

// salvagedEntriesAndError is salvagedEntries that returns the Range's
// error (what it left out) instead of failing on it.
func salvagedEntriesAndError(t *testing.T, path string) (map[string]string, error) {
	t.Helper()
	sm, _, err := Salvage(path, &Options{LockTimeout: killLockTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	got := map[string]string{}
	var rerr error
	for k, v := range sm.Range(&rerr) {
		if old, ok := got[string(k)]; ok {
			t.Errorf("salvage yields %s twice: %q and %q", k, old, v)
		}
		got[string(k)] = string(v)
	}
	return got, rerr
}

// TestSalvageOfASplitMapWithItsSegmentCountDamaged: a map that split, with
// both copies of N failing their check, salvages every key with its latest
// value: N comes from the stamps of the first tiers of the segments split
// into, not the count the map was created with.
func TestSalvageOfASplitMapWithItsSegmentCountDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 20, AverageValueSize: 60, Segments: 2})
	const n = 6000
	want := map[string]string{}
	for version := range 2 {
		for i := range n {
			if version == 1 && i%3 != 0 {
				continue
			}
			k, v := splitSalvageKey(i), splitSalvageValue(i, version)
			if err := m.Put(k, v); err != nil {
				t.Fatal(err)
			}
			want[string(k)] = string(v)
		}
	}
	st := m.Stats()
	global := m.layout.GlobalOff
	m.Close()
	if st.Segments <= 2 || st.MaxSegments <= st.Segments {
		t.Fatalf("%d segments in use, up to %d: the map did not split, or split as far as it may", st.Segments, st.MaxSegments)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{global + segmentCountOff, global + segmentCountCopyOff} {
		var w [8]byte
		if _, err := f.ReadAt(w[:], off); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(w[:]) & 0xffffffff; got != uint64(st.Segments) {
			t.Fatalf("word at %d holds %d, not the %d segments in use: the test's offsets are wrong", off, got, st.Segments)
		}
		binary.LittleEndian.PutUint64(w[:], binary.LittleEndian.Uint64(w[:])^1<<40) // the check wrong
		if _, err := f.WriteAt(w[:], off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	got := salvagedEntries(t, path)
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s salvaged as %q, want %q (%d of %d keys salvaged)", k, got[k], v, len(got), len(want))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys salvaged, want %d", len(got), len(want))
	}
}

// TestSalvagePrefersTheCopyInTheKeysSegment: a split cut short after its
// commit leaves stale copies of the keys it moved in the segment p it
// split, and the live ones in the new segment c; a key overwritten since,
// in c, is salvaged with its newer value, once, not with the stale one
// p still holds. p is made readable with its stale copies as a recovery
// of it leaves it while N is damaged (rebuild keeps the keys that map to
// p under the count it reads).
func TestSalvagePrefersTheCopyInTheKeysSegment(t *testing.T) {
	testSalvagePrefersTheCopyInTheKeysSegment(t, false)
}

// TestSalvageKeepsAStrayCopyWhenTheKeysSegmentLosesIt: as above, but the
// newer copy in c fails its checksum, so salvage leaves it out: the stale
// copy in p is then all there is of the key, and salvage gives it rather
// than nothing.
func TestSalvageKeepsAStrayCopyWhenTheKeysSegmentLosesIt(t *testing.T) {
	testSalvagePrefersTheCopyInTheKeysSegment(t, true)
}

func testSalvagePrefersTheCopyInTheKeysSegment(t *testing.T, damageNewer bool) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 2000, AverageKeySize: 20, AverageValueSize: 60, Segments: 2, LockTimeout: killLockTimeout})
	stored := 0
	testhook.OnSplitStep = func(step string) {
		if step == "committed" {
			panic("die at " + step)
		}
	}
	died := func() (r any) {
		defer func() { r = recover() }()
		for ; stored < 100_000; stored++ {
			if err := m.Put(splitSalvageKey(stored), splitSalvageValue(stored, 0)); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	}()
	testhook.OnSplitStep = nil
	if died == nil {
		t.Fatal("no split reached its commit")
	}
	nNow := m.table.Segments()
	c := nNow - 1
	p := segment.SplitParent(c, m.layout.Segments)
	if c != 2 || p != 0 {
		t.Fatalf("the first split is of %d into %d, want 0 into 2", p, c)
	}
	// The keys the split moved: in c now, stale in p.
	var moved []int
	for i := range stored {
		if segment.SegmentFor(xxhash.Sum64(splitSalvageKey(i)), nNow) == c {
			moved = append(moved, i)
		}
	}
	if len(moved) == 0 {
		t.Fatal("the split moved no key")
	}
	live := func(dst []uint64) []uint64 { return dst }
	deadline := time.Now().Add(time.Second)
	// c is recovered (as a writer that timed out on its lock would), and
	// a moved key overwritten there.
	if _, err := m.table.Segment(int(c)).Recover(live, deadline); err != nil {
		t.Fatal(err)
	}
	newer := moved[0]
	if err := m.Put(splitSalvageKey(newer), splitSalvageValue(newer, 1)); err != nil {
		t.Fatal(err)
	}
	// p is recovered while both copies of N read as damaged, so its
	// rebuild keeps the stale copies; then N is as the split left it.
	words := m.file.Uint64s(m.layout.GlobalOff+segmentCountOff, 2)
	saved := [2]uint64{atomic.LoadUint64(&words[0]), atomic.LoadUint64(&words[1])}
	atomic.StoreUint64(&words[0], saved[0]^1<<40)
	atomic.StoreUint64(&words[1], saved[1]^1<<40)
	if _, err := m.table.Segment(int(p)).Recover(live, deadline); err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64(&words[0], saved[0])
	atomic.StoreUint64(&words[1], saved[1])
	if m.table.Segments() != nNow {
		t.Fatalf("N reads %d after its repair, want %d", m.table.Segments(), nNow)
	}
	if v, err := m.Get(splitSalvageKey(newer)); err != nil || !bytes.Equal(v, splitSalvageValue(newer, 1)) {
		t.Fatalf("Get of the key overwritten in c: %q, %v", v, err)
	}
	m.Close()
	if damageNewer {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Every copy of its bytes (the entry, and what an undo record
		// or a freed chunk may still hold).
		v := splitSalvageValue(newer, 1)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for at := bytes.Index(b, v); at >= 0; n++ {
			if _, err := f.WriteAt([]byte{v[0] ^ 0x20}, int64(at)); err != nil {
				t.Fatal(err)
			}
			next := bytes.Index(b[at+1:], v)
			if next < 0 {
				break
			}
			at += 1 + next
		}
		f.Close()
		if n == 0 {
			t.Fatal("the newer value is not in the file")
		}
	}
	got, rerr := salvagedEntriesAndError(t, path)
	if damageNewer != (rerr != nil) || rerr != nil && !errors.Is(rerr, ErrCorrupt) {
		t.Fatalf("salvage's Range ended with %v, with the newer copy damaged %v", rerr, damageNewer)
	}
	if v, ok := got[string(splitSalvageKey(stored))]; ok {
		// The Put the split died in had stored its key first.
		if v != string(splitSalvageValue(stored, 0)) {
			t.Fatalf("%s salvaged as %q", splitSalvageKey(stored), v)
		}
		stored++
	}
	for i := range stored {
		want := splitSalvageValue(i, 0)
		if i == newer && !damageNewer {
			want = splitSalvageValue(i, 1)
		}
		if got[string(splitSalvageKey(i))] != string(want) {
			t.Fatalf("%s salvaged as %q, want %q", splitSalvageKey(i), got[string(splitSalvageKey(i))], want)
		}
	}
	if len(got) != stored {
		t.Fatalf("%d keys salvaged, want %d", len(got), stored)
	}
}
