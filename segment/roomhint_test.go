//go:build linux

package segment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// longChainParams lays out a map of 2 segments whose chains grow long:
// 400 entries, and a pool for 64 times as many.
var longChainParams = Params{Entries: 400, AverageKeySize: 8, AverageValueSize: 24, MaxBloatFactor: 64, Segments: 2}

// segmentKeys returns n keys of segment seg, key-<from> on, and where the
// next would start.
func segmentKeys(tb *Table, seg int64, from, n int) ([][]byte, int) {
	var keys [][]byte
	for ; len(keys) < n; from++ {
		k := fmt.Appendf(nil, "key-%06d", from)
		if tb.segmentOf(hashOf(k)) == seg {
			keys = append(keys, k)
		}
	}
	return keys, from
}

// fillChain puts keys into segment 0 until its chain has at least tiers
// tiers and its last holds a few entries (room left), and returns them and
// the next key number.
func fillChain(t *testing.T, tb *Table, tiers int64) ([][]byte, int) {
	t.Helper()
	s := tb.Segment(0)
	var keys [][]byte
	next := 0
	for s.Tiers() < tiers || entriesIn(tb, lastTier(t, s)) < 4 {
		k, n := segmentKeys(tb, 0, next, 1)
		next = n
		if _, err := s.put(hashOf(k[0]), k[0], bytes.Repeat(k[0], 3), Replace); err != nil {
			t.Fatalf("put %s: %v", k[0], err)
		}
		keys = append(keys, k[0])
	}
	return keys, next
}

// lastTier is the last tier of s's chain.
func lastTier(t *testing.T, s *Segment) int64 {
	t.Helper()
	chain, err := s.chainTiers()
	if err != nil {
		t.Fatal(err)
	}
	return chain[len(chain)-1].index
}

// entriesIn is tier t's count of entries.
func entriesIn(tb *Table, t int64) uint64 {
	tv := tb.tier(t)
	return tv.entries()
}

// mustFind fails the test unless every key of keys is in tb with the value
// fillChain gives it, and segment 0 checks clean.
func mustFind(t *testing.T, tb *Table, keys [][]byte) {
	t.Helper()
	for _, k := range keys {
		v, found, err := tb.For(hashOf(k)).GetChecked(hashOf(k), k, nil)
		if err != nil || !found || !bytes.Equal(v, bytes.Repeat(k, 3)) {
			t.Fatalf("Get %s = %q, %v, %v", k, v, found, err)
		}
	}
	tb.Segment(0).Check(func(err error) { t.Errorf("check: %v", err) })
}

// TestRoomHintStaysInTheChain: a process's room hint never places an entry
// in a tier outside the segment's chain, nor away from the room that
// another process's Clear made: it names the tier it last placed an entry
// in, and another process (a second table on the file) then cuts the
// chain with a Repair that gives that tier up, or clears the segment.
func TestRoomHintStaysInTheChain(t *testing.T) {
	t.Run("given up by a repair", func(t *testing.T) {
		tb, path := newTable(t, longChainParams)
		if !tb.layout.Stamps {
			t.Fatal("the long-chain table has no stamps: room hints, which need them, go untested")
		}
		_, next := fillChain(t, tb, 6)
		s := tb.Segment(0)
		hinted, ok := s.roomHint().tier()
		if !ok || hinted != lastTier(t, s) {
			t.Fatalf("the hint is %d (%v), the chain's last tier %d", hinted, ok, lastTier(t, s))
		}
		other := openTable(t, path, tb.layout, false)
		chain, _ := other.Segment(0).chainTiers()
		cut := chain[2].index // a stamp that says another position: the chain is cut there
		other.writeStamp(cut, other.layout.overflowStamp(cut, 0, 99))
		if _, rebuilt, err := other.Segment(0).Repair(); err != nil || !rebuilt {
			t.Fatalf("Repair: rebuilt %v, %v", rebuilt, err)
		}
		if st, ok := tb.readStamp(hinted); !ok || st.owner != 0 {
			t.Fatalf("the hinted tier's stamp after the repair is %+v (%v), not given up", st, ok)
		}
		fresh, _ := segmentKeys(tb, 0, next, 8)
		before := entriesIn(tb, hinted)
		for _, k := range fresh {
			if _, err := s.put(hashOf(k), k, bytes.Repeat(k, 3), Replace); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
		}
		if got := entriesIn(tb, hinted); got != before {
			t.Errorf("the given-up tier %d holds %d entries after the inserts, %d before", hinted, got, before)
		}
		mustFind(t, other, fresh)
	})
	t.Run("cleared", func(t *testing.T) {
		tb, path := newTable(t, longChainParams)
		_, next := fillChain(t, tb, 6)
		s := tb.Segment(0)
		other := openTable(t, path, tb.layout, false)
		if _, err := other.Segment(0).Clear(); err != nil {
			t.Fatal(err)
		}
		// Half a tier's entries, more than their home runs take without
		// collisions: all of them belong in the first tier.
		fresh, _ := segmentKeys(tb, 0, next, int(tb.layout.MaxTierEntries/2))
		for _, k := range fresh {
			if _, err := s.put(hashOf(k), k, bytes.Repeat(k, 3), Replace); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
		}
		if got := entriesIn(tb, 0); got != uint64(len(fresh)) {
			t.Errorf("after a clear the first tier took %d of %d inserts", got, len(fresh))
		}
		mustFind(t, other, fresh)
	})
}

