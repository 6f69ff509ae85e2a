package segment

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzOps drives a tiny table with an operation sequence decoded from the
// input and checks it against a Go map: any divergence, panic or broken
// invariant is a failure.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(bytes.Repeat([]byte{0, 7, 200, 1, 7, 3}, 40))
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 3000 {
			return
		}
		tb, _ := newTable(t, Params{Entries: 32, AverageKeySize: 4, AverageValueSize: 8, MaxBloatFactor: 2, Segments: 2})
		model := map[string][]byte{}
		for i := 0; i+2 < len(prog); i += 3 {
			op, k, n := prog[i]%4, []byte{'k', prog[i+1] % 64}, int(prog[i+2])
			h := hashOf(k)
			s := tb.For(h)
			switch op {
			case 0, 1:
				v := bytes.Repeat([]byte{prog[i+2]}, n%100)
				if _, err := s.Put(h, k, v, Replace); err != nil {
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
				v, found, err := s.Get(h, k, nil)
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
func FuzzEntryDecoding(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 200, 0, 0, 0, 3}, uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 64), uint16(5))
	f.Fuzz(func(t *testing.T, junk []byte, at uint16) {
		tb, _ := newTable(t, Params{Entries: 32, AverageKeySize: 4, AverageValueSize: 8, MaxBloatFactor: 2, Segments: 1})
		s := tb.Segment(0)
		for i := range 10 {
			k := []byte{'k', byte(i)}
			if _, err := s.Put(hashOf(k), k, []byte("value"), Replace); err != nil {
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
			_, _, _ = s.Get(hashOf(k), k, nil)
			keys, hashes = append(keys, k), append(hashes, hashOf(k))
		}
		tb.Prefetch(hashes, keys) // reads the damage too, and must not trip on it
		_ = s.Entries(func(k, v []byte) bool { return true })
		for i := range 40 {
			k := []byte{'k', byte(i % 14)}
			_, _ = s.Put(hashOf(k), k, make([]byte, i*7%60), Replace)
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
			if _, _, err := s.Get(hashOf(k), k, nil); err != nil {
				t.Errorf("Get after Rebuild: %v", err)
			}
		}
		k := []byte("after")
		if _, err := s.Put(hashOf(k), k, []byte("rebuild"), Replace); err != nil {
			t.Errorf("Put after Rebuild: %v", err)
		}
	})
}
