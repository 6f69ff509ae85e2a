//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sharedmap/sharedmap/internal/testhook"
)

// opsCases are the geometries the tests of Clear, Touch and DeleteFunc run
// over: one segment, overflow tiers linked, with and without undo records,
// plain and cache.
var opsCases = []struct {
	name string
	p    Params
}{
	{"plain", Params{Entries: 48, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1}},
	{"plain-noundo", Params{Entries: 48, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1, NoUndo: true}},
	{"cache", Params{Entries: 48, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1, Cache: true}},
}

// fillSegment puts n keys into segment 0 of tb (a one-segment table), some
// with values too large for the undo record, so that overflow tiers are
// linked; in a cache map every third expires at 50, the others at 1e9
// (the tests' clock reads 100).
func fillSegment(t *testing.T, tb *Table, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Appendf(nil, "k%03d", i)
		v := bytes.Repeat([]byte{byte('a' + i%26)}, 1+(i*37)%90)
		if i%11 == 0 {
			v = bytes.Repeat(v, 6) // past the undo record's room
		}
		exp := int64(1e9)
		if i%3 == 0 {
			exp = 50
		}
		if _, err := tb.Segment(0).PutExpiring(hashOf(k), k, v, exp, Replace); err != nil {
			t.Fatal(err)
		}
	}
}

// wantTiers fails the test if segment 0 of tb has no overflow tier.
func wantTiers(t *testing.T, tb *Table) {
	t.Helper()
	if tb.Segment(0).Tiers() < 2 {
		t.Fatal("the segment has no overflow tier: the test wants some")
	}
}

// dieAtEveryStep runs op on tb (one segment) once for each testStep it
// passes, each time from the file as it was before, and stops the op at
// that step as a death there would leave the file; a survivor's Recover
// follows, and judge gets what the segment then holds. Every third death
// the recoverer dies too, at each of its own steps, and a second Recover
// must leave what judge accepts (told nested). It returns how many steps op passes.
func dieAtEveryStep(t *testing.T, tb *Table, op func() error, judge func(step int, nested bool, got map[string]string, rep Recovered)) int {
	t.Helper()
	all := tb.region.Bytes(0, tb.region.Len())
	base := bytes.Clone(all)
	recoverNow := func() Recovered {
		tb.Segment(0).lock.SetLedger(new(uint64)) // the survivor's
		rep, err := tb.Segment(0).Recover(func(dst []uint64) []uint64 { return dst }, time.Now().Add(time.Second))
		if err != nil {
			t.Fatalf("Recover: %v", err)
		}
		return rep
	}
	check := func(what string) {
		tb.Segment(0).Check(func(err error) { t.Errorf("%s: check: %v", what, err) })
		if t.Failed() {
			t.FailNow()
		}
	}
	for step := 1; ; step++ {
		copy(all, base)
		var snapshot []byte
		n := 0
		testhook.OnStep = func() {
			if n++; n == step {
				snapshot = bytes.Clone(all)
			}
		}
		tb.Segment(0).lock.SetLedger(new(uint64)) // the process that dies
		err := op()
		testhook.OnStep = nil
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if snapshot == nil {
			check("after the op")
			return step - 1
		}
		if step%3 == 0 {
			for r := 1; ; r++ {
				copy(all, snapshot)
				var snap2 []byte
				m := 0
				testhook.OnStep = func() {
					if m++; m == r {
						snap2 = bytes.Clone(all)
					}
				}
				recoverNow()
				testhook.OnStep = nil
				if snap2 == nil {
					break
				}
				copy(all, snap2)
				rep := recoverNow()
				judge(step, true, readAllEntries(t, tb), rep)
				check(fmt.Sprintf("step %d, recoverer died at %d", step, r))
			}
		}
		copy(all, snapshot)
		rep := recoverNow()
		judge(step, false, readAllEntries(t, tb), rep)
		check(fmt.Sprintf("step %d", step))
	}
}

