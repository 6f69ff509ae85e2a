//go:build linux

package hashmap

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// putSeg puts keys of segment seg only until its chain has tiers tiers
// and at least atLast keys in its last; keys by chain position.
func putSeg(t *testing.T, m *Map, seg uint64, from int, tiers int64, atLast int) map[int64]map[string][]byte {
	t.Helper()
	got := map[int64]map[string][]byte{}
	s := m.table.Segment(int(seg))
	for i := from; s.Tiers() < tiers || len(got[tiers-1]) < atLast; i++ {
		k := fmt.Sprintf("key-%d", i)
		if xxhash.Sum64String(k)&m.segMask != seg {
			continue
		}
		v := []byte(fmt.Sprintf("old-%d-%s", i, bytes.Repeat([]byte("v"), 16)))
		if err := m.Put([]byte(k), v); err != nil {
			t.Fatal(err)
		}
		p := s.Tiers() - 1
		if got[p] == nil {
			got[p] = map[string][]byte{}
		}
		got[p][k] = v
	}
	return got
}

// allKeys lists the keys of putSeg's result.
func allKeys(byPos map[int64]map[string][]byte) []string {
	var ks []string
	for _, m := range byPos {
		ks = append(ks, mapKeys(m)...)
	}
	return ks
}

// lostOf counts the keys m no longer reads.
func lostOf(m *Map, keys []string) int {
	n := 0
	for _, k := range keys {
		if _, err := m.Get([]byte(k)); err != nil {
			n++
		}
	}
	return n
}

// lossReported fails the test if m lost more of keys, all segment seg's,
// than reps (recoveries' and repairs' reports, in order) say were dropped
// there.
func lossReported(t *testing.T, m *Map, keys []string, seg int64, reps ...[]SegmentRepair) {
	t.Helper()
	if lost, dropped := lostOf(m, keys), droppedIn(seg, reps...); lost > int(dropped) {
		problems, _ := m.Check()
		t.Errorf("lost %d of %d keys of segment %d, reported %d dropped there (reports %+v); Check after: %v", lost, len(keys), seg, dropped, reps, problems)
	}
}

// droppedIn sums what the reports say was dropped (or doubled) in seg.
func droppedIn(seg int64, reps ...[]SegmentRepair) int64 {
	var d int64
	for _, rs := range reps {
		for _, r := range rs {
			if r.Segment == seg {
				d += r.Dropped + r.Doubled
			}
		}
	}
	return d
}

// One damaged owner word in segment 0's last overflow tier (linked, its
// position word right), then a writer of segment 0 dies. Recover (no
// salvage) cut the chain before the tier, and the inference of files
// without stamps did not count it (owner not 0's); Repair then found
// nothing: keys lost, none reported. Now the loss must be reported.
func TestRecoverKeepsATierWithADamagedOwner(t *testing.T) {
	for _, owner := range []uint64{0, 2} {
		t.Run(fmt.Sprintf("owner=%d", owner), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m")
			m, err := Open(path, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, NoSplits: true}) // chains of overflow tiers
			if err != nil {
				t.Fatal(err)
			}
			keys := allKeys(putSeg(t, m, 0, 0, 3, 8))
			l := *m.layout
			m.Close()
			t1 := int64(readWord(t, path, l.TiersOff)) - 1
			t2 := int64(readWord(t, path, l.TiersOff+t1*l.TierSize)) - 1
			writeWord(t, path, l.TiersOff+t2*l.TierSize+tierOwnerOff, owner)
			dieHolding(t, path, 0)
			m = openOrFail(t, path)
			atOpen := m.RecoveredAtOpen().Segments
			rep, err := m.Repair()
			if err != nil {
				t.Fatal(err)
			}
			lossReported(t, m, keys, 0, atOpen, rep.Rebuilt)
		})
	}
}

