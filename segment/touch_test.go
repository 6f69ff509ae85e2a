//go:build linux

package segment

import (
	"fmt"
	"testing"
)

// TestTouchDiesAtEveryStep: a Touch killed at any step leaves its entry
// with the old expiry or the new one (in a file without undo records, an
// entry rewritten in place may be lost, as a Put's: documented), and every
// other entry as it was.
func TestTouchDiesAtEveryStep(t *testing.T) {
	p := Params{Entries: 48, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 3, Segments: 1, Cache: true}
	for _, noUndo := range []bool{false, true} {
		for _, large := range []bool{false, true} {
			t.Run(fmt.Sprintf("noundo=%v/large=%v", noUndo, large), func(t *testing.T) {
				p.NoUndo = noUndo
				tb, _ := newTable(t, p)
				tb.SetClock(func() int64 { return 100 })
				fillSegment(t, tb, 40)
				s := tb.Segment(0)
				key := []byte("k001")
				if large {
					key = []byte("k011") // a value past the undo record's room
				}
				pre := readAllEntries(t, tb)
				h := hashOf(key)
				old, _, found, err := s.Expiry(h, key)
				if err != nil || !found {
					t.Fatalf("Expiry of %s: %v %v", key, found, err)
				}
				const touched = 7e9
				steps := dieAtEveryStep(t, tb, func() error {
					ok, err := s.Touch(h, key, touched)
					if err == nil && !ok {
						err = fmt.Errorf("Touch of a live entry reported false")
					}
					return err
				}, func(step int, _ bool, got map[string]string, rep Recovered) {
					exp, _, found, err := s.Expiry(h, key)
					switch {
					case err != nil:
						t.Fatalf("step %d: %v", step, err)
					case !found && noUndo:
					case !found:
						t.Fatalf("step %d: %s lost (%+v)", step, key, rep)
					case exp != old && exp != touched:
						t.Fatalf("step %d: expiry %d, neither %d nor %d", step, exp, old, int64(touched))
					}
					for k, v := range pre {
						if g, ok := got[k]; (ok && g != v) || (!ok && (k != string(key) || !noUndo)) {
							t.Fatalf("step %d: %s = %q (%v), was %q", step, k, g, ok, v)
						}
					}
				})
				if exp, _, _, _ := s.Expiry(h, key); exp != touched {
					t.Fatalf("expiry %d after Touch, want %d", exp, int64(touched))
				}
				t.Logf("%d steps", steps)
			})
		}
	}
}

// TestTouchAndExpiry: Touch extends a live entry, reports false and
// leaves an expired or absent one alone (no expired entry comes back),
// and Expiry reports what Touch set; in a plain map Touch changes nothing.
func TestTouchAndExpiry(t *testing.T) {
	p := opsCases[2].p
	tb, _ := newTable(t, p)
	now := int64(100)
	tb.SetClock(func() int64 { return now })
	s := tb.Segment(0)
	put := func(k string, exp int64) {
		if _, err := s.PutExpiring(hashOf([]byte(k)), []byte(k), []byte("v-"+k), exp, Replace); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(k string, exp int64) bool {
		ok, err := s.Touch(hashOf([]byte(k)), []byte(k), exp)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	expiry := func(k string) (int64, int64, bool) {
		exp, at, found, err := s.Expiry(hashOf([]byte(k)), []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return exp, at, found
	}
	put("live", 200)
	put("dead", 50)
	put("never", 0)
	if !touch("live", 1000) || touch("dead", 1000) || touch("absent", 1000) || !touch("never", 300) {
		t.Fatal("Touch reported wrong")
	}
	if exp, at, found := expiry("live"); !found || exp != 1000 || at != 100 {
		t.Fatalf("live: %d at %d, %v", exp, at, found)
	}
	if _, _, found := expiry("dead"); found {
		t.Fatal("a touched expired entry came back")
	}
	if exp, _, found := expiry("never"); !found || exp != 300 {
		t.Fatalf("never: %d %v", exp, found)
	}
	if !touch("never", 0) {
		t.Fatal("Touch to no expiry")
	}
	if exp, _, found := expiry("never"); !found || exp != 0 {
		t.Fatalf("never again: %d %v", exp, found)
	}
	now = 1000
	if _, _, found := expiry("live"); found {
		t.Fatal("expired at its touched expiry: still found")
	}
	if v, found, err := s.get(hashOf([]byte("never")), []byte("never"), nil); err != nil || !found || string(v) != "v-never" {
		t.Fatalf("value after Touch: %q %v %v", v, found, err)
	}
	plain, _ := newTable(t, opsCases[0].p)
	ps := plain.Segment(0)
	if _, err := ps.put(hashOf([]byte("k")), []byte("k"), []byte("v"), Replace); err != nil {
		t.Fatal(err)
	}
	seq := ps.Seq()
	if ok, err := ps.Touch(hashOf([]byte("k")), []byte("k"), 5); !ok || err != nil || ps.Seq() != seq {
		t.Fatalf("Touch in a plain map: %v %v, sequence moved %v", ok, err, ps.Seq() != seq)
	}
	if exp, _, found, err := ps.Expiry(hashOf([]byte("k")), []byte("k")); exp != 0 || !found || err != nil {
		t.Fatalf("Expiry in a plain map: %d %v %v", exp, found, err)
	}
}