// TestClearDiesAtEveryStep: a Clear killed at any of its steps leaves the
// segment empty once recovered (the clearing word makes recovery finish
// it), never with part of its entries, and consistent; a recoverer killed
// while finishing it leaves the next one to finish it. Without the word,
// rebuild keeps the entries whose slots the Clear had not reached.
func TestClearDiesAtEveryStep(t *testing.T) {
	for _, c := range opsCases {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, c.p)
			tb.SetClock(func() int64 { return 100 })
			fillSegment(t, tb, 90)
			wantTiers(t, tb)
			s := tb.Segment(0)
			tiers, extra := s.Tiers(), tb.ExtraTiersInUse()
			if len(readAllEntries(t, tb)) == 0 {
				t.Fatal("nothing to clear")
			}
			finished := 0 // deaths after which recovery finished the Clear
			steps := dieAtEveryStep(t, tb, func() error { _, err := s.Clear(); return err }, func(step int, nested bool, got map[string]string, rep Recovered) {
				if len(got) != 0 || s.Len() != 0 {
					t.Fatalf("died at step %d: %d entries read, Len %d, after recovery %+v: a Clear cut short must finish", step, len(got), s.Len(), rep)
				}
				if rep.Cleared && !nested {
					finished++
				}
			})
			if steps < 4 || finished < steps-1 {
				t.Fatalf("Clear passed %d steps; recovery finished it after %d deaths (all but the last step's, after the clearing word is cleared, should)", steps, finished)
			}
			if len(readAllEntries(t, tb)) != 0 || s.Len() != 0 {
				t.Fatal("entries left after Clear")
			}
			if s.Tiers() != tiers || tb.ExtraTiersInUse() != extra {
				t.Fatalf("tiers %d (pool %d) after Clear, %d (%d) before: overflow tiers stay linked", s.Tiers(), tb.ExtraTiersInUse(), tiers, extra)
			}
			// The tiers kept serve the refill: no tier is taken from the pool.
			fillSegment(t, tb, 90)
			if tb.ExtraTiersInUse() != extra {
				t.Fatalf("refilling took tiers from the pool: %d, %d before", tb.ExtraTiersInUse(), extra)
			}
			s.Check(func(err error) { t.Error(err) })
			t.Logf("%d steps, %d tiers", steps, tiers)
		})
	}
}

// TestClearCounts: Clear reports the live entries it removed and counts
// them as deletes (a cache map's expired ones as expired), empties the
// counts of every tier, and a Clear of an empty segment changes nothing,
// not even the sequence.
func TestClearCounts(t *testing.T) {
	for _, c := range opsCases {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, c.p)
			tb.SetClock(func() int64 { return 100 })
			fillSegment(t, tb, 90)
			s := tb.Segment(0)
			live := int64(len(readAllEntries(t, tb)))
			before := s.Counters()
			removed, err := s.Clear()
			if err != nil {
				t.Fatal(err)
			}
			if removed != live {
				t.Fatalf("Clear removed %d live entries, %d were", removed, live)
			}
			after := s.Counters()
			if after.Deletes-before.Deletes != live {
				t.Fatalf("deletes counted %d, want %d", after.Deletes-before.Deletes, live)
			}
			if c.p.Cache && after.Expired-before.Expired != 90-live {
				t.Fatalf("expired counted %d, want %d", after.Expired-before.Expired, 90-live)
			}
			chain, err := s.chainTiers()
			if err != nil {
				t.Fatal(err)
			}
			for _, tv := range chain {
				if tv.entries() != 0 || tv.usedChunks() != 0 {
					t.Fatalf("tier %d: %d entries, %d chunks after Clear", tv.index, tv.entries(), tv.usedChunks())
				}
			}
			seq := s.Seq()
			if removed, err := s.Clear(); err != nil || removed != 0 || s.Seq() != seq {
				t.Fatalf("Clear of an empty segment: %d, %v, sequence %d -> %d", removed, err, seq, s.Seq())
			}
		})
	}
}

// TestCheckReportsAClearCutShort: the clearing word at the odd sequence is
// a Clear under way or dead, which Check reports; Repair (Rebuild) finishes
// it, as recovery does. The word at any other value is damage to a
// reserved word, which no recovery acts on: the entries stay.
func TestCheckReportsAClearCutShort(t *testing.T) {
	tb, _ := newTable(t, opsCases[0].p)
	fillSegment(t, tb, 60)
	s := tb.Segment(0)
	n := len(readAllEntries(t, tb))
	// Damage: the word set with the sequence even.
	*s.clearingWord() = 12345
	var problems []string
	s.Check(func(err error) { problems = append(problems, err.Error()) })
	if len(problems) != 1 || !strings.Contains(problems[0], "reserved") {
		t.Fatalf("check of a damaged clearing word: %q", problems)
	}
	if _, rebuilt, err := s.Repair(); err != nil || !rebuilt {
		t.Fatalf("Repair: %v %v", rebuilt, err)
	}
	if got := len(readAllEntries(t, tb)); got != n {
		t.Fatalf("Repair of a damaged clearing word kept %d of %d entries", got, n)
	}
	// A Clear dead after its word: the sequence odd, the word naming it.
	*s.seq++
	*s.clearingWord() = uint32(*s.seq)
	problems = nil
	s.Check(func(err error) { problems = append(problems, err.Error()) })
	if len(problems) == 0 || !strings.Contains(problems[0], "Clear") {
		t.Fatalf("check of a Clear cut short: %q", problems)
	}
	rep, rebuilt, err := s.Repair()
	if err != nil || !rebuilt || !rep.Cleared {
		t.Fatalf("Repair: %+v %v %v", rep, rebuilt, err)
	}
	if got := len(readAllEntries(t, tb)); got != 0 {
		t.Fatalf("Repair of a Clear cut short left %d entries", got)
	}
	s.Check(func(err error) { t.Error(err) })
}
