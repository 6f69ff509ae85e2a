//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// fastLedgerTable is a one-segment table with a fast ledger and n keys
// put through the general path, and the model of what it holds.
func fastLedgerTable(t *testing.T, p Params, n int) (*Table, *Segment, map[string][]byte) {
	t.Helper()
	tb, _ := newTable(t, p)
	s := tb.Segment(0)
	model := map[string][]byte{}
	for i := range n {
		k, v := fmt.Appendf(nil, "key%04d", i), bytes.Repeat([]byte{'o'}, 30+i%10)
		if _, err := s.PutGeneral(hashOf(k), k, v, 0, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	fast := new(uint64)
	tb.SetFastLedgers(func(int) *uint64 { return fast }, 0)
	return tb, s, model
}

// TestFastLedgerPathInsertsAnAbsentKey: a key absent from a segment of one
// tier is inserted by TryOverwriteFastLedger itself, counted as a Put and
// an entry, and every key reads back.
func TestFastLedgerPathInsertsAnAbsentKey(t *testing.T) {
	tb, s, model := fastLedgerTable(t, Params{Entries: 256, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Segments: 1}, 20)
	before := s.Len()
	inserted := 0
	for i := 20; i < 60; i++ {
		k, v := fmt.Appendf(nil, "key%04d", i), bytes.Repeat([]byte{'n'}, 30+i%10)
		if done, added := s.TryOverwriteFastLedger(hashOf(k), k, v); done {
			if !added {
				t.Fatalf("the fast path stored absent key %s but did not say it inserted it", k)
			}
			inserted++
		} else if _, err := s.PutGeneral(hashOf(k), k, v, 0, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	if inserted != 40 {
		t.Fatalf("the fast path inserted %d of 40 absent keys into a tier with room; want all", inserted)
	}
	if got := s.Len(); got != before+40 {
		t.Fatalf("segment holds %d entries, want %d", got, before+40)
	}
	checkTable(t, tb, model)
	checkClean(t, tb)
}

// TestFastLedgerPathLeavesInsertsBeyondOneTierToTheGeneralPath: once a
// segment has an overflow tier, an empty slot in the first tier does not
// prove a key absent, so the fast path inserts nothing and the general
// path stores the key once.
func TestFastLedgerPathLeavesInsertsBeyondOneTierToTheGeneralPath(t *testing.T) {
	tb, s, model := fastLedgerTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 4, Segments: 1}, 0)
	first := tb.tier(0)
	for i := 0; first.next() == 0; i++ {
		k, v := fmt.Appendf(nil, "fill%05d", i), bytes.Repeat([]byte{'f'}, 35)
		if _, err := s.PutGeneral(hashOf(k), k, v, 0, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	for i := range 50 {
		k, v := fmt.Appendf(nil, "late%04d", i), []byte("v")
		if done, _ := s.TryOverwriteFastLedger(hashOf(k), k, v); done {
			t.Fatalf("the fast path inserted %s into a segment of two tiers", k)
		}
		if _, err := s.PutGeneral(hashOf(k), k, v, 0, Replace); err != nil {
			t.Fatal(err)
		}
		model[string(k)] = v
	}
	checkTable(t, tb, model)
	checkClean(t, tb)
}

// TestFastLedgerInsertDiesAtEveryStep: a writer dies at each step of an
// insert on the fast path (the file as it was at that step, put back
// after the Put has run on). Recovery must leave the new key absent or
// whole with its value, every other key as it was, and no chunk marked
// used that no entry holds.
func TestFastLedgerInsertDiesAtEveryStep(t *testing.T) {
	for _, home := range []bool{true, false} {
		t.Run(fmt.Sprintf("home=%v", home), func(t *testing.T) { fastInsertDiesAtEveryStep(t, home) })
	}
}

// fastInsertDiesAtEveryStep is TestFastLedgerInsertDiesAtEveryStep for a
// key whose home run is free (home), or one whose home runs are both
// taken, so that the insert takes the first free run.
func fastInsertDiesAtEveryStep(t *testing.T, home bool) {
	p := Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 40, MaxBloatFactor: 1, Segments: 1}
	v := bytes.Repeat([]byte{'n'}, 37)
	var k []byte
	{
		tb, s, _ := fastLedgerTable(t, p, 20)
		first := tb.tier(0)
		for i := 0; k == nil; i++ {
			c := fmt.Appendf(nil, "new-key%d", i)
			tag := uint32(hashOf(c) >> tb.layout.tagShift)
			if _, free := s.freeHomeRun(&first, tag, tb.chunksFor(len(c), len(v))); free == home {
				k = c
			}
		}
	}
	deaths := 0
	for step := 1; ; step++ {
		tb, s, model := fastLedgerTable(t, p, 20)
		all := tb.region.Bytes(0, tb.region.Len())
		var snapshot []byte
		n := 0
		testhook.OnStep = func() {
			if n++; n == step {
				snapshot = bytes.Clone(all)
			}
		}
		s.lock.SetLedger(new(uint64)) // the process that dies
		ok, _ := s.TryOverwriteFastLedger(hashOf(k), k, v)
		testhook.OnStep = nil
		if !ok {
			t.Fatal("TryOverwriteFastLedger declined the insert: the test lost its point")
		}
		if snapshot == nil { // the Put ended before this step
			t.Logf("%d steps; %d deaths", step-1, deaths)
			if deaths < 4 {
				t.Fatal("the test lost its point")
			}
			return
		}
		deaths++
		copy(all, snapshot)           // the file as the death left it
		s.lock.SetLedger(new(uint64)) // the survivor's
		if _, err := s.Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second)); err != nil {
			t.Fatalf("step %d: Recover: %v", step, err)
		}
		got, found, err := s.get(hashOf(k), k, nil)
		if err != nil || (found && !bytes.Equal(got, v)) {
			t.Fatalf("step %d: after recovery %s = %q, found %v, %v; want it absent or %q", step, k, got, found, err, v)
		}
		if found {
			model[string(k)] = v
		}
		checkTable(t, tb, model)
		checkClean(t, tb)
	}
}
