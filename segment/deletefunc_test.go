//go:build linux

package segment

import (
	"maps"
	"testing"
)

// TestDeleteFuncDiesAtEveryStep: a DeleteFunc killed at any step leaves
// every entry whole, removed only if fn chose it, and the segment
// consistent once recovered.
func TestDeleteFuncDiesAtEveryStep(t *testing.T) {
	for _, c := range opsCases {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, c.p)
			tb.SetClock(func() int64 { return 100 })
			fillSegment(t, tb, 90)
			wantTiers(t, tb)
			s := tb.Segment(0)
			pre := readAllEntries(t, tb)
			chosen := func(k []byte) bool { return k[len(k)-1]%2 == 0 }
			steps := dieAtEveryStep(t, tb, func() error {
				_, err := s.DeleteFunc(func(k, _ []byte) bool { return chosen(k) })
				return err
			}, func(step int, _ bool, got map[string]string, rep Recovered) {
				for k, v := range pre {
					g, ok := got[k]
					if ok && g != v || !ok && !chosen([]byte(k)) {
						t.Fatalf("step %d: %s = %q (%v), was %q (%+v)", step, k, g, ok, v, rep)
					}
				}
				if len(got) > len(pre) {
					t.Fatalf("step %d: %d entries, %d before", step, len(got), len(pre))
				}
			})
			got := readAllEntries(t, tb)
			for k := range pre {
				if _, ok := got[k]; ok == chosen([]byte(k)) {
					t.Fatalf("after DeleteFunc: %s present %v", k, ok)
				}
			}
			t.Logf("%d steps", steps)
		})
	}
}

// TestDeleteFuncCallsEachLiveEntryOnce: fn sees every live entry once
// (none expired), with its value as Get returns it; DeleteFunc removes
// what fn chose and counts it, in slot tables whose probe runs wrap
// around their end.
func TestDeleteFuncCallsEachLiveEntryOnce(t *testing.T) {
	for _, c := range opsCases {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, c.p)
			tb.SetClock(func() int64 { return 100 })
			s := tb.Segment(0)
			for round := range 5 {
				fillSegment(t, tb, 90)
				pre := readAllEntries(t, tb)
				seen := map[string]int{}
				before := s.Counters().Deletes
				n, err := s.DeleteFunc(func(k, v []byte) bool {
					seen[string(k)]++
					if want, ok := pre[string(k)]; !ok || want != string(v) {
						t.Errorf("fn got %s = %q, Get has %q (%v)", k, v, want, ok)
					}
					return (len(k)+round)%3 != 0
				})
				if err != nil {
					t.Fatal(err)
				}
				if !maps.EqualFunc(seen, pre, func(n int, _ string) bool { return n == 1 }) {
					t.Fatalf("round %d: fn saw %d keys (counts %v), %d live", round, len(seen), seen, len(pre))
				}
				want := 0
				for k := range pre {
					if (len(k)+round)%3 != 0 {
						want++
					}
				}
				if n != int64(want) || s.Counters().Deletes-before != int64(want) {
					t.Fatalf("removed %d, counted %d, want %d", n, s.Counters().Deletes-before, want)
				}
				if got := readAllEntries(t, tb); len(got) != len(pre)-want {
					t.Fatalf("%d left, want %d", len(got), len(pre)-want)
				}
				s.Check(func(err error) { t.Error(err) })
			}
		})
	}
}

// TestDeleteFuncPanics: a panic in fn ends the call with nothing removed
// and the lock released.
func TestDeleteFuncPanics(t *testing.T) {
	tb, _ := newTable(t, opsCases[0].p)
	fillSegment(t, tb, 60)
	s := tb.Segment(0)
	n := s.Len()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		calls := 0
		_, _ = s.DeleteFunc(func(k, v []byte) bool {
			if calls++; calls == 10 {
				panic("fn")
			}
			return true
		})
	}()
	if s.Len() != n || !s.Lock().State().Free() {
		t.Fatalf("after a panic in fn: %d entries of %d, lock %v", s.Len(), n, s.Lock().State())
	}
	s.Check(func(err error) { t.Error(err) })
}
