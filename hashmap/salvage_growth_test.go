//go:build linux

package hashmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sharedmap/sharedmap/offheap"
)

// grownMap makes a map at path sized for 1,000 entries in segments
// segments (0: the default) and puts into it
// until its file has grown at least twice. It returns what the map holds
// and its Stats and layout at the end.
func grownMap(t *testing.T, path string, segments int) (map[string]string, Stats, int64, int64) {
	t.Helper()
	// No splits: the file must grow, and grow twice, which a map that
	// splits does only once it has split as far as it may.
	m := mustOpen(t, path, &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, MaxProcesses: 4, Segments: segments, NoSplits: true})
	want := map[string]string{}
	for i := 0; m.Stats().GrowthSteps < 2; i++ {
		if i == 200_000 {
			t.Fatalf("%d Puts and the map grew %d times", i, m.Stats().GrowthSteps)
		}
		for j := range 500 {
			k := fmt.Appendf(nil, "key-%07d", i*500+j)
			if err := m.Put(k, growthValue(k)); err != nil {
				t.Fatal(err)
			}
			want[string(k)] = string(growthValue(k))
		}
	}
	st := m.Stats()
	tiersOff, tierSize := m.layout.TiersOff, m.layout.TierSize
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != tiersOff+int64(st.TiersMax)*tierSize {
		t.Fatalf("a grown file: %v, %+v", err, st)
	}
	return want, st, tiersOff, tierSize
}

// entryEnds finds, in a map file's bytes b, every entry whose key and
// value are want's (the key's 16-byte entry header before it giving their
// lengths), and returns for each key where its entries end. It reads the
// bytes, not the map: an oracle of where each entry lies that shares no
// code with the readers under test. A key may have more than one (a
// stale copy a move left behind).
func entryEnds(b []byte, want map[string]string) map[string][]int64 {
	ends := map[string][]int64{}
	for off := 16; ; off++ {
		i := bytes.Index(b[off:], []byte("key-"))
		if i < 0 {
			return ends
		}
		off += i
		klen := int(binary.LittleEndian.Uint32(b[off-16:]))
		vlen := int(binary.LittleEndian.Uint32(b[off-12:]))
		if klen != len("key-0000000") || vlen > 1<<10 || off+klen+vlen > len(b) {
			continue
		}
		k := string(b[off : off+klen])
		if v, ok := want[k]; ok && v == string(b[off+klen:off+klen+vlen]) {
			ends[k] = append(ends[k], int64(off+klen+vlen))
		}
	}
}

