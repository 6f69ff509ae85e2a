//go:build linux

package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// TestSameKey: the inline compare of 8- to 16-byte keys must answer as
// bytes.Equal does. Its first version read (A^B)|C^D as ((A^B)|C)^D, so a
// stored key whose bits were a subset of the looked-up key's matched it.
func TestSameKey(t *testing.T) {
	for _, tc := range []struct {
		stored, key string
	}{
		{"@@@@@@@@", "AAAAAAAA"},                 // stored bits a subset of the key's
		{"`aaaaaaacccccccc", "aaaaaaaacccccccc"}, // same suffix, prefixes differ in a bit the suffix has
		{"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "key-0001zz"},
		{"key-000000000001", "key-000000000002"},
		{"abcdefghi", "abcdefghj"},
		{"xbcdefgh", "abcdefgh"},
	} {
		if sameKey([]byte(tc.stored), []byte(tc.key)) {
			t.Errorf("sameKey(%q, %q) = true", tc.stored, tc.key)
		}
	}
	for n := 0; n <= 40; n++ {
		k := make([]byte, n)
		for i := range k {
			k[i] = byte('a' + i)
		}
		if !sameKey(append([]byte(nil), k...), k) {
			t.Errorf("sameKey of two copies of a %d-byte key = false", n)
		}
		for i := range k {
			other := append([]byte(nil), k...)
			other[i] ^= 1
			if sameKey(other, k) {
				t.Errorf("sameKey: %d-byte keys differing in byte %d compare equal", n, i)
			}
		}
	}
}

// TestKeysSharingATag: keys whose hashes pick the same segment and the same
// tag are told apart by their bytes in every fast path: Get, and Put's
// overwrite, which must not land on the other key.
func TestKeysSharingATag(t *testing.T) {
	for _, pair := range [][2]string{{"@@@@@@@@", "AAAAAAAA"}, {"`aaaaaaacccccccc", "aaaaaaaacccccccc"}, {"ab", "abc"}} {
		tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
		s := tb.Segment(0)
		const h = uint64(0x9abcdef000000000) // one hash for both keys
		k1, k2 := []byte(pair[0]), []byte(pair[1])
		put := func(k []byte, v string) {
			t.Helper()
			if _, err := s.put(h, k, []byte(v), Replace); err != nil {
				t.Fatal(err)
			}
		}
		get := func(k []byte, want string) {
			t.Helper()
			v, found, err := s.get(h, k, nil)
			if err != nil || !found || string(v) != want {
				t.Errorf("Get(%q) = %q, %v, %v; want %q", k, v, found, err, want)
			}
		}
		put(k1, "value of one")
		if v, found, err := s.get(h, k2, nil); err != nil || found {
			t.Errorf("Get(%q) with only %q stored = %q, %v, %v", k2, k1, v, found, err)
		}
		put(k2, "value of two")
		get(k1, "value of one")
		get(k2, "value of two")
		put(k2, "value of 2!!")
		put(k1, "value of 1!!")
		get(k1, "value of 1!!")
		get(k2, "value of 2!!")
		if s.Len() != 2 {
			t.Errorf("%q and %q: Len %d, want 2", k1, k2, s.Len())
		}
	}
}

// TestFastPathsReportDamage: an entry whose header cannot be decoded, met
// by a lookup's probe, is reported as corruption by every path, as find
// does, whether it is the key's own entry or another key's sharing the
// tag; the fast paths may not skip it and answer.
func TestFastPathsReportDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(hd []byte)
	}{
		{"chunk count 0", func(hd []byte) { binary.LittleEndian.PutUint32(hd[ehChunks:], 0) }},
		{"key length and chunk count", func(hd []byte) {
			binary.LittleEndian.PutUint32(hd[ehKeyLen:], 9)
			binary.LittleEndian.PutUint32(hd[ehChunks:], 0)
		}},
		{"value past the run", func(hd []byte) { binary.LittleEndian.PutUint32(hd[ehValueLen:], 1<<20) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: 16, MaxBloatFactor: 1, Segments: 1})
			s := tb.Segment(0)
			const h = uint64(0x1234567800000000)
			for _, k := range []string{"damaged!", "a"} {
				if _, err := s.put(h, []byte(k), []byte("v"), Replace); err != nil {
					t.Fatal(err)
				}
			}
			tv := tb.tier(0)
			home := uint64(uint32(h>>tb.layout.tagShift)) & tb.layout.slotMask
			c := slotChunk(tv.slots[home]) // the first key's entry
			tc.damage(tv.space[c*tb.layout.ChunkSize:])
			for _, k := range []string{"damaged!", "a", "absent"} {
				if _, err := s.Has(h, []byte(k)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Has(%s) = %v: the test's damage is not what find reports", k, err)
				}
				v, found, err := s.get(h, []byte(k), nil)
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("Get(%s) = %q, %v, %v over a damaged entry; want ErrCorrupt", k, v, found, err)
				}
				if _, _, _, found, decided := tb.lookupHome(0, h, []byte(k)); decided && found && k != "a" {
					t.Errorf("lookupHome(%s) decided found over a damaged entry", k)
				}
			}
		})
	}
}

