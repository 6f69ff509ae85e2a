//go:build linux

package hashmap

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// growthValue is the value the growth tests store under key i: its bytes
// say which key it belongs to, so a value read under the wrong key, or
// torn, does not pass.
func growthValue(key []byte) []byte { return bytes.Repeat(key, 3) }

// The maps of these tests do not split (NoSplits): what they test is the
// file's growth, which a map that splits reaches only once it has split
// as far as it may (see TestGrownMapSplits).

// TestPutPastThePoolGrowsTheFile: a map sized for 1,000 entries takes 60
// times that: the file grows, step by step, every key reads back, Check
// is clean, and a second Open of the grown file reads every key too.
func TestPutPastThePoolGrowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m := mustOpen(t, path, &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, NoSplits: true})
	before := m.Stats()
	if before.TiersLimit <= before.TiersMax || before.MaxFileSize > MinDefaultMaxSize || before.MaxFileSize < MinDefaultMaxSize-before.FileSize {
		t.Fatalf("a new store map does not grow: %+v", before)
	}
	const n = 60_000
	for i := range n {
		k := fmt.Appendf(nil, "key-%07d", i)
		if err := m.Put(k, growthValue(k)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	after := m.Stats()
	if after.GrowthSteps == 0 || after.FileSize <= before.FileSize || after.TiersMax <= before.TiersMax {
		t.Fatalf("the map took %d entries sized for 1000 without growing: before %+v, after %+v", n, before, after)
	}
	t.Logf("grew %d times: %d -> %d tiers, %d -> %d bytes", after.GrowthSteps, before.TiersMax, after.TiersMax, before.FileSize, after.FileSize)
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check of the grown map: %v, %v", problems, err)
	}
	other := mustOpen(t, path, nil)
	defer other.Close()
	for i := range n {
		k := fmt.Appendf(nil, "key-%07d", i)
		if v, err := other.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
			t.Fatalf("Get %s from a second Open: %q, %v", k, v, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMaxSizeBoundsGrowth: a map grows up to MaxSize and no further; then
// Put fails with ErrFull naming MaxSize, and every key stored reads back.
func TestMaxSizeBoundsGrowth(t *testing.T) {
	probe := mustOpen(t, filepath.Join(t.TempDir(), "probe"), &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, MaxSize: NoGrowth})
	size := probe.Stats().FileSize
	probe.Close()
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, MaxSize: 3 * size})
	defer m.Close()
	stored := 0
	var err error
	for ; stored < 1_000_000; stored++ {
		k := fmt.Appendf(nil, "key-%07d", stored)
		if err = m.Put(k, growthValue(k)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "MaxSize") {
		t.Fatalf("after %d Puts: %v, want ErrFull naming MaxSize", stored, err)
	}
	st := m.Stats()
	if st.FileSize > 3*size || st.GrowthSteps == 0 || st.TiersMax != st.TiersLimit {
		t.Fatalf("a map bounded at %d bytes: %+v", 3*size, st)
	}
	for i := range stored {
		k := fmt.Appendf(nil, "key-%07d", i)
		if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
			t.Fatalf("Get %s: %q, %v", k, v, err)
		}
	}
	if problems, err := m.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check: %v, %v", problems, err)
	}
}

// TestNoGrowthKeepsTheSizeOfCreation: MaxSize NoGrowth makes a map that
// fails with ErrFull once its pool is used up, and never lengthens its
// file.
func TestNoGrowthKeepsTheSizeOfCreation(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 500, MaxSize: NoGrowth})
	defer m.Close()
	before := m.Stats()
	if before.TiersLimit != before.TiersMax || before.MaxFileSize != before.FileSize {
		t.Fatalf("a map made with NoGrowth may grow: %+v", before)
	}
	var err error
	for i := 0; err == nil && i < 1_000_000; i++ {
		k := fmt.Appendf(nil, "key-%07d", i)
		err = m.Put(k, growthValue(k))
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("filling a map that does not grow: %v, want ErrFull", err)
	}
	if st := m.Stats(); st.FileSize != before.FileSize || st.GrowthSteps != 0 {
		t.Fatalf("a map made with NoGrowth grew: %+v", st)
	}
}

