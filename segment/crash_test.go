//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// died is the panic of a simulated death (see dieAt).
type died struct{}

// dieAt runs f, which must change the file only through steps that call
// testStep, and "kills" it at the step-th of them: it stops there, leaving
// the file as a process killed at that instruction would. It reports
// whether f ran to its end before that step.
func dieAt(step int, f func()) (finished bool) {
	n := 0
	testhook.OnStep = func() {
		if n++; n == step {
			panic(died{})
		}
	}
	defer func() {
		testhook.OnStep = nil
		if r := recover(); r != nil {
			if _, ok := r.(died); !ok {
				panic(r)
			}
		}
	}()
	f()
	return true
}

// fragmentedTier fills segment 0 (one segment) so that its first tier has
// entries of varied sizes with free gaps between them, some of them runs
// longer than their entry (values that shrank in place), and returns the
// table, the segment and the model of what it holds.
func fragmentedTier(t *testing.T) (*Table, *Segment, map[string][]byte) {
	t.Helper()
	tb, _ := newTable(t, Params{Entries: 120, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Segments: 1})
	s := tb.Segment(0)
	rng := rand.New(rand.NewPCG(7, 8))
	model := map[string][]byte{}
	for i := range 90 {
		k := fmt.Appendf(nil, "key-%03d", i)
		v := bytes.Repeat([]byte{byte('a' + i%26)}, 1+rng.IntN(120))
		if _, err := s.put(hashOf(k), k, v, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	for i := 0; i < 90; i += 3 {
		k := fmt.Appendf(nil, "key-%03d", i)
		if _, err := s.Delete(hashOf(k), k); err != nil {
			t.Fatal(err)
		}
		delete(model, string(k))
	}
	for i := 1; i < 90; i += 5 { // shrink in place: runs longer than their entry
		k := fmt.Appendf(nil, "key-%03d", i)
		if _, err := s.put(hashOf(k), k, []byte("s"), Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = []byte("s")
	}
	checkClean(t, tb)
	return tb, s, model
}

// fragmentedTierWriting is fragmentedTier with segment 0's write lock
// taken and its sequence odd, as a writer about to change it holds them.
func fragmentedTierWriting(t *testing.T) (*Table, *Segment, map[string][]byte, writer) {
	t.Helper()
	tb, s, model := fragmentedTier(t)
	w, err := s.beginUpdate("test")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.modify("test"); err != nil {
		t.Fatal(err)
	}
	return tb, s, model, w
}

// TestCompactionDiesAtEveryStep kills a compaction at each of its steps in
// turn, recovers as Recover does for a dead writer's segment, and checks
// that every entry is there with its value: compaction changes no value, so
// a death in it may lose nothing. (Compacting in slot order after clearing
// the bitmap, as before, lost hundreds of entries to one kill.)
func TestCompactionDiesAtEveryStep(t *testing.T) {
	journalled := 0
	for step := 1; ; step++ {
		tb, s, model, w := fragmentedTierWriting(t)
		tv := tb.tier(0)
		var compactErr error
		finished := dieAt(step, func() { compactErr = s.compact(&tv) })
		if compactErr != nil {
			t.Fatal(compactErr)
		}
		if !finished {
			if tv.header[thMove/8] != 0 {
				journalled++
			}
			var rep Recovered
			s.finishMoves(nil)
			s.rebuild(&rep, false)
			if rep.Dropped+rep.Doubled != 0 {
				t.Errorf("step %d: recovery dropped %d entries and %d copies", step, rep.Dropped, rep.Doubled)
			}
		}
		w.end()
		checkClean(t, tb)
		checkTable(t, tb, model)
		if finished {
			t.Logf("%d steps, %d of the deaths in the middle of a journalled move", step-1, journalled)
			if step < 20 || journalled == 0 {
				t.Fatalf("the compaction took %d steps, %d journalled: the test lost its point", step-1, journalled)
			}
			return
		}
	}
}

// TestRebuildDiesAtEveryStep kills a recovery's rebuild at each of its
// steps and runs another: the second finds everything the first would
// have kept. (The rebuild used to empty every slot before naming the kept
// entries again, so a recoverer killed in between lost the segment.)
func TestRebuildDiesAtEveryStep(t *testing.T) {
	for step := 1; ; step++ {
		tb, s, model, w := fragmentedTierWriting(t)
		// A dead writer's leftovers, for the rebuild to mend: a torn
		// entry, and a delete cut short in its backward shift (a slot
		// copied into the hole, not yet cleared where it was).
		var torn string
		for k := range model {
			torn = k
			break
		}
		loc, found, ok := s.find(hashOf([]byte(torn)), []byte(torn))
		if !found || !ok {
			t.Fatal("torn key not found")
		}
		tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen)[0] ^= 0xff
		delete(model, torn)
		duplicated := false
		mask := int64(tb.layout.slotMask)
		for pos := range loc.tier.slots {
			next := (int64(pos) + 1) & mask
			if sl := loc.tier.slots[pos]; sl != 0 && int64(pos) != loc.pos && loc.tier.slots[next] == 0 && int64(slotTag(sl))&mask == int64(pos) {
				loc.tier.slots[next] = sl // a slot may sit later than its home
				duplicated = true
				break
			}
		}
		if !duplicated {
			t.Fatal("no slot to duplicate")
		}
		var rep Recovered
		finished := dieAt(step, func() { s.rebuild(&rep, false) })
		if !finished {
			rep = Recovered{}
			s.rebuild(&rep, false)
		}
		w.end()
		checkClean(t, tb)
		checkTable(t, tb, model)
		if finished {
			t.Logf("%d steps", step-1)
			if step < 3 {
				t.Fatalf("the rebuild took %d steps: the test lost its point", step-1)
			}
			return
		}
	}
}

// TestDeletedStaysDeleted: an insert that died after taking a run and
// before writing it leaves a deleted entry's bytes, checksum and all,
// under used chunks. Recovery must not bring the deleted key back.
func TestDeletedStaysDeleted(t *testing.T) {
	tb, s, model := fragmentedTier(t)
	victim := []byte("victim!!")
	if _, err := s.put(hashOf(victim), victim, bytes.Repeat([]byte("V"), 60), Replace); err != nil {
		t.Fatal(err)
	}
	loc, found, _ := s.find(hashOf(victim), victim)
	if !found {
		t.Fatal("victim not found")
	}
	if _, err := s.Delete(hashOf(victim), victim); err != nil {
		t.Fatal(err)
	}
	// The dying insert: update lock, the run taken, nothing written.
	if err := s.lock.UpdateLock(time.Second); err != nil {
		t.Fatal(err)
	}
	tv := tb.tier(loc.tier.index)
	tv.take(loc.chunk, loc.nch)
	rep, err := s.Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Rebuilt || rep.Freed < loc.nch {
		t.Fatalf("recovery %+v", rep)
	}
	if _, found, _ := s.get(hashOf(victim), victim, nil); found {
		t.Fatal("a deleted key came back")
	}
	checkClean(t, tb)
	checkTable(t, tb, model)
}
