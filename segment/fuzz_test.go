//go:build linux

package segment

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// FuzzOps drives a tiny table with an operation sequence decoded from the
// input and checks it against a Go map: any divergence, panic or broken
// invariant is a failure. Inputs of odd length run a table sized for
// 160-byte values, whose lookups also request a home run's later lines
// (homeTail): checked, with -tags sharedmap_checked, to lie in the tier.
// Either table fills, links overflow tiers and compacts (of 300 random
// 3000-byte inputs, 255 and 300 linked a tier, 3,736 and 12,103
// compactions in all).
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(bytes.Repeat([]byte{0, 7, 200, 1, 7, 3}, 40))
	f.Add(bytes.Repeat([]byte{0, 7, 99, 3, 7, 0}, 41)[:241])
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 3000 {
			return
		}
		valueSize := 8
		if len(prog)%2 == 1 {
			valueSize = 160
		}
		tb, _ := newTable(t, Params{Entries: 32, AverageKeySize: 4, AverageValueSize: valueSize, MaxBloatFactor: 2, Segments: 2})
		if (valueSize > 8) != (tb.geom.homeTail != 0) {
			t.Fatalf("values of %d bytes: homeTail %d", valueSize, tb.geom.homeTail)
		}
		model := map[string][]byte{}
		for i := 0; i+2 < len(prog); i += 3 {
			op, k, n := prog[i]%4, []byte{'k', prog[i+1] % 64}, int(prog[i+2])
			h := hashOf(k)
			s := tb.For(h)
			switch op {
			case 0, 1:
				// Values up to 12 times the layout's average, so that
				// both tables fill, link overflow tiers and compact.
				v := bytes.Repeat([]byte{prog[i+2]}, n*valueSize/8%(valueSize*25/2))
				if _, err := s.put(h, k, v, Replace); err != nil {
					if errors.Is(err, ErrFull) {
						continue
					}
					t.Fatal(err)
				}
				model[string(k)] = v
			case 2:
				existed, err := s.Delete(h, k)
				if err != nil {
					t.Fatal(err)
				}
				if _, had := model[string(k)]; had != existed {
					t.Fatalf("delete %q existed=%v model=%v", k, existed, had)
				}
				delete(model, string(k))
			case 3:
				v, found, err := s.get(h, k, nil)
				want, had := model[string(k)]
				if err != nil || found != had || !bytes.Equal(v, want) {
					t.Fatalf("get %q = %q %v %v, want %q %v", k, v, found, err, want, had)
				}
			}
		}
		checkTable(t, tb, model)
	})
}

// FuzzEntryDecoding writes arbitrary bytes over a tier's entry space and
// slots (and, with enough of them, its link, allocation bitmap and
// lowest-free hint), then looks keys up, iterates, and writes values of
// growing sizes, so that entries move and the tier is compacted over the
// damage: the table must report corruption or answer, never panic or loop.
// Then a rebuild, as Repair does, must leave a segment that checks clean.
// An odd at makes a file without tier stamps, whose rebuild follows a
// damaged link only to a tier whose owner and position words say so.
func FuzzEntryDecoding(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 200, 0, 0, 0, 3}, uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 64), uint16(5))
	f.Add([]byte{1, 0, 0, 3, 200, 0, 0, 0, 3}, uint16(1))
	f.Fuzz(func(t *testing.T, junk []byte, at uint16) {
		testUnstamped = at%2 == 1
		tb, _ := newTable(t, Params{Entries: 32, AverageKeySize: 4, AverageValueSize: 8, MaxBloatFactor: 2, Segments: 1})
		testUnstamped = false
		s := tb.Segment(0)
		for i := range 10 {
			k := []byte{'k', byte(i)}
			if _, err := s.put(hashOf(k), k, []byte("value"), Replace); err != nil {
				t.Fatal(err)
			}
		}
		tv := tb.tier(0)
		off := int(at) % len(tv.space)
		copy(tv.space[off:], junk)
		if len(junk) >= 8 {
			// Also damage a slot and the tier link.
			tv.slots[int(at)%len(tv.slots)] = uint64(junk[0])<<40 | uint64(junk[1])<<32 | uint64(junk[2])
			tv.header[thNext/8] = uint64(junk[3]) % 8
			tv.bitmap[int(junk[4])%len(tv.bitmap)] ^= uint64(junk[5]) << (junk[6] % 56)
			tv.header[thLowestFree/8] = uint64(junk[7]) * 3
		}
		var keys [][]byte
		var hashes []uint64
		for i := range 12 {
			k := []byte{'k', byte(i)}
			_, _, _ = s.get(hashOf(k), k, nil)
			keys, hashes = append(keys, k), append(hashes, hashOf(k))
		}
		tb.Prefetch(hashes, keys) // reads the damage too, and must not trip on it
		_ = s.Entries(func(k, v []byte) bool { return true })
		for i := range 40 {
			k := []byte{'k', byte(i % 14)}
			_, _ = s.put(hashOf(k), k, make([]byte, i*7%60), Replace)
			if i%5 == 0 {
				_, _ = s.Delete(hashOf(k), k)
			}
		}
		// Whatever the damage did, a rebuild (Repair's) leaves a segment
		// Check passes, that answers and takes writes.
		if _, err := s.Rebuild(); err != nil {
			t.Fatalf("Rebuild: %v", err)
		}
		s.Check(func(err error) { t.Errorf("after Rebuild: %v", err) })
		for i := range 14 {
			k := []byte{'k', byte(i)}
			if _, _, err := s.get(hashOf(k), k, nil); err != nil {
				t.Errorf("Get after Rebuild: %v", err)
			}
		}
		k := []byte("after")
		if _, err := s.put(hashOf(k), k, []byte("rebuild"), Replace); err != nil {
			t.Errorf("Put after Rebuild: %v", err)
		}
	})
}

