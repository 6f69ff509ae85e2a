//go:build linux

package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/rwulock"
)

// checkProblems is what Check says of segment s.
func checkProblems(s *Segment) []string {
	var problems []string
	s.Check(func(err error) { problems = append(problems, err.Error()) })
	return problems
}

// checkClean fails the test if Check finds anything in the table.
func checkClean(t *testing.T, tb *Table) {
	t.Helper()
	for i := range tb.Segments() {
		tb.Segment(int(i)).Check(func(err error) { t.Errorf("check: %v", err) })
	}
}

// TestRecoverRebuildsAfterDeadWriter: a "dead" writer left segment 0 write
// locked with its sequence odd, one value torn (bytes changed after the
// checksum), a second copy of a key that was moving (not indexed), a run of
// chunks marked used with nothing in it, and a slot removed without its
// entry freed. Check must report each; Recover must release the lock,
// drop the torn entry and free the stale copy (which no slot names, so it
// cannot come back), keep everything else, and leave
// a table Check finds clean and a model test can continue on.
func TestRecoverRebuildsAfterDeadWriter(t *testing.T) {
	p := Params{Entries: 400, AverageKeySize: 12, AverageValueSize: 20, MaxBloatFactor: 8, Segments: 2}
	tb, _ := newTable(t, p)
	model := map[string][]byte{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1500 {
		k := []byte(fmt.Sprintf("key-%05d", i))
		v := bytes.Repeat([]byte{byte('a' + i%26)}, 5+rng.IntN(40))
		if _, err := tb.For(hashOf(k)).put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	checkClean(t, tb)
	s := tb.Segment(0)
	if s.Tiers() < 2 {
		t.Fatalf("want a chained segment, it has %d tiers", s.Tiers())
	}
	var torn, moved string
	for k := range model {
		if hashOf([]byte(k))&1 != 0 {
			continue
		}
		if torn == "" {
			torn = k
		} else if moved == "" {
			moved = k
			break
		}
	}
	// The dead writer: write lock, odd sequence.
	if err := s.lock.WriteLock(time.Second); err != nil {
		t.Fatal(err)
	}
	atomic.AddUint64(s.seq, 1)
	loc, found, ok := s.find(hashOf([]byte(torn)), []byte(torn))
	if !found || !ok {
		t.Fatal("torn key not found")
	}
	v := tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)
	v[0] ^= 0xff // torn in-place rewrite: the checksum no longer matches
	// A move cut short: a stale copy of "moved" with another value, not indexed.
	mloc, _, _ := s.find(hashOf([]byte(moved)), []byte(moved))
	mt := mloc.tier
	stale := []byte("stale value")
	nch := tb.chunksFor(len(moved), len(stale))
	c := mt.alloc(nch, tb.layout.Chunks)
	if c < 0 {
		t.Fatal("no room for the stale copy")
	}
	h := tb.entryHeader(nch, []byte(moved), stale)
	tb.writeEntry(&mt, c, &h, []byte(moved), stale)
	// Chunks marked used by an allocation whose entry was never written.
	leak := mt.alloc(2, tb.layout.Chunks)
	clear(mt.space[leak*tb.layout.ChunkSize : (leak+2)*tb.layout.ChunkSize])
	problems := checkProblems(s)
	for _, want := range []string{"lock word not free", "sequence is odd", "fails its checksum", "no entry occupies"} {
		if !containsAny(problems, want) {
			t.Errorf("Check missed %q; it said %q", want, problems)
		}
	}
	rep, err := s.Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The torn entry's slot is dropped; the stale copy and the leaked run
	// are freed, unnamed.
	if !rep.Orphans.Write || !rep.Rebuilt || rep.Doubled != 0 || rep.Dropped != 1 || rep.Freed < nch+2 {
		t.Fatalf("recovery report %+v", rep)
	}
	delete(model, torn)
	checkClean(t, tb)
	checkTable(t, tb, model)
	// And the table keeps working.
	for k, v := range model {
		got, found, err := tb.For(hashOf([]byte(k))).get(hashOf([]byte(k)), []byte(k), nil)
		if err != nil || !found || !bytes.Equal(got, v) {
			t.Fatalf("%s: %q %v %v, want %q", k, got, found, err, v)
		}
	}
	if _, err := s.put(hashOf([]byte(torn)), []byte(torn), []byte("back"), Replace); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverReleasesOrphanReaders: orphaned read locks and a waiting
// writer's registered wait are released without a rebuild.
func TestRecoverReleasesOrphanReaders(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 1000, AverageKeySize: 8, AverageValueSize: 8, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	_ = s.lock.ReadLock(0)
	_ = s.lock.ReadLock(0)
	_ = s.lock.RegisterWait()
	rep, err := s.Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Orphans.Reads != 2 || rep.Orphans.Waits != 1 || rep.Rebuilt {
		t.Fatalf("report %+v", rep)
	}
	if st := s.lock.State(); !st.Free() {
		t.Fatalf("lock after recovery: %v", st)
	}
	// A live holder's share is left alone.
	live := new(uint64)
	s.lock.SetLedger(live)
	_ = s.lock.ReadLock(0)
	rep, err = s.Recover(func(dst []uint64) []uint64 { return append(dst, atomic.LoadUint64(live)) }, time.Now().Add(time.Second))
	if err != nil || !rep.Orphans.None() {
		t.Fatalf("recovery with a live reader: %+v, %v", rep, err)
	}
	if s.lock.State().Readers != 1 {
		t.Fatalf("live reader's lock removed: %v", s.lock.State())
	}
}

func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if bytes.Contains([]byte(s), []byte(sub)) {
			return true
		}
	}
	return false
}

