//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// newUnstampedTable is newTable for a file without tier stamps, as older
// builds made them, whose recovery weighs owner and position words.
func newUnstampedTable(t testing.TB, p Params) *Table {
	t.Helper()
	l, err := NewLayout(p, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	l.Stamps = false
	return openTable(t, filepath.Join(t.TempDir(), "map"), l, true)
}

// chainedTable is a table of two segments whose segment 0 has at least
// two overflow tiers, with the model of what it holds.
func chainedTable(t *testing.T) (*Table, map[string][]byte) {
	t.Helper()
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 8, Segments: 2})
	model := map[string][]byte{}
	for i := 0; tb.Segment(0).Tiers() < 3; i++ {
		k := fmt.Appendf(nil, "key-%04d", i)
		v := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%30)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	checkClean(t, tb)
	return tb, model
}

// problemsOf is what Check of segment seg and CheckGlobal report.
func problemsOf(tb *Table, seg int) []string {
	var out []string
	tb.Segment(seg).Check(func(err error) { out = append(out, err.Error()) })
	tb.CheckGlobal(func(err error) { out = append(out, err.Error()) })
	return out
}

// TestStampedHeaderDamageIsNamed flips each byte of the header of a first
// tier and of a linked overflow tier in turn: Check names the tier every
// time, and Repair makes the table sound again with every entry kept. A
// stamp covers the tier's index, so a flipped byte of it never verifies;
// the other words are counts and links Check compares with what they
// describe (but for the lowest-free hint lowered, which is no damage).
func TestStampedHeaderDamageIsNamed(t *testing.T) {
	tb, model := chainedTable(t)
	all := tb.region.Bytes(0, tb.region.Len())
	base := bytes.Clone(all)
	first := tb.tier(0)
	overflow := int64(first.next()) - 1
	l := &tb.layout
	for _, tt := range []int64{0, overflow} {
		for b := int64(0); b < tierHeaderSize; b++ {
			copy(all, base)
			all[l.TiersOff+tt*l.TierSize+b] ^= 0xff
			if tv := tb.tier(tt); b/8 == thLowestFree/8 && tv.lowestFree() <= uint64(firstFree(tv.bitmap, l.Chunks)) {
				continue // a hint lowered: the allocator searches from further back, no harm
			}
			problems := problemsOf(tb, 0)
			named := fmt.Sprintf("tier %d", tt)
			if !strings.Contains(strings.Join(problems, "\n"), named) {
				t.Errorf("tier %d byte %d flipped: Check reports %q, naming no %s", tt, b, problems, named)
				continue
			}
			if _, _, err := tb.Segment(0).Repair(); err != nil {
				t.Fatalf("tier %d byte %d: Repair: %v", tt, b, err)
			}
			if p := problemsOf(tb, 0); len(p) != 0 {
				t.Errorf("tier %d byte %d: after Repair, Check: %q", tt, b, p)
			}
			checkTable(t, tb, model)
		}
	}
}

// TestStampNamesItsTier: a stamp verifies on its own tier only, and one
// copied whole onto another tier, or the header of an empty (zeroed) one,
// does not.
func TestStampNamesItsTier(t *testing.T) {
	tb, _ := chainedTable(t)
	l := &tb.layout
	a := int64(tb.tierNext(0)) - 1
	st, ok := tb.readStamp(a)
	if !ok || !st.says(0, 1) || st.gen == 0 {
		t.Fatalf("tier %d: stamp %+v (verifies %v), want segment 0's at position 1", a, st, ok)
	}
	for seg := range l.Segments {
		if st, ok := tb.readStamp(seg); !ok || st != firstStamp(seg) {
			t.Errorf("first tier %d: stamp %+v (verifies %v)", seg, st, ok)
		}
	}
	id, sum := stampWords(a, st)
	if _, ok := decodeStamp(a+1, id, sum); ok {
		t.Error("a stamp verifies on the next tier")
	}
	if _, ok := decodeStamp(0, 0, 0); ok {
		t.Error("a zeroed stamp verifies")
	}
}