// FuzzDecodeLayout: a layout record with any parameters, its derived fields
// what those parameters give (so that it passes the record's own
// consistency check) or zero where they give nothing, never makes
// DecodeLayout panic, and a record it accepts describes a file whose areas
// lie in order within it, with tiers that can hold entries. (Before the
// parameters were checked on decoding, a key size of 1 with a value size
// of -17 divided by zero, and a NaN bloat factor wrapped the tier count.)
func FuzzDecodeLayout(f *testing.F) {
	f.Add(int64(100), int64(8), int64(8), 2.0, int64(1), true, true)
	f.Add(int64(100), int64(1), int64(-17), 2.0, int64(1), true, true)
	f.Add(int64(-1), int64(8), int64(8), 2.0, int64(1), true, true)
	f.Add(int64(100), int64(8), int64(8), math.NaN(), int64(1), true, true)
	f.Add(int64(100), int64(8), int64(8), 1e30, int64(1), false, true)
	f.Add(int64(100), int64(8), int64(8), 2.0, int64(3), true, false)
	f.Add(int64(10), int64(8), int64(8), 2.0, int64(1024), true, true)
	f.Add(int64(1<<40), int64(1<<20), int64(1<<20), 1000.0, int64(MaxSegments), true, true)
	f.Fuzz(func(t *testing.T, entries, key, value int64, bloat float64, segments int64, cache, undo bool) {
		p := Params{Entries: int(entries), AverageKeySize: int(key), AverageValueSize: int(value), MaxBloatFactor: bloat,
			Segments: int(segments), Cache: cache, NoUndo: !undo}
		l := Layout{Params: p, Segments: segments, Checksums: true, Stats: true, MoveCounters: true, Undo: undo}
		func() {
			defer func() { _ = recover() }() // what the parameters give, where newLayout gets that far
			if d, err := newLayout(p, 4096, true, true, undo, 0); err == nil {
				d.MoveCounters = true
				l = d
			}
		}()
		const fileSize = 1 << 46
		got, err := DecodeLayout(l.Encode(), 4096, fileSize)
		if err != nil {
			if !errors.Is(err, ErrBadLayout) {
				t.Fatalf("DecodeLayout: %v, not ErrBadLayout", err)
			}
			return
		}
		switch {
		case got.Segments < 1 || got.Segments&(got.Segments-1) != 0 || got.Segments > MaxSegments:
			t.Fatalf("accepted %d segments", got.Segments)
		case got.Tiers < got.Segments:
			t.Fatalf("accepted %d tiers for %d segments", got.Tiers, got.Segments)
		case got.Chunks < 64 || got.Chunks%64 != 0 || got.homeChunks < 1 || got.homeRuns < 1 || got.ChunkSize < 16:
			t.Fatalf("accepted %d chunks of %d bytes, home runs of %d chunks (%d)", got.Chunks, got.ChunkSize, got.homeChunks, got.homeRuns)
		case got.Slots < 64 || got.MaxTierEntries > got.Slots || got.MaxTierEntries < 1:
			t.Fatalf("accepted %d slots for %d entries a tier", got.Slots, got.MaxTierEntries)
		case got.entriesOff+got.Chunks*got.ChunkSize > got.TierSize || got.TierSize <= 0:
			t.Fatalf("accepted an entry space of %d chunks of %d at %d in a tier of %d bytes", got.Chunks, got.ChunkSize, got.entriesOff, got.TierSize)
		case !(4096 <= got.GlobalOff && got.GlobalOff < got.SegmentsOff && got.SegmentsOff < got.StatsOff &&
			got.StatsOff <= got.UndoOff && got.UndoOff <= got.TiersOff && got.TiersOff < got.End && got.End <= fileSize):
			t.Fatalf("accepted areas out of order: %+v", got)
		case (got.End-got.TiersOff)/got.TierSize != got.Tiers || (got.End-got.TiersOff)%got.TierSize != 0:
			t.Fatalf("accepted an end %d that is not %d tiers of %d bytes after %d", got.End, got.Tiers, got.TierSize, got.TiersOff)
		}
	})
}