// TestRoomHintUnusedWithoutStamps: in a file without stamps no hint is
// kept: nothing there says a tier is still in its chain.
func TestRoomHintUnusedWithoutStamps(t *testing.T) {
	testUnstamped = true
	tb, _ := newTable(t, longChainParams)
	testUnstamped = false
	if tb.layout.Stamps {
		t.Fatal("the layout has stamps")
	}
	keys, _ := fillChain(t, tb, 6)
	for seg := range tb.layout.Segments {
		if h, ok := tb.Segment(int(seg)).roomHint().tier(); ok {
			t.Errorf("segment %d keeps a hint, tier %d", seg, h)
		}
	}
	mustFind(t, tb, keys)
}

// TestRoomHintKeepsDensityOnChurn: deletes and inserts of values of varied
// sizes in long chains leave no more tiers in use, and their chunks no
// less used, than the same churn in a file without stamps, whose inserts
// look for room from the first tier, as all did before hints; and the
// entries stand about as far down their chains (lookups walk to them):
// room a delete leaves before the hinted tier is skipped only for a while.
func TestRoomHintKeepsDensityOnChurn(t *testing.T) {
	seed := testSeed(t)
	type result struct {
		tiers int64
		fill  float64
		depth float64 // mean position of an entry's tier in its chain
	}
	churn := func(stamps bool) result {
		testUnstamped = !stamps
		tb, _ := newTable(t, longChainParams)
		testUnstamped = false
		r := rand.New(rand.NewPCG(seed, 7))
		value := make([]byte, 48)
		var keys [][]byte
		next := 0
		put := func() {
			k := fmt.Appendf(nil, "key-%07d", next)
			next++
			if _, err := tb.For(hashOf(k)).put(hashOf(k), k, value[:r.IntN(len(value))], Replace); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
			keys = append(keys, k)
		}
		for range 12000 {
			put()
		}
		for range 60000 {
			i := r.IntN(len(keys))
			k := keys[i]
			if _, err := tb.For(hashOf(k)).Delete(hashOf(k), k); err != nil {
				t.Fatal(err)
			}
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			put()
		}
		res := result{tiers: tb.layout.Segments + tb.ExtraTiersInUse()}
		res.fill = float64(tb.UsedChunks()) / float64(res.tiers*tb.layout.Chunks)
		entries := 0
		for seg := range tb.layout.Segments {
			chain, err := tb.Segment(int(seg)).chainTiers()
			if err != nil {
				t.Fatal(err)
			}
			for pos := range chain {
				res.depth += float64(pos) * float64(chain[pos].entries())
				entries += int(chain[pos].entries())
			}
		}
		res.depth /= float64(entries)
		return res
	}
	hinted, walked := churn(true), churn(false)
	t.Logf("with hints %+v, without %+v", hinted, walked)
	if hinted.tiers > walked.tiers || hinted.fill < walked.fill*0.99 {
		t.Errorf("with hints the churn leaves %d tiers %.3f full, without %d tiers %.3f full", hinted.tiers, hinted.fill, walked.tiers, walked.fill)
	}
	// Without the full walk every roomRewalk placements, entries stood
	// 3.5 to 5% further down; with it, under 1%.
	if hinted.depth > walked.depth*1.02 {
		t.Errorf("with hints entries stand at position %.2f of their chains on average, without at %.2f", hinted.depth, walked.depth)
	}
}