// TestFastPathsAgreeWithFind fills a tier with random slots and headers,
// many of them damaged, and compares what TryGet and lookupHome answer
// with find, the lookup under the usual rules: when the fast paths answer
// at all, they must answer as find does, and never where find reports
// corruption. The junk is biased to the edges (0, the bounds, 2^32-1), and
// keys of every length class sameKey treats apart. Values of 300 bytes on
// average make TryGet request a home run's later lines too (homeTail),
// which a checked build checks lie in the tier.
func TestFastPathsAgreeWithFind(t *testing.T) {
	trials := 40000
	if testing.Short() {
		trials = 5000
	}
	for _, c := range []struct {
		cache bool
		value int
	}{{false, 16}, {true, 16}, {false, 300}, {true, 300}} {
		cache := c.cache
		t.Run(fmt.Sprintf("cache=%v,value=%d", cache, c.value), func(t *testing.T) {
			tb, _ := newTable(t, Params{Entries: 64, AverageKeySize: 8, AverageValueSize: c.value, MaxBloatFactor: 2, Segments: 2, Cache: cache})
			if (c.value > 64) != (tb.geom.homeTail != 0) {
				t.Fatalf("values of %d bytes: homeTail %d", c.value, tb.geom.homeTail)
			}
			l := &tb.layout
			rng := uint64(12345)
			next := func() uint64 { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng }
			edge := func(max uint64) uint64 {
				switch next() % 6 {
				case 0:
					return 0
				case 1:
					return 0xffffffff
				case 2:
					return max
				case 3:
					return max + 1
				case 4:
					return max - 1
				}
				return next() % (max + 2)
			}
			keyLens := []int{0, 1, 7, 8, 9, 15, 16, 17, 40}
			answered := 0
			for trial := range trials {
				seg := int64(next() & 1)
				tv := tb.tier(seg)
				clear(tv.slots)
				clear(tv.space)
				tv.header[thNext/8] = 0
				n := keyLens[next()%uint64(len(keyLens))]
				key := make([]byte, n)
				for i := range key {
					key[i] = byte(next() % 3)
				}
				h := next()&^uint64(l.Segments-1) | uint64(seg)
				tag := uint32(h >> l.tagShift)
				home := uint64(tag) & l.slotMask
				for j := uint64(0); j < next()%4; j++ {
					slot := uint64(tag)<<32 | (edge(uint64(l.Chunks))+1)&0xffffffff
					switch next() % 4 {
					case 0:
						slot = next()
					case 1:
						// Its own tag and any chunk number: one beyond the
						// tier sends an unchecked load out of it (caught with
						// -tags sharedmap_checked).
						slot = uint64(tag)<<32 | next()&0xffffffff
					}
					if next()%4 == 0 {
						slot |= refBit
					}
					tv.slots[(home+j)&l.slotMask] = slot
					if c := slotChunk(slot); c >= 0 && c < l.Chunks {
						hd := tv.space[c*l.ChunkSize:]
						klen := uint64(n)
						if next()%4 == 0 {
							klen = edge(64)
						}
						binary.LittleEndian.PutUint32(hd[ehKeyLen:], uint32(klen))
						binary.LittleEndian.PutUint32(hd[ehValueLen:], uint32(edge(uint64(l.Chunks*l.ChunkSize))))
						binary.LittleEndian.PutUint32(hd[ehChunks:], uint32(edge(uint64(l.Chunks-c))))
						rest := hd[entryHeaderSize:]
						if next()%2 == 0 {
							copy(rest, key)
						}
						if cache && len(rest) > n+8 && next()%2 == 0 {
							binary.LittleEndian.PutUint64(rest[n:], next()%3*uint64(1<<62)) // never, long expired, far future
						}
					}
				}
				loc, found, findOK := tb.Segment(int(seg)).find(h, key)
				var want []byte
				live, ok := false, findOK
				if ok && found {
					want, live, ok = tb.userValue(tb.entryValue(&loc.tier, loc.chunk, loc.klen, loc.vlen))
				}
				out, answer := tb.TryGet(h, key, nil)
				if answer != Unsure {
					answered++
					switch {
					case !ok:
						t.Fatalf("trial %d: TryGet answered %v where find reports corruption (key %x)", trial, answer, key)
					case (answer == Found) != (found && live) || string(out) != string(want):
						t.Fatalf("trial %d: TryGet = %q, %v; find: found %v, live %v, %q", trial, out, answer, found, live, want)
					}
				}
				if _, _, _, f, decided := tb.lookupHome(seg, h, key); decided && (!findOK || f != found) {
					t.Fatalf("trial %d: lookupHome decided found=%v; find: found %v, ok %v", trial, f, found, findOK)
				}
			}
			if answered < trials/10 {
				t.Errorf("TryGet answered only %d of %d trials: the junk hides the fast path", answered, trials)
			}
		})
	}
}