// TestLinkTierDiesAtEveryStep kills a Put that links an overflow tier at
// each of its steps (the count taken, the stamp's two words, the link, the
// chain's count, the entry): recovery loses no entry and leaves no tier
// half stamped, linking a tier stamped before the death or giving it up.
func TestLinkTierDiesAtEveryStep(t *testing.T) {
	p := Params{Entries: 24, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 4, Segments: 1}
	tb, _ := newTable(t, p)
	s := tb.Segment(0)
	var key []byte
	for i := 0; key == nil; i++ {
		k := fmt.Appendf(nil, "k%03d", i)
		before := s.Tiers()
		if _, err := s.put(hashOf(k), k, bytes.Repeat([]byte("v"), 24), Replace); err != nil {
			t.Fatal(err)
		}
		if s.Tiers() == 2 && before == 1 {
			// Delete it again: the next insert links the same way.
			if _, err := s.Delete(hashOf(k), k); err != nil {
				t.Fatal(err)
			}
			key = k
		}
	}
	// A fresh table filled up to that key, so that its Put links.
	tb, _ = newTable(t, p)
	s = tb.Segment(0)
	for i := 0; ; i++ {
		k := fmt.Appendf(nil, "k%03d", i)
		if bytes.Equal(k, key) {
			break
		}
		if _, err := s.put(hashOf(k), k, bytes.Repeat([]byte("v"), 24), Replace); err != nil {
			t.Fatal(err)
		}
	}
	if s.Tiers() != 1 {
		t.Fatalf("%d tiers before the Put that links", s.Tiers())
	}
	pre := readAllEntries(t, tb)
	pool := tb.layout.Segments // the tier the Put takes
	var halfStamped, unlinked int
	steps := dieAtEveryStep(t, tb, func() error {
		_, err := s.put(hashOf(key), key, []byte("new"), Replace)
		return err
	}, func(step int, _ bool, got map[string]string, rep Recovered) {
		for k, v := range pre {
			if got[k] != v {
				t.Fatalf("step %d: %s = %q, was %q (%+v)", step, k, got[k], v, rep)
			}
		}
		if g, ok := got[string(key)]; ok && g != "new" {
			t.Fatalf("step %d: %s = %q", step, key, g)
		}
		if st, ok := tb.readStamp(pool); !ok && !reservedZero(tb.tier(pool).header) {
			t.Fatalf("step %d: after recovery the tier taken is stamped %+v, which does not verify", step, st)
		}
		tb.CheckGlobal(func(err error) { t.Errorf("step %d: check: %v", step, err) })
		if rep.Relinked > 0 {
			unlinked++
		}
		if st, _ := tb.readStamp(pool); st.owner == 0 && st.gen != 0 {
			halfStamped++ // given up
		}
	})
	if unlinked == 0 || halfStamped == 0 {
		t.Fatalf("%d steps: %d deaths left a stamped tier unlinked, %d a tier half stamped: the test lost its point", steps, unlinked, halfStamped)
	}
	t.Logf("%d steps", steps)
}

// TestInferReadsStamps: the layout of a file whose header is lost is
// found with its stamps flag, from the stamps on its tiers, and without it
// for a file that has none.
func TestInferReadsStamps(t *testing.T) {
	stamped, _ := chainedTable(t)
	plain := newUnstampedTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 8, Segments: 2})
	for i := range 40 {
		k := fmt.Appendf(nil, "key-%04d", i)
		if _, err := plain.For(hashOf(k)).put(hashOf(k), k, []byte("value"), Replace); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []*Table{stamped, plain} {
		l := &tb.layout
		inf, err := InferLayout(tb.region, []InferBase{{GlobalOff: l.GlobalOff, Segments: l.Segments, Stats: l.Stats, FastLedgers: l.FastLedgers}}, l.End)
		if err != nil {
			t.Fatal(err)
		}
		if inf.Layout.Stamps != l.Stamps || readKeyOf(&inf.Layout) != readKeyOf(l) {
			t.Errorf("stamps %v: inferred %s with stamps %v (notes %q)", l.Stamps, describe(&inf.Layout), inf.Layout.Stamps, inf.Notes)
		}
	}
}

// TestLayoutRecordKeepsStamps: a new layout has stamps, and its record
// says so (flag 64) and reads back with them; a record without the flag
// reads back without.
func TestLayoutRecordKeepsStamps(t *testing.T) {
	l, err := NewLayout(Params{Entries: 1000, AverageKeySize: 8, AverageValueSize: 8, MaxBloatFactor: 2}, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, stamps := range []bool{true, false} {
		l.Stamps = stamps
		if flags := *l.fields()[2]; (flags&flagStamps != 0) != stamps {
			t.Errorf("stamps %v: flags %#x", stamps, flags)
		}
		got, err := DecodeLayout(l.Encode(), 4096, l.End)
		if err != nil {
			t.Fatal(err)
		}
		if got.Stamps != stamps {
			t.Errorf("stamps %v: read back %v", stamps, got.Stamps)
		}
	}
}

// testUnstamped, set only by TestChainRecoveryWithoutStamps, the room
// hint tests and FuzzEntryDecoding, makes newTable create files without
// stamps.
var testUnstamped bool

// TestChainRecoveryWithoutStamps runs the tests of damaged chains, pool
// counts and writers killed while linking tiers (at each step of it,
// owner and position words included) again on files without stamps,
// whose recovery follows a link only to a tier whose owner and position
// words say it is that link's, and gives up the ones it does not reach.
func TestChainRecoveryWithoutStamps(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"DamagedPoolCounterTakesNoOwnedTier", TestDamagedPoolCounterTakesNoOwnedTier},
		{"CheckGlobalSkipsHoles", TestCheckGlobalSkipsHoles},
		{"RecoverRebuildsAfterDeadWriter", TestRecoverRebuildsAfterDeadWriter},
		{"RandomWritesDieAtEveryStep", TestRandomWritesDieAtEveryStep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testUnstamped = true
			defer func() { testUnstamped = false }()
			tc.test(t)
		})
	}
}
