//go:build linux

package segment

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// These tests damage a segment's metadata in ways no writer leaves it (see
// crash_test.go for what writers cut short leave) and check that Check
// sees it and Repair mends it without losing a sound entry.

// checkThenRepair requires Check to report a problem of segment s that
// contains want, then Repair to rebuild the segment dropping no entry,
// after which the table checks clean and holds exactly model. It returns
// what the repair did.
func checkThenRepair(t *testing.T, s *Segment, model map[string][]byte, want string) Recovered {
	t.Helper()
	if problems := checkProblems(s); !containsAny(problems, want) {
		t.Fatalf("Check missed %q: %q", want, problems)
	}
	rep, rebuilt, err := s.Repair()
	if err != nil || !rebuilt || rep.Dropped != 0 {
		t.Fatalf("Repair: %+v, rebuilt %v, %v", rep, rebuilt, err)
	}
	checkClean(t, s.tb)
	checkTable(t, s.tb, model)
	return rep
}

// TestRebuildDeleteCutShortAcrossTheWrap: a delete cut short in its
// backward shift where the probe run wraps past the end of the slot table:
// the rebuild's walk, which starts after an empty slot, keeps the one
// copy of each kept slot. (Found by a review: a walk from slot 0 removed a
// kept entry's only slot.)
func TestRebuildDeleteCutShortAcrossTheWrap(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 120, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	mask := int64(tb.layout.slotMask)
	var keys [][]byte
	for i := 0; len(keys) < 3; i++ {
		if k := fmt.Appendf(nil, "w-%d", i); int64(uint32(hashOf(k)))&mask == mask {
			keys = append(keys, k) // homes in the last slot: the run wraps
		}
	}
	model := map[string][]byte{}
	for _, k := range keys {
		if _, err := s.put(hashOf(k), k, []byte("v-"+string(k)), Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = []byte("v-" + string(k))
	}
	tv := tb.tier(0)
	if tv.slots[mask] == 0 || tv.slots[0] == 0 || tv.slots[1] == 0 || tv.slots[2] != 0 {
		t.Fatal("want a probe run in the last slot, 0 and 1")
	}
	tv.slots[mask] = tv.slots[0] // the dying Delete of keys[0]: one shift step done
	delete(model, string(keys[0]))
	w, _ := s.beginUpdate("test")
	_ = w.modify("test")
	var rep Recovered
	s.rebuild(&rep, false)
	w.end()
	checkClean(t, tb)
	checkTable(t, tb, model)
}

// TestUnreachableSlotRepaired: a slot a lookup cannot reach (an empty slot
// between it and its home) hides its key; Check says so and Repair names
// the entry where lookups find it.
func TestUnreachableSlotRepaired(t *testing.T) {
	tb, s, model := fragmentedTier(t)
	tv := tb.tier(0)
	mask := int64(tb.layout.slotMask)
	var key string
	for k := range model {
		loc, _, _ := s.find(hashOf([]byte(k)), []byte(k))
		if int64(slotTag(loc.slot))&mask != loc.pos {
			continue // want it at its home
		}
		if next, after := (loc.pos+1)&mask, (loc.pos+2)&mask; tv.slots[next] == 0 && tv.slots[after] == 0 {
			tv.slots[after], tv.slots[loc.pos] = tv.slots[loc.pos], 0
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no slot to move")
	}
	problems := checkProblems(s)
	if !containsAny(problems, "cannot reach") {
		t.Fatalf("Check missed the unreachable slot: %q", problems)
	}
	if _, rebuilt, err := s.Repair(); err != nil || !rebuilt {
		t.Fatalf("Repair: rebuilt %v, %v", rebuilt, err)
	}
	checkClean(t, tb)
	checkTable(t, tb, model)
}

// TestFullSlotTableRepaired: damage that fills every slot with copies of
// one sound slot (and overwrites a live slot with it). Rebuild must not
// keep the copies, and Repair must return (it once looped in placeSlot
// over the full table, holding the write lock).
func TestFullSlotTableRepaired(t *testing.T) {
	for _, overwriteOne := range []bool{false, true} {
		tb, s, model := fragmentedTier(t)
		tv := tb.tier(0)
		a := firstSlot(tv)
		overwritten := false
		for pos, sl := range tv.slots {
			if sl == 0 || overwriteOne && !overwritten && sl != a {
				overwritten = overwritten || sl != 0
				tv.slots[pos] = a
			}
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := s.Repair()
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("overwriteOne=%v: Repair did not return", overwriteOne)
		}
		checkClean(t, tb)
		if !overwriteOne {
			checkTable(t, tb, model) // the slot table lost nothing: every entry comes back
		}
	}
}

// firstSlot is the first slot of tv in use.
func firstSlot(tv tier) uint64 {
	for _, sl := range tv.slots {
		if sl != 0 {
			return sl
		}
	}
	return 0
}

// TestInsertIntoFullSlotTable: damage that fills every slot while the
// tier's entry count still leaves room makes an insert fail with
// ErrCorrupt, where it once probed for an empty slot forever.
func TestInsertIntoFullSlotTable(t *testing.T) {
	tb, s, _ := fragmentedTier(t)
	tv := tb.tier(0)
	fillSlotTable(tv)
	done := make(chan error, 1)
	go func() {
		k := []byte("a new key")
		_, err := s.put(hashOf(k), k, []byte("v"), Replace)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("insert into a full slot table: %v, want ErrCorrupt", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("insert into a full slot table did not return")
	}
}

// TestDeleteInFullSlotTable: with the same damage, a Delete of a present
// key spun for good in removeSlot's backward shift, which ends only at an
// empty slot, holding the segment's write lock. It now reports ErrCorrupt before it changes anything, and the
// segment stays usable.
func TestDeleteInFullSlotTable(t *testing.T) {
	tb, s, _ := fragmentedTier(t)
	tv := tb.tier(0)
	a := fillSlotTable(tv)
	klen, _, _, _ := tb.entryAt(&tv, slotChunk(a))
	k := append([]byte(nil), tb.entryKey(&tv, slotChunk(a), klen)...)
	done := make(chan error, 1)
	go func() {
		_, err := s.Delete(hashOf(k), k)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("delete in a full slot table: %v, want ErrCorrupt", err)
		}
	case <-time.After(10 * time.Second):
		atomic.StoreUint64(&tv.slots[0], 0) // lets the shift end before the file goes
		<-done
		t.Fatal("delete in a full slot table did not return")
	}
	if _, found, err := s.get(hashOf(k), k, nil); err != nil || !found {
		t.Fatalf("the key after the refused delete: found %v, %v", found, err)
	}
}

// TestDamagedPoolCounterTakesNoOwnedTier: a pool counter damaged back to
// zero hands out again a tier another segment owns; the writer that gets
// it fails with ErrCorrupt instead of taking the tier from under that
// segment's entries, which stay readable.
func TestDamagedPoolCounterTakesNoOwnedTier(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 32, MaxBloatFactor: 8, Segments: 2})
	model := map[string][]byte{}
	var full [2]bool
	for i := 0; !full[0] || !full[1]; i++ {
		k := fmt.Appendf(nil, "key-%05d", i)
		h := hashOf(k)
		seg := h & 1
		if full[seg] {
			continue
		}
		if tb.ExtraTiersInUse() == 1 && seg == 0 {
			continue // segment 0 has its overflow tier; now for segment 1
		}
		before := tb.Segment(int(seg)).Tiers()
		if _, err := tb.Segment(int(seg)).put(h, k, bytes.Repeat([]byte{'v'}, 32), Replace); err != nil {
			if seg == 1 && errors.Is(err, ErrCorrupt) {
				full[1] = true
				continue
			}
			t.Fatalf("put %s into segment %d: %v", k, seg, err)
		}
		model[string(k)] = bytes.Repeat([]byte{'v'}, 32)
		if tb.Segment(int(seg)).Tiers() > before {
			if seg == 1 {
				t.Fatal("segment 1 linked a tier: the damaged counter went unnoticed")
			}
			full[0] = true
			*tb.extraTiers = 0 // the damage: tier 2, segment 0's, looks free again
		}
		if i > 100000 {
			t.Fatal("no segment needed an overflow tier")
		}
	}
	for k, v := range model {
		got, found, err := tb.Get(hashOf([]byte(k)), []byte(k), nil)
		if err != nil || !found || !bytes.Equal(got, v) {
			t.Fatalf("%s after the refused tier: %q %v %v", k, got, found, err)
		}
	}
}

