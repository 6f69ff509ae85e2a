package segment

import (
	"math/rand/v2"
	"testing"
)

// TestInferEnumeratesEveryLayout: for layouts newLayout makes from random
// parameters, the enumeration InferLayout scores holds one that reads the
// file as the real one does (the same tiers, slots and entry space),
// given what the areas before the segments say.
func TestInferEnumeratesEveryLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	n := 300
	if testing.Short() {
		n = 60
	}
	tried := 0
	for i := range n {
		p := Params{
			Entries:          1 + rng.IntN(1<<rng.IntN(22)),
			AverageKeySize:   1 + rng.IntN(1<<rng.IntN(10)),
			AverageValueSize: rng.IntN(1 << rng.IntN(15)),
			MaxBloatFactor:   1 + rng.Float64()*float64(rng.IntN(5)),
			Cache:            rng.IntN(2) == 0,
			NoUndo:           rng.IntN(3) == 0,
		}
		p.Segments = 1 << rng.IntN(8)
		if p.Segments > p.Entries {
			p.Segments = 1
		}
		stats := rng.IntN(4) != 0
		global := int64(4096 * (2 + rng.IntN(100)))
		l, err := newLayout(p, global, true, stats, !p.NoUndo, 0)
		if err != nil || l.End > 1<<34 {
			continue
		}
		l.MoveCounters, l.FastLedgers = stats, true
		tried++
		want := readKeyOf(&l)
		found := false
		b := InferBase{GlobalOff: global, Segments: l.Segments, Stats: stats, FastLedgers: true}
		for _, undo := range []bool{true, false} {
			_ = eachLayout(b, undo, l.End, func(c Layout) error {
				if readKeyOf(&c) == want {
					found = true
				}
				return nil
			})
		}
		if !found {
			t.Fatalf("case %d: %+v (%s) is not among the layouts enumerated for its size", i, p, describe(&l))
		}
	}
	if tried < n/2 {
		t.Fatalf("only %d of %d random parameter sets made a layout", tried, n)
	}
}

// TestEntriesFor: every count of entries per tier that some map has is
// found from it, with a count of entries that gives it back.
func TestEntriesFor(t *testing.T) {
	for _, segs := range []int64{1, 2, 64, 1024, 1 << 20} {
		seen := map[int64]bool{}
		for e := int64(1); e < 100000; e = e*11/10 + 1 {
			seen[tierEntries(e*segs, segs)] = true
		}
		for per := range seen {
			e, ok := entriesFor(per, segs)
			if !ok || tierEntries(e, segs) != per {
				t.Errorf("%d segments, %d per tier: entriesFor = %d, %v", segs, per, e, ok)
			}
		}
	}
}