// TestRepairSalvagesUnnamedEntries: damage that empties a slot leaves its
// sound entry under used chunks that no slot names. Recovery from a death
// frees such chunks (see rebuild); Repair, for damage, names the entry
// again, as long as no slot names its key.
func TestRepairSalvagesUnnamedEntries(t *testing.T) {
	_, s, model := fragmentedTier(t)
	var lost string
	for k := range model {
		lost = k
		break
	}
	loc, found, _ := s.find(hashOf([]byte(lost)), []byte(lost))
	if !found {
		t.Fatal("key not found")
	}
	loc.tier.slots[loc.pos] = 0 // a damaged page: the slot is gone, probe runs broken
	if rep := checkThenRepair(t, s, model, "no entry occupies"); rep.Salvaged != 1 {
		t.Fatalf("Repair salvaged %d entries, want the unnamed one: %+v", rep.Salvaged, rep)
	}
	// A sound segment is not rebuilt.
	if _, rebuilt, err := s.Repair(); err != nil || rebuilt {
		t.Fatalf("Repair of a sound segment: rebuilt %v, %v", rebuilt, err)
	}
}

// TestRecoverUpgradeTimeoutKeepsTheRebuild: a process dies inside an
// insert, under the update lock, with the entry's slot placed and not yet
// counted. The recovery pass takes its update lock over, but a live reader
// stays inside past the pass's deadline, so the upgrade to write fails.
// The pass used to release the lock then: the next pass found no orphan,
// and the counts stayed wrong for good. The
// lock now goes back to the dead, and the next pass rebuilds.
func TestRecoverUpgradeTimeoutKeepsTheRebuild(t *testing.T) {
	tb, _ := newTable(t, Params{Entries: 200, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	for i := range 20 {
		k := []byte(fmt.Sprintf("key-%03d", i))
		if _, err := s.put(hashOf(k), k, []byte("value"), Replace); err != nil {
			t.Fatal(err)
		}
	}
	dead := rwulock.At(s.lock.Word()) // no ledger: nobody alive accounts for it
	if err := dead.UpdateLock(time.Second); err != nil {
		t.Fatal(err)
	}
	k, v := []byte("half-inserted"), []byte("value")
	h := hashOf(k)
	t0 := tb.tier(0)
	nch := tb.chunksFor(len(k), len(v))
	c := t0.alloc(nch, tb.layout.Chunks)
	hd := tb.entryHeader(nch, k, v)
	tb.writeEntry(&t0, c, &hd, k, v)
	if !tb.placeSlot(&t0, uint32(h>>tb.layout.tagShift), c) {
		t.Fatal("placeSlot")
	}
	// ... and died here, before the counts.
	var ledger uint64
	reader := rwulock.At(s.lock.Word()) // a live reader, inside for a while
	reader.SetLedger(&ledger)
	if err := reader.ReadLock(time.Second); err != nil {
		t.Fatal(err)
	}
	live := func(dst []uint64) []uint64 { return append(dst, atomic.LoadUint64(&ledger)) }
	if _, err := s.Recover(live, time.Now().Add(100*time.Millisecond)); !errors.Is(err, rwulock.ErrTimeout) {
		t.Fatalf("recovery with the reader inside: %v, want a timeout", err)
	}
	if err := reader.ReadUnlock(); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Recover(live, time.Now().Add(time.Second))
	if err != nil || !rep.Rebuilt || !rep.Orphans.Update {
		t.Fatalf("the next pass: %+v, %v; want the dead update lock found again and the segment rebuilt", rep, err)
	}
	if p := checkProblems(s); len(p) != 0 {
		t.Errorf("after the rebuild Check reports %q", p)
	}
	if s.Len() != 21 {
		t.Errorf("Len %d after the rebuild, want 21 (the half-inserted entry counted)", s.Len())
	}
}