// TestOverlappingRunsTrimmed: an entry whose run (by damage: a writer that
// trusted a damaged bitmap) reaches over the next entry is trimmed to its
// bytes, and both entries are kept.
func TestOverlappingRunsTrimmed(t *testing.T) {
	tb, s, model := fragmentedTier(t)
	tv := tb.tier(0)
	type at struct{ c, nch int64 }
	var runs []at
	for _, sl := range tv.slots {
		if sl != 0 {
			_, _, nch, _ := tb.entryAt(&tv, slotChunk(sl))
			runs = append(runs, at{slotChunk(sl), nch})
		}
	}
	// An entry followed, past a gap, by another: stretch the first over it.
	slices.SortFunc(runs, func(a, b at) int { return cmp.Compare(a.c, b.c) })
	var first, second at
	for i := 0; i+1 < len(runs) && second.nch == 0; i++ {
		if runs[i+1].c > runs[i].c+runs[i].nch {
			first, second = runs[i], runs[i+1]
		}
	}
	if second.nch == 0 {
		t.Fatal("no two entries with a gap between")
	}
	tb.setRunLength(&tv, first.c, second.c+1-first.c)
	checkThenRepair(t, s, model, "belongs to two entries")
}

// TestForgedMoveJournalIgnored: journal words that only look like a move
// cut short (the entry it names at its source, but other entries where it
// would slide) are cleared, and nothing is copied over those entries.
func TestForgedMoveJournalIgnored(t *testing.T) {
	tb, s, model := fragmentedTier(t)
	tv := tb.tier(0)
	var last int64
	var size int64
	for _, sl := range tv.slots {
		if c := slotChunk(sl); sl != 0 && c > last {
			klen, vlen, _, _ := tb.entryAt(&tv, c)
			last, size = c, entryHeaderSize+klen+vlen
		}
	}
	tv.header[thMoveDone/8] = uint64(size) << 32
	tv.header[thMove/8] = moveJournal(last, 0) // slide the last entry to the front, over the others
	problems := checkProblems(s)
	if !containsAny(problems, "move was cut short") {
		t.Fatalf("Check missed the journal: %q", problems)
	}
	if _, _, err := s.Repair(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, tb)
	checkTable(t, tb, model)
}