// Segment 1's overflow tier's owner word damaged to name segment 0, then a
// writer of segment 0 dies: Recover(0) must not count segment 1's entries
// as dropped in segment 0 (they are not dropped; the inference of files
// without stamps did); then a writer of segment 1 dies too, and Recover(1)
// cuts its chain at that tier: segment 1's keys lost must be reported
// there.
func TestRecoverLeavesAnotherChainsTier(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, NoSplits: true}) // chains of overflow tiers
	if err != nil {
		t.Fatal(err)
	}
	keys1 := allKeys(putSeg(t, m, 1, 0, 2, 8))
	l := *m.layout
	m.Close()
	x := int64(readWord(t, path, l.TiersOff+1*l.TierSize)) - 1
	writeWord(t, path, l.TiersOff+x*l.TierSize+tierOwnerOff, 1) // names segment 0
	dieHolding(t, path, 0)
	m = openOrFail(t, path)
	first := m.RecoveredAtOpen().Segments
	if d := droppedIn(0, first); d != 0 {
		t.Errorf("Recover of segment 0 (nothing of its own lost) reports %d dropped: %+v", d, first)
	}
	m.Close()
	dieHolding(t, path, 1)
	m = openOrFail(t, path)
	second := m.RecoveredAtOpen().Segments
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	lossReported(t, m, keys1, 1, first, second, rep.Rebuilt)
}

// Both first links damaged: segment 0's to segment 1's emptied overflow
// tier X at position 1, segment 1's out of the pool. The inference of
// files without stamps took X for segment 0 (one link reached it, it held
// no keys of others), gave up segment 0's own tier W, and lost segment 1's
// Y after X too. Repair must take the tier whose own words say it belongs,
// and keep every one (in a file without stamps, report each loss).
func TestRepairPrefersTheTierThatSaysItBelongs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, NoSplits: true}) // chains of overflow tiers
	if err != nil {
		t.Fatal(err)
	}
	one := putSeg(t, m, 1, 0, 3, 8)
	for k := range one[1] { // X emptied
		if _, err := m.Delete([]byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	zero := putSeg(t, m, 0, 100000, 2, 8)
	l := *m.layout
	m.Close()
	x := int64(readWord(t, path, l.TiersOff+1*l.TierSize)) - 1
	writeWord(t, path, l.TiersOff, uint64(x)+1)      // segment 0's first link -> X
	writeWord(t, path, l.TiersOff+1*l.TierSize, 999) // segment 1's first link out of the pool
	m = openOrFail(t, path)
	keep := append(allKeys(zero), mapKeys(one[2])...)
	keep = append(keep, mapKeys(one[0])...)
	repairKeepsAll(t, m, keep)
}

// TestRecoverLeavesATierBeingAttached: segment 1's writer, in another process, has taken tier Y and
// written its owner and position words but not linked it yet, when one
// damaged word points segment 0's last link at Y and a writer of segment
// 0 dies. Recover of segment 0 must not take Y (before, it rewrote Y's
// owner word, and the live writer's link then put Y in two chains): an
// empty tier that links nowhere shows nothing of segment 0's.
func TestRecoverLeavesATierBeingAttached(t *testing.T) {
	withoutStamps(t) // the owner and position words of a file without stamps
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, NoSplits: true}) // chains of overflow tiers
	if err != nil {
		t.Fatal(err)
	}
	putSeg(t, m, 1, 0, 2, 1)
	putSeg(t, m, 0, 100000, 2, 1)
	l := *m.layout
	m.Close()
	w := int64(readWord(t, path, l.TiersOff)) - 1 // segment 0's tier at position 1
	used := readWord(t, path, l.GlobalOff)
	y := l.Segments + int64(used)
	writeWord(t, path, l.GlobalOff, used+1)                       // segment 1's writer: the count raised,
	writeWord(t, path, l.TiersOff+y*l.TierSize+tierOwnerOff, 2)   // the owner word,
	writeWord(t, path, l.TiersOff+y*l.TierSize+tierOwnerOff+8, 2) // the position word; not linked yet
	writeWord(t, path, l.TiersOff+w*l.TierSize, uint64(y)+1)      // one damaged word: segment 0's last link -> Y
	dieHolding(t, path, 0)
	m = openOrFail(t, path)
	m.Close()
	if o := readWord(t, path, l.TiersOff+y*l.TierSize+tierOwnerOff); o != 2 {
		t.Errorf("Recover of segment 0 rewrote the owner word of segment 1's tier being attached: %d, want 2", o)
	}
}