// salvageGrown salvages the map at path and checks what Range gives
// against want: every value right, every key of mustHave there, and no
// entry reported left out as damage unless lossExpected. It returns the
// keys of want Range left out, and the notes.
func salvageGrown(t *testing.T, path string, want map[string]string, mustHave func(k string) bool, lossExpected bool) ([]string, Salvaged) {
	t.Helper()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, sv, err := Salvage(path, nil)
	if err != nil {
		t.Fatalf("Salvage: %v (notes %q)", err, sv.Notes)
	}
	got := map[string]string{}
	var rerr error
	for k, v := range m.Range(&rerr) {
		if w, ok := want[string(k)]; !ok || w != string(v) {
			t.Fatalf("salvaged %q = %q, want %q (notes %q)", k, v, w, sv.Notes)
		}
		got[string(k)] = string(v)
	}
	if rerr != nil && (!lossExpected || !errors.Is(rerr, ErrCorrupt)) {
		t.Fatalf("Range: %v (notes %q)", rerr, sv.Notes)
	}
	if n := m.Len(); n < len(got) {
		t.Errorf("Len %d, Range gave %d", n, len(got))
	}
	m.Close()
	var lost []string
	for k := range want {
		if _, ok := got[k]; !ok {
			if mustHave(k) {
				t.Fatalf("%q is lost, its entry whole in the file (%d of %d lost; notes %q)", k, len(want)-len(got), len(want), sv.Notes)
			}
			lost = append(lost, k)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("Salvage wrote the file")
	}
	if testing.Verbose() {
		t.Logf("%d of %d entries; notes: %s", len(got), len(want), strings.Join(sv.Notes, "; "))
	}
	return lost, sv
}

func noteSays(sv Salvaged, s string) bool { return strings.Contains(strings.Join(sv.Notes, "\n"), s) }

// TestSalvageOfAGrownMap: a map whose file grew past the size its header
// records is salvaged whole: with its header (every tier the file grew
// by is read, not left out as bytes past the recorded size), with both
// header copies damaged (the layout found from the file takes in the
// tiers it grew by), with bytes appended past its last tier, and cut
// short in the middle of a tier that holds entries, where only entries
// that lay in the cut tail are lost and the notes say so.
func TestSalvageOfAGrownMap(t *testing.T) {
	for _, segments := range []int{0, 4} {
		t.Run(fmt.Sprintf("segments=%d", segments), func(t *testing.T) { testSalvageOfAGrownMap(t, segments) })
	}
}

func testSalvageOfAGrownMap(t *testing.T, segments int) {
	path := filepath.Join(t.TempDir(), "m")
	want, st, tiersOff, tierSize := grownMap(t, path, segments)
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ends := entryEnds(clean, want)
	if len(ends) != len(want) {
		t.Fatalf("the oracle found %d of the %d entries in the file", len(ends), len(want))
	}
	all := func(string) bool { return true }
	t.Logf("%d entries; grew %d times to %d tiers (%d in use), %d bytes", len(want), st.GrowthSteps, st.TiersMax, st.TiersInUse, len(clean))
	restore := func() {
		if err := os.WriteFile(path, clean, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("intact", func(t *testing.T) {
		defer restore()
		lost, sv := salvageGrown(t, path, want, all, false)
		if len(lost) > 0 || sv.Inferred || !noteSays(sv, fmt.Sprintf("%d tiers", st.TiersMax)) {
			t.Fatalf("%d lost; notes %q: want every entry, read by the header, the notes naming the %d tiers the file holds", len(lost), sv.Notes, st.TiersMax)
		}
	})

	t.Run("bytes appended", func(t *testing.T) {
		defer restore()
		writeAt(t, path, []byte("junk"), int64(len(clean)))
		if _, err := Open(path, &Options{ReadOnly: true}); err == nil {
			t.Fatal("Open of a grown file with bytes appended succeeded")
		}
		lost, sv := salvageGrown(t, path, want, all, false)
		if len(lost) > 0 || sv.Inferred || !noteSays(sv, "4 bytes past the") {
			t.Fatalf("%d lost; notes %q: want every entry, and the notes to name the 4 bytes appended", len(lost), sv.Notes)
		}
	})

	t.Run("cut mid-tier", func(t *testing.T) {
		defer restore()
		// In the middle of the entries of the last tier handed out, so
		// that the tail cut off held some and the rest of the tier
		// others.
		last := tiersOff + int64(st.TiersInUse-1)*tierSize
		var inLast []int64
		for _, es := range ends {
			for _, e := range es {
				if e > last {
					inLast = append(inLast, e)
				}
			}
		}
		if len(inLast) < 2 {
			t.Fatalf("%d entries in the last tier handed out, the test needs 2", len(inLast))
		}
		slices.Sort(inLast)
		cut := inLast[len(inLast)/2] - 1
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path, &Options{ReadOnly: true}); err == nil {
			t.Fatal("Open of a grown file cut mid-tier succeeded")
		}
		inTail := 0
		whole := func(k string) bool {
			for _, e := range ends[k] {
				if e > cut {
					return false
				}
			}
			return true
		}
		for k := range want {
			if !whole(k) {
				inTail++
			}
		}
		if inTail == 0 {
			t.Fatalf("no entry lies past %d: the test cuts nothing", cut)
		}
		lost, sv := salvageGrown(t, path, want, whole, true)
		if len(lost) == 0 || !noteSays(sv, fmt.Sprintf("%d bytes short", tiersOff+int64(st.TiersInUse)*tierSize-cut)) || !noteSays(sv, "lost") {
			t.Fatalf("%d lost of the %d past the cut; notes %q: want the notes to say what is missing and that what was there is lost", len(lost), inTail, sv.Notes)
		}
	})

	t.Run("cut tiers before the last handed out", func(t *testing.T) {
		defer restore()
		// In the middle of a tier with two handed-out tiers after it:
		// the chains that run into those read them as empty.
		cut := tiersOff + int64(st.TiersInUse-3)*tierSize + tierSize/3
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path, &Options{ReadOnly: true}); err == nil {
			t.Fatal("Open of a grown file cut short succeeded")
		}
		whole := func(k string) bool {
			for _, e := range ends[k] {
				if e > cut {
					return false
				}
			}
			return true
		}
		lost, sv := salvageGrown(t, path, want, whole, true)
		if len(lost) == 0 || !noteSays(sv, "2 tiers past the file's end") || !noteSays(sv, "lost") {
			t.Fatalf("%d lost; notes %q: want the notes to say that two tiers the pool handed out are past the end and their entries lost", len(lost), sv.Notes)
		}
	})

	for _, dmg := range []struct {
		name string
		page func([]byte) []byte
	}{
		{"both header checksums zeroed", func(p []byte) []byte {
			clear(p[56:64])
			clear(p[2048+56 : 2048+64])
			return p
		}},
		{"header page zeroed", func(p []byte) []byte { return make([]byte, len(p)) }},
	} {
		t.Run(strings.ReplaceAll(dmg.name, " ", "_"), func(t *testing.T) {
			defer restore()
			writeAt(t, path, dmg.page(bytes.Clone(clean[:offheap.HeaderSize])), 0)
			if _, err := Open(path, &Options{ReadOnly: true}); err == nil {
				t.Fatal("Open succeeded")
			}
			lost, sv := salvageGrown(t, path, want, all, false)
			if len(lost) > 0 || !sv.Inferred || !noteSays(sv, fmt.Sprintf("%d tiers", st.TiersMax)) || !noteSays(sv, "grew") {
				t.Fatalf("%d lost; notes %q: want every entry, the layout inferred, and the notes to say the file grew to %d tiers", len(lost), sv.Notes, st.TiersMax)
			}
		})
	}
}