// TestMaxSizeOptionIsChecked: MaxSize below NoGrowth is refused.
func TestMaxSizeOptionIsChecked(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "m"), &Options{MaxSize: -2})
	if !errors.Is(err, ErrBadOptions) {
		t.Fatalf("MaxSize -2: %v, want ErrBadOptions", err)
	}
}

// TestRepairMendsADamagedGrowthLog: a growth log whose count or a step
// damage changed is named by Check, and Repair cuts it back to the steps
// that make sense, after which Check is clean and every key reads back.
func TestRepairMendsADamagedGrowthLog(t *testing.T) {
	for _, c := range []struct {
		name string
		word int64 // within the global state
		v    uint64
	}{{"count", 8, 1000}, {"a step", 16 + 16, 1}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			m := mustOpen(t, path, &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, NoSplits: true})
			const n = 20_000
			for i := range n {
				k := fmt.Appendf(nil, "key-%07d", i)
				if err := m.Put(k, growthValue(k)); err != nil {
					t.Fatal(err)
				}
			}
			if steps := m.Stats().GrowthSteps; steps < 2 {
				t.Fatalf("the map grew %d times, the test needs 2", steps)
			}
			global := m.layout.GlobalOff
			damageWord(t, m, path, global+c.word, c.v)
			m = mustOpen(t, path, nil)
			defer m.Close()
			if problems, err := m.Check(); err != nil || len(problems) == 0 || !strings.Contains(problems[0].Err.Error(), "growth") {
				t.Fatalf("Check of a damaged growth log: %v, %v", problems, err)
			}
			rep, err := m.Repair()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(rep.Recovery.Mended, "; "), "growth log") {
				t.Errorf("Repair did not say it mended the growth log: %+v", rep.Recovery.Mended)
			}
			if problems, err := m.Check(); err != nil || len(problems) != 0 {
				t.Fatalf("Check after Repair: %v, %v", problems, err)
			}
			for i := range n {
				k := fmt.Appendf(nil, "key-%07d", i)
				if v, err := m.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
					t.Fatalf("Get %s after Repair: %q, %v", k, v, err)
				}
			}
		})
	}
}

// TestAReaderOpenedBeforeGrowthReadsTheNewTiers: a read-only handle opened
// while the file was small finds keys that a writer stored in tiers the
// file gained afterwards, and reports the grown size.
func TestAReaderOpenedBeforeGrowthReadsTheNewTiers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	w := mustOpen(t, path, &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, NoSplits: true})
	defer w.Close()
	r := mustOpen(t, path, &Options{ReadOnly: true})
	defer r.Close()
	small := r.Stats().FileSize
	const n = 30_000
	for i := range n {
		k := fmt.Appendf(nil, "key-%07d", i)
		if err := w.Put(k, growthValue(k)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		k := fmt.Appendf(nil, "key-%07d", i)
		if v, err := r.Get(k); err != nil || !bytes.Equal(v, growthValue(k)) {
			t.Fatalf("read-only Get %s of a grown file: %q, %v", k, v, err)
		}
	}
	if got := r.Stats().FileSize; got <= small || got != w.Stats().FileSize {
		t.Fatalf("the reader sees a file of %d bytes, the writer %d (it was %d)", got, w.Stats().FileSize, small)
	}
}

// TestStatsCountTheGrownTiersResident: the resident bytes Stats reports
// include the tiers the file gained, mapped apart.
func TestStatsCountTheGrownTiersResident(t *testing.T) {
	m := mustOpen(t, filepath.Join(t.TempDir(), "m"), &Options{Entries: 1000, AverageKeySize: 12, AverageValueSize: 36, NoSplits: true})
	defer m.Close()
	start := m.Stats()
	for i := range 60_000 {
		k := fmt.Appendf(nil, "key-%07d", i)
		if err := m.Put(k, growthValue(k)); err != nil {
			t.Fatal(err)
		}
	}
	st := m.Stats()
	// The first mapping is the whole file at creation: more than twice
	// that resident is in the growth mapping.
	if st.Resident <= 2*start.FileSize {
		t.Fatalf("%d bytes resident in a map grown from %d to %d bytes", st.Resident, start.FileSize, st.FileSize)
	}
}