// TestDamagedOwnerWordCutsAndReports: in a file without stamps, an
// overflow tier whose owner word alone is damaged is not inferred to be
// the segment's: Check names it and says how to save what the cut loses
// (the links still reach it, as a dump follows them), and Repair cuts the
// chain there, giving up that tier and the ones after it, and reports
// every entry they held as dropped: the keys gone are exactly as many as
// the drops, all of the damaged segment, and the table checks clean.
func TestDamagedOwnerWordCutsAndReports(t *testing.T) {
	tb := newUnstampedTable(t, Params{Entries: 400, AverageKeySize: 12, AverageValueSize: 20, MaxBloatFactor: 8, Segments: 2})
	model := map[string][]byte{}
	for i := range 1500 {
		k := fmt.Appendf(nil, "key-%05d", i)
		v := fmt.Appendf(nil, "value-%d", i)
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	s := tb.Segment(0)
	first := tb.tier(0)
	if first.next() == 0 {
		t.Fatal("want a chained segment")
	}
	overflow := tb.tier(int64(first.next() - 1))
	if overflow.next() == 0 {
		t.Fatal("want a tier after the damaged one")
	}
	overflow.header[thOwner/8] = 0
	if problems := checkProblems(s); !containsAny(problems, "overflow tier owned by") || !containsAny(problems, "mapctl dump --salvage") {
		t.Fatalf("Check: %q", problems)
	}
	before := readAllEntries(t, tb) // what a dump reads before Repair
	for k := range model {
		if _, ok := before[k]; !ok {
			t.Fatalf("before Repair, %q does not read", k)
		}
	}
	rep, rebuilt, err := s.Repair()
	if err != nil || !rebuilt || rep.Dropped == 0 {
		t.Fatalf("Repair: %+v, rebuilt %v, %v", rep, rebuilt, err)
	}
	var global []string
	tb.CheckGlobal(func(err error) { global = append(global, err.Error()) })
	if !containsAny(global, "no chain reaches it") {
		t.Fatalf("CheckGlobal after the rebuild, the damaged tier cut off: %q", global)
	}
	dropped := map[int64]int64{0: rep.Dropped}
	if n := tb.GiveUpUnverified(func(seg int64) { dropped[seg]++ }); n != 1 {
		t.Fatalf("GiveUpUnverified gave up %d tiers, want the damaged one", n)
	}
	checkClean(t, tb)
	tb.CheckGlobal(func(err error) { t.Errorf("CheckGlobal: %v", err) })
	after := readAllEntries(t, tb)
	var lost int64
	for k := range model {
		if _, ok := after[k]; !ok {
			if seg := tb.segmentOf(hashOf([]byte(k))); seg != 0 {
				t.Errorf("%q of segment %d lost", k, seg)
			}
			lost++
		}
	}
	if lost != dropped[0] || len(dropped) != 1 {
		t.Errorf("%d keys lost, drops reported: %v", lost, dropped)
	}
}

// fillSlotTable is damage that fills every empty slot of tv with a copy of
// its first, which it returns, while the tier's entry count leaves room.
func fillSlotTable(tv tier) uint64 {
	a := firstSlot(tv)
	for pos, sl := range tv.slots {
		if sl == 0 {
			tv.slots[pos] = a
		}
	}
	return a
}