// TestRepairLeavesAnotherChainsTierWithNoOwner: segment 1's linked tier X, its owner word damaged to 0,
// and segment 0's first link damaged to name X. Segment 0 must not take X
// on its position word alone (before, it did, dropped segment 1's 8 keys
// as its own, and segment 1 then cut its chain: nothing reported there).
func TestRepairLeavesAnotherChainsTierWithNoOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	m, err := Open(path, &Options{Entries: 64, Segments: 2, MaxBloatFactor: 3, NoSplits: true}) // chains of overflow tiers
	if err != nil {
		t.Fatal(err)
	}
	keys1 := allKeys(putSeg(t, m, 1, 0, 2, 8))
	l := *m.layout
	m.Close()
	x := int64(readWord(t, path, l.TiersOff+1*l.TierSize)) - 1
	writeWord(t, path, l.TiersOff+x*l.TierSize+tierOwnerOff, 0) // X's owner word
	writeWord(t, path, l.TiersOff, uint64(x)+1)                 // segment 0's first link -> X
	m = openOrFail(t, path)
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	lossReported(t, m, keys1, 1, rep.Rebuilt)
}

// TestRepairReportsATierWhoseLinkAndOwnerAreDamaged: in a file without
// stamps, a segment's first tier's link and its overflow tier's owner word
// both damaged (CI's loss oracle found this pair when Repair inferred
// such tiers: 34 keys gone, none reported), the owner word out of range,
// naming the other segment, or zero; and with the pool's count damaged
// beyond the pool too. Repair does not guess the tier back into the
// chain: it gives it up and the tiers after it, and reports their entries
// dropped in their segment; the count is mended to cover the tier, which
// holds a sound entry, so its loss is reported rather than zeroed unsaid.
func TestRepairReportsATierWhoseLinkAndOwnerAreDamaged(t *testing.T) {
	withoutStamps(t) // the owner and position words of a file without stamps
	for _, tc := range []struct {
		owner uint64
		count bool
	}{{48, false}, {2, false}, {0, false}, {48, true}} { // out of range; the other segment; zero
		owner := tc.owner
		t.Run(fmt.Sprint("owner ", owner, ", count damaged ", tc.count), func(t *testing.T) {
			m, path, keys := fillTwoOverflowTiers(t)
			l := *m.layout
			first := int64(readWord(t, path, l.TiersOff)) - 1 // segment 0's first overflow tier
			if first < l.Segments {
				t.Fatalf("segment 0 has no overflow tier (link %d)", first+1)
			}
			damageWord(t, m, path, l.TiersOff, 48)
			writeWord(t, path, l.TiersOff+first*l.TierSize+tierOwnerOff, owner)
			if tc.count {
				writeWord(t, path, l.GlobalOff, 805306370) // the count of overflow tiers handed out
			}
			m = openOrFail(t, path)
			rep, err := m.Repair()
			if err != nil {
				t.Fatal(err)
			}
			if relinkedIn(rep) != 0 || lostOf(m, numberedKeys(keys)) == 0 {
				t.Errorf("Repair = %+v; want the tier given up, not linked back", rep.Rebuilt)
			}
			keptAndClean(t, m, numberedKeys(keys), rep)
		})
	}
}

// TestRepairRelinksATierAnotherChainsLinkHeld: segment 0's link damaged
// out of range, and segment 1's damaged to name segment 0's overflow tier
// (the loss hunt's third find). Segment 0's rebuild, first, cannot take
// its tier back while segment 1's link reaches it; segment 1's rebuild
// then cuts that link and takes back its own tier. Repair now rebuilds
// segment 0 again, which links its tier back (before: its 34 keys lost,
// none reported), and Check names such a tier until then.
func TestRepairRelinksATierAnotherChainsLinkHeld(t *testing.T) {
	m, path, keys := fillTwoOverflowTiers(t)
	l := *m.layout
	a := int64(readWord(t, path, l.TiersOff)) - 1            // segment 0's overflow tier
	b := int64(readWord(t, path, l.TiersOff+l.TierSize)) - 1 // segment 1's
	if a < l.Segments || b < l.Segments {
		t.Fatalf("want an overflow tier in each segment: links %d and %d", a+1, b+1)
	}
	damageWord(t, m, path, l.TiersOff, 48)
	writeWord(t, path, l.TiersOff+l.TierSize, uint64(a)+1)
	m = openOrFail(t, path)
	rep, err := m.Repair()
	if err != nil {
		t.Fatal(err)
	}
	if relinked := relinkedIn(rep); relinked < 2 && m.layout.Stamps {
		t.Errorf("Repair = %+v; want both tiers relinked", rep.Rebuilt)
	}
	keptAndClean(t, m, numberedKeys(keys), rep)
}
